// The FP8 cast statistics kernel table (ops/fp8_stats_kernels.h).
#include <octet/ops/fp8_stats_kernels.h>

namespace octet {

OCTET_DEFINE_KERNEL(fp8_clip_count_kernel, Fp8ClipCountFn);

}  // namespace octet
