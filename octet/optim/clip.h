// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_).
//
//   total = sqrt(sum over parameters with a gradient of sum(grad^2))
//   if total > max_norm: every gradient *= max_norm / (total + 1e-6)
//
// The gradients of one device are reduced together by the multi-tensor
// kernels (ops/multi_tensor_kernels.h), deterministically: on the CPU in f64
// over fixed blocks, so the result does not depend on the thread count; on a
// GPU in a few launches for all gradients (f32 accumulation per chunk, chunk
// sums added in f64), with one host read per device for the functions that
// return a double. Gradients of any float dtype (f32, f64, bf16, f16) are
// scaled in place in their own dtype, all gradients of a device by one
// multi-tensor launch per dtype (and 64 tensors); parameters without a
// gradient are skipped. With gradients on several devices the per-device
// norms are combined on the host (sqrt of the sum of their squares).
//
// NOTE [non-finite gradient norm]: when the total is inf or NaN the gradients
// are left untouched and the non-finite total is returned, so the caller sees
// it (log it, skip the step, or let a loss scaler back off). With
// error_if_nonfinite the call throws octet::Error naming the parameters whose
// gradients hold inf/NaN instead.
#pragma once

#include <octet/optim/optimizer.h>

namespace octet::optim {

// Returns the total norm before clipping. Throws octet::Error when max_norm is
// not positive, a gradient is FP8 or integer, or (error_if_nonfinite) the
// total is not finite.
double ClipGradNorm(const NamedTensors& params, double max_norm, bool error_if_nonfinite = false);
double ClipGradNorm(const TensorList& params, double max_norm, bool error_if_nonfinite = false);

// The global L2 norm of the gradients (f64), without clipping.
double GradNorm(const NamedTensors& params);

// NOTE [clipping without a host read]: the same clipping with the norm kept
// on the gradients' device: returns the total norm as a float64 [] tensor
// there and scales the gradients by a device-side coefficient (1 when the
// norm is within max_norm or not finite; NOTE [non-finite gradient norm]),
// so a training step need not wait for the device. The same bits as
// ClipGradNorm: the sums, the f64 coefficient and the multiply in each
// gradient's dtype (f32 for bf16/f16) are the same operations. All gradients
// on one device. GradNormTensor is the norm alone.
Tensor ClipGradNormTensor(const NamedTensors& params, double max_norm);
Tensor GradNormTensor(const NamedTensors& params);

// Multiplies every defined gradient by s in place (its own dtype, computed in
// f32/f64). ClipGradNorm uses it when the gradients are on several devices.
void ScaleGrads(const NamedTensors& params, double s);

}  // namespace octet::optim
