// The optimizer kernel tables (ops/optim_kernels.h). The backends register
// into them; optim/ calls them.
#include <octet/ops/optim_kernels.h>

namespace octet {

OCTET_DEFINE_KERNEL(adamw_kernel, AdamWKernelFn);
OCTET_DEFINE_KERNEL(adamw_param_amax_kernel, AdamWKernelFn);
OCTET_DEFINE_KERNEL(sgd_kernel, SgdKernelFn);
OCTET_DEFINE_KERNEL(unscale_grad_kernel, UnscaleGradKernelFn);

}  // namespace octet
