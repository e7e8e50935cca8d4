// Kernel signatures of the cast family (internal: shared by ops/cast.cc and
// the backends). Every tensor argument is on one device; x and the FP8
// outputs are contiguous; scale, scale_inv and amax are float32 with one
// element, so a backend reads and writes them without a host sync.
#pragma once

#include <octet/core/float8.h>
#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// y = fp8(x * scale) (NOTE [fp8 conversion semantics] in core/float8.h, one
// float32 multiply; f64 x is rounded to f32 first), yt = the transpose of y
// (cast-transpose; only for 2-D x), scale_inv[0] = 1 / scale[0],
// amax[0] = max |x| over every element (NaN if any x is NaN), all in one pass.
//   x: (R, C) or any shape for y alone, f32/f64/bf16/f16
//   y: x's shape, FP8, or undefined (then yt is defined)
//   yt: (C, R), y's FP8 dtype, or undefined
//   dbias: (C) float32, or undefined; with yt (the cast-transpose), or on the
//          CPU also with y alone for a 2-D x (QuantizeWithBiasGrad in
//          ops/cast.h; CUDA makes it only with yt). dbias[c] = sum over r of
//          x[r, c] as float32 (f64 x rounded to f32 first), summed in float32
//          in a fixed order: reproducible run to run. The CPU adds rows in
//          order 0..R-1 (the bits of Sum(x.To(f32), {0}) on the CPU); the
//          CUDA order is per tile, then over tiles (NOTE [deterministic dbias]
//          in ops/cuda/cast_transpose.cu), so the two agree to rounding.
using QuantizeKernelFn = void(const Tensor& x, const Tensor& scale, Fp8Saturation sat, const Tensor& y,
                              const Tensor& yt, const Tensor& scale_inv, const Tensor& amax, const Tensor& dbias);

// y = float(x) * scale_inv[0], computed in f32 and rounded to y's dtype.
//   x: FP8, any shape; y: x's shape, f32/f64/bf16/f16; scale_inv: f32 [1].
using DequantizeKernelFn = void(const Tensor& x, const Tensor& scale_inv, const Tensor& y);

// amax[0] = max |x| (NaN if any x is NaN, 0 for an empty x).
//   x: any shape, f32/f64/bf16/f16; amax: f32 [1].
using AmaxKernelFn = void(const Tensor& x, const Tensor& amax);

// yt = x transposed, byte for byte (an FP8 matrix's column-wise copy, NOTE
// [fp8 column-wise data] in core/scaling.h; no conversion, no scale).
//   x: (R, C) FP8, contiguous; yt: (C, R), x's dtype, contiguous.
using Fp8TransposeKernelFn = void(const Tensor& x, const Tensor& yt);

OCTET_DECLARE_KERNEL(quantize_kernel, QuantizeKernelFn);
OCTET_DECLARE_KERNEL(fp8_transpose_kernel, Fp8TransposeKernelFn);
OCTET_DECLARE_KERNEL(dequantize_kernel, DequantizeKernelFn);
OCTET_DECLARE_KERNEL(amax_kernel, AmaxKernelFn);

}  // namespace octet
