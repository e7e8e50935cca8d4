// CUDA kernels of SGD (NOTE [sgd update] in ops/optim_kernels.h) and of the
// loss scaler's unscale, composed of the device's tensor ops.
//
// NOTE [sgd on a device]: the update as tensor ops on the parameter's
// device, in the same compute dtype C (float32, float64 for float64
// parameters), rounding to the parameter's dtype once at the end. A few
// passes instead of one fused kernel: SGD is not on any hot path here (the
// GPT example uses the fused AdamW kernel, ops/cuda/adamw.cu). The caller
// (optim/) holds a NoGradGuard, so none of these ops records autograd nodes.
#include <cmath>

#include <octet/ops/cast.h>
#include <octet/ops/optim_kernels.h>
#include <octet/ops/pointwise.h>

namespace octet::cuda {
namespace {

void SgdCuda(const SgdHyper& h, const Tensor& param, const Tensor& grad, const Tensor& buffer) {
  Tensor p = param;
  Tensor buf = buffer;
  const DType c = p.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  Tensor pc = p.dtype() == c ? p : p.To(c);
  Tensor g = grad.To(c).Clone();
  if (h.weight_decay != 0.0) AddInPlace(g, pc, h.weight_decay);
  if (buf.defined()) {
    MulScalarInPlace(buf, h.momentum);
    AddInPlace(buf, g);
    if (h.nesterov) {
      AddInPlace(g, buf, h.momentum);
    } else {
      g = buf;
    }
  }
  AddInPlace(pc, g, -h.lr);
  if (!pc.is_same(p)) p.CopyFrom_(pc);
}

// The device's pointwise multiply (the same single rounding as the CPU
// kernel), then max |g|, which is NaN or inf exactly when some element is.
// The max is read on the host (NOTE [host reads]): the caller needs the flag.
bool UnscaleGradCuda(const Tensor& grad, double inv_scale) {
  Tensor g = grad;
  MulScalarInPlace(g, inv_scale);
  return !std::isfinite(Amax(g).Item());
}

}  // namespace

OCTET_REGISTER_KERNEL(sgd_kernel, DeviceType::kCUDA, &SgdCuda);
OCTET_REGISTER_KERNEL(unscale_grad_kernel, DeviceType::kCUDA, &UnscaleGradCuda);

}  // namespace octet::cuda
