// The multi-tensor kernel tables (ops/multi_tensor_kernels.h).
#include <octet/ops/multi_tensor_kernels.h>

namespace octet {

OCTET_DEFINE_KERNEL(multi_tensor_l2_norm, MultiTensorL2NormFn);
OCTET_DEFINE_KERNEL(multi_tensor_clip_scale, MultiTensorClipScaleFn);

}  // namespace octet
