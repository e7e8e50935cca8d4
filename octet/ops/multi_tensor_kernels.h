// Kernel signatures of the multi-tensor family (internal: used by
// optim/clip.cc): one reduction and one in-place scaling over a whole list
// of tensors in a few launches, instead of one launch (and copies) per
// tensor. Every tensor of a list is on one device and contiguous; the
// tensors may have different float dtypes (f32, f64, bf16, f16). The norm is
// a float64 [] tensor on that device, read and written without a host sync.
#pragma once

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// norm[] = sqrt(sum over the tensors of sum over their elements of x^2).
//   xs: tensors of any shape, f32/f64/bf16/f16 (empty list: norm = 0);
//   norm: float64 [] (one element) on the tensors' device.
// Deterministic (no float atomics; the order depends only on the sizes).
// CPU: each tensor summed in float64 over fixed blocks of 16384 elements,
// the blocks and then the tensors added in order (the numbers clip.cc gave
// before this kernel existed). CUDA (ops/cuda/multi_tensor.cu): float32
// accumulation inside fixed chunks (float64 for f64 tensors), chunk sums
// added in float64 in a fixed order by one final block.
using MultiTensorL2NormFn = void(const TensorList& xs, const Tensor& norm);

// Gradient clipping by a device-side norm: with total = norm[] (float64 []),
// when total is finite and coef = max_norm / (total + eps) < 1, every x *= coef
// in place (f64 tensors by coef in float64; f32/bf16/f16 by float(coef) in
// float32, rounded back to their dtype); otherwise nothing is written.
//   xs: contiguous tensors, f32/f64/bf16/f16; norm: float64 [] on their device.
// The caller bumps the tensors' versions.
using MultiTensorClipScaleFn = void(const TensorList& xs, const Tensor& norm, double max_norm, double eps);

OCTET_DECLARE_KERNEL(multi_tensor_l2_norm, MultiTensorL2NormFn);
OCTET_DECLARE_KERNEL(multi_tensor_clip_scale, MultiTensorClipScaleFn);

}  // namespace octet
