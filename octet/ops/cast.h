// The cast family: FP8 quantization with per-tensor scales.
//
//   q = Quantize(x, DType::kFloat8E4M3, scale);  // q's real value ~ x
//   Tensor y = Dequantize(q);                     // float(q) * scale_inv
//
// Conventions (core/scaling_math.h, NOTE [scale direction]):
//   q_fp8 = fp8(x * scale)       one float32 multiply, round to nearest even,
//                                NOTE [fp8 conversion semantics] in core/float8.h
//   x    ~= float(q_fp8) * scale_inv,  scale_inv = 1 / scale
//   amax  = max |x| of the unscaled input, computed in the same pass.
// A per-tensor scale from amax is ComputeScale(amax, fp8_max, margin, ...)
// (core/scaling_math.h): it maps amax to the format's max (448 for E4M3,
// 57344 for E5M2) divided by 2^margin.
//
// Dtypes: x is float32, float64, bfloat16 or float16 (f64 is rounded to f32
// before the multiply; bf16/f16 widen exactly). FP8 outputs are contiguous.
//
// NOTE [straight-through FP8 casts]: Quantize, Dequantize and CastTranspose
// are differentiable as straight-through estimators, so amp code can put them
// inside a graph: the gradient of Dequantize(Quantize(x)) with respect to x is
// the identity (rounding and saturation are ignored). Gradients are taken
// with respect to *real values*: the gradient that reaches an FP8 tensor is
// carried in a float dtype (the dtype Dequantize produced), never in FP8, and
// Quantize's backward converts it to x's dtype. The scale is not
// differentiable. Amax is a statistic and is not differentiable either.
//
// Errors (octet::Error naming the op, shapes and dtypes): x not one of the
// four float dtypes (FP8 or integer), a target dtype that is not FP8, a scale
// that is not float32 with one element on x's device, a non-positive or
// non-finite float scale or one whose reciprocal overflows (below about
// 2.9e-39), CastTranspose of a tensor that is not 2-D,
// Dequantize of a non-FP8 tensor or to a non-float dtype, FP8 tensors with
// scale granularity other than per-tensor.
#pragma once

#include <utility>

#include <octet/core/float8.h>
#include <octet/core/tensor.h>

namespace octet {

// q = fp8(x * scale) with ScaleMeta {per-tensor, scale (a copy of `scale`),
// scale_inv = 1/scale, amax = max|x|} on x's device.
//   x: any shape; fp8: kFloat8E4M3 or kFloat8E5M2; scale: float32, one element
//   ([1] or []), on x's device. Returns x's shape, dtype fp8, contiguous.
// sat: what happens past the format's max finite value (kSatFinite clamps;
// kNoSat gives NaN for E4M3 and inf for E5M2). NaN inputs give NaN codes.
Tensor Quantize(const Tensor& x, DType fp8, const Tensor& scale,
                Fp8Saturation sat = Fp8Saturation::kSatFinite);
// The same with a host scale (must be positive and finite, with a finite
// reciprocal). A scale tensor is not read on the host: its values are the
// caller's to keep in that range (delayed scaling's ComputeScale does).
Tensor Quantize(const Tensor& x, DType fp8, float scale, Fp8Saturation sat = Fp8Saturation::kSatFinite);

// y = float(q) * scale_inv, computed in float32 and rounded to `out`
// (float32, float64, bfloat16 or float16). An FP8 tensor without scale
// metadata dequantizes with scale_inv = 1. Returns q's shape, contiguous.
Tensor Dequantize(const Tensor& fp8, DType out = DType::kFloat32);

// max |x| as float32 [1] on x's device; NaN if any element is NaN, 0 for an
// empty x. x: any shape, float32/float64/bfloat16/float16. Not differentiable.
Tensor Amax(const Tensor& x);

// Quantizes a 2-D x once and returns both FP8 copies the GEMMs of a Linear
// need (CUDA_NOTES §1.4): first the row-wise copy q (M, N) — bit-identical to
// Quantize(x, fp8, scale, sat) — then the column-wise copy qt (N, M) =
// q transposed, contiguous. Both carry the same ScaleMeta (one scale_inv
// tensor; amax from the same pass). The transpose is cache-blocked.
//   x: (M, N), float32/float64/bfloat16/float16; scale as for Quantize.
std::pair<Tensor, Tensor> CastTranspose(const Tensor& x, DType fp8, const Tensor& scale,
                                        Fp8Saturation sat = Fp8Saturation::kSatFinite);

// The transpose of an FP8 matrix as a contiguous copy, byte for byte (no
// rounding): qt (C, R) = q.T(), carrying q's scale metadata (the same scale,
// scale_inv and amax tensors; no column-wise entry). This is the column-wise
// copy of a tensor that is already FP8 (WithColumnwiseForGemm in
// ops/matmul.h), e.g. LayerNormFp8's output.
//   q: (R, C) FP8 with per-tensor or no scale metadata, any strides.
// Not differentiable (the result does not require grad). Errors: q not FP8,
// not 2-D, or with another scale granularity.
Tensor TransposeFp8(const Tensor& q);

// CastTranspose plus the bias gradient of a Linear whose output gradient is
// x, from the same pass over x: dbias[c] = sum over rows r of x[r, c], as
// float32 (bf16/f16 widen exactly, f64 is rounded to f32 first) summed in
// float32. The order is fixed, so the result is reproducible run to run: on
// the CPU rows are added in order 0..R-1 (the same bits as
// Sum(x.To(kFloat32), {0})); on CUDA per tile, then over tiles, with no
// atomics (it agrees with the CPU to float32 rounding).
//   x: (M, N), float32/float64/bfloat16/float16; scale as for Quantize.
//   Returns q (M, N) and qt (N, M) as CastTranspose, dbias (N) float32.
// Not differentiable (a backward-pass helper: x is read detached). Errors
// as CastTranspose, naming cast_transpose_with_bias_grad.
struct CastTransposeBiasGrad {
  Tensor q;      // (M, N) FP8, row-wise
  Tensor qt;     // (N, M) FP8, column-wise, the same ScaleMeta as q
  Tensor dbias;  // (N) float32
};
CastTransposeBiasGrad CastTransposeWithBiasGrad(const Tensor& x, DType fp8, const Tensor& scale,
                                                Fp8Saturation sat = Fp8Saturation::kSatFinite);

// Quantize plus the same bias gradient as CastTransposeWithBiasGrad, from one
// pass over x, without the transposed copy: for backends whose FP8 GEMMs read
// any layout (the CPU; Fp8GemmWantsTransposedCopies in ops/matmul.h is
// false), where the cast-transpose would be wasted work. Rows are added in
// order 0..R-1: the bits of Sum(x.To(kFloat32), {0}) on the CPU.
//   x: (M, N), float32/float64/bfloat16/float16; scale as for Quantize.
//   Returns q (M, N) as Quantize and dbias (N) float32.
// Not differentiable (x is read detached). Errors as Quantize, naming
// quantize_with_bias_grad; a device whose quantize kernel makes the bias
// gradient only with the transposed copy (CUDA) throws, saying so.
struct QuantizeBiasGrad {
  Tensor q;      // (M, N) FP8
  Tensor dbias;  // (N) float32
};
QuantizeBiasGrad QuantizeWithBiasGrad(const Tensor& x, DType fp8, const Tensor& scale,
                                      Fp8Saturation sat = Fp8Saturation::kSatFinite);

}  // namespace octet
