// Normalisation over the last dim: LayerNorm (also fused with a residual add)
// and RMSNorm. All differentiable in x and in the affine parameters.
//
// Dtypes: x is float32, float64, bfloat16 or float16; weight and bias have x's
// dtype and device. bf16/f16 compute in f32; the per-row statistics (mean,
// 1/std) are kept in f32 (f64 for f64 x) for backward (see NOTE [norm
// statistics] in ops/norm.cc). FP8 inputs are rejected: they need a scale, go
// through Dequantize first.
//
// Errors (octet::Error naming the op, shapes and dtypes): x of rank 0 or with
// an empty last dim, weight/bias not of shape (C), dtype or device mismatch,
// FP8 or integer inputs, eps < 0.
#pragma once

#include <octet/core/tensor.h>

namespace octet {

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim, with the
// biased variance (divide by C).
//   x: (..., C); weight: (C) or undefined (no scale); bias: (C) or undefined
//   (no shift). Returns (..., C) in x's dtype.
// Gradients: dx, dweight, dbias from one fused backward kernel; dweight and
// dbias are summed over rows in a fixed order, so results do not depend on the
// thread count.
Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// The two outputs of AddLayerNorm.
struct AddLayerNormResult {
  Tensor sum;  // x + residual: the residual stream passed on to the next block
  Tensor out;  // LayerNorm(sum, weight, bias, eps)
};

// Fused residual add + LayerNorm (the pre-LN transformer step
// h = x + residual; y = LayerNorm(h)): forward reads x and residual once and
// writes sum and out; backward writes one gradient d = dsum + dLayerNorm/dh
// that flows to both x and residual.
//   x, residual: (..., C), same shape, dtype and device (no broadcasting);
//   weight, bias: as for LayerNorm. sum is rounded to x's dtype before it is
//   normalised, so both outputs equal Add followed by LayerNorm.
// Errors: as LayerNorm, plus a residual of another shape, dtype or device.
AddLayerNormResult AddLayerNorm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                double eps = 1e-5);

// y = x / sqrt(mean(x^2) + eps) * weight over the last dim.
//   x: (..., C); weight: (C) or undefined (no scale). Returns (..., C) in x's
//   dtype. Gradients as for LayerNorm.
Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

}  // namespace octet
