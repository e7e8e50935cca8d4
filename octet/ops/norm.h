// Normalisation over the last dim: LayerNorm (also fused with a residual add)
// and RMSNorm. All differentiable in x and in the affine parameters.
//
// Dtypes: x is float32, float64, bfloat16 or float16; weight and bias have x's
// dtype and device. bf16/f16 compute in f32; the per-row statistics (mean,
// 1/std) are kept in f32 (f64 for f64 x) for backward (see NOTE [norm
// statistics] in ops/norm.cc). FP8 inputs are rejected: they need a scale, go
// through Dequantize first. LayerNormFp8 writes an FP8 output.
//
// Errors (octet::Error naming the op, shapes and dtypes): x of rank 0 or with
// an empty last dim, weight/bias not of shape (C), dtype or device mismatch,
// FP8 or integer inputs, eps < 0 or not finite.
#pragma once

#include <octet/core/float8.h>
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

// LayerNorm(x, weight, bias, eps) written directly in FP8 with a per-tensor
// scale, as the input of an FP8 GEMM (NOTE [layer norm to fp8] in
// ops/norm.cc): q = fp8(y * scale) where y is the float32 normalised value
// (one rounding; f64 x computes in f64, y rounded to f32 first), with
// ScaleMeta exactly as Quantize (ops/cast.h) gives it: a copy of `scale`,
// scale_inv = 1/scale, amax = max |y| of the unquantized float32 values (NaN
// if any is NaN), all on x's device and written by the kernel (the scale is
// never read on the host).
//   x: (..., C) float32/float64/bfloat16/float16; weight, bias: (C) in x's
//   dtype or undefined; fp8: kFloat8E4M3 or kFloat8E5M2; scale: float32 with
//   one element on x's device; sat as for Quantize. Returns (..., C) FP8,
//   contiguous.
// Differentiable in x, weight and bias (not in the scale): the gradient that
// reaches q is a float tensor (any float dtype; converted to x's dtype), and
// backward is LayerNorm's (the same kernel and bits as LayerNorm given that
// gradient in x's dtype).
// Errors: as LayerNorm, plus a target dtype that is not FP8 and a scale that
// is not float32 with one element on x's device.
Tensor LayerNormFp8(const Tensor& x, const Tensor& weight, const Tensor& bias, DType fp8, const Tensor& scale,
                    double eps = 1e-5, Fp8Saturation sat = Fp8Saturation::kSatFinite);

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
