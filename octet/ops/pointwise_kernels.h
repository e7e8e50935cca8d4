// Kernel signatures of the pointwise family (internal: shared by
// ops/pointwise.cc and the backends). Operands are already broadcast to the
// output's shape (expanded views, possibly strided) and have the output's
// dtype, except `cond` (bool) and comparison outputs (bool).
#pragma once

#include <octet/core/float8.h>
#include <octet/core/tensor.h>
#include <octet/ops/functors.h>
#include <octet/ops/registry.h>

namespace octet {

using UnaryKernelFn = void(UnaryOp op, const Tensor& x, const Tensor& out, double alpha);
using BinaryKernelFn = void(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
using CompareKernelFn = void(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
using WhereKernelFn = void(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

// GELU with an FP8 output (NOTE [gelu to fp8] in ops/pointwise.cc):
// g = functors::Gelu(x) in AccType of x (f64 rounded to f32 at the end),
// q = fp8(g * scale[0]) (one float32 multiply, core/float8.h rounding with
// `sat`), amax[0] = max |g| over every element (NaN if any is NaN, 0 when
// x is empty), scale_inv[0] = 1 / scale[0].
//   x: contiguous, any shape, f32/f64/bf16/f16; q: x's shape, FP8,
//   contiguous; scale, scale_inv, amax: float32 [1] on x's device (no host
//   read of the scale).
using GeluFp8KernelFn = void(const Tensor& x, const Tensor& scale, Fp8Saturation sat, const Tensor& q,
                             const Tensor& scale_inv, const Tensor& amax);

OCTET_DECLARE_KERNEL(unary_kernel, UnaryKernelFn);
OCTET_DECLARE_KERNEL(binary_kernel, BinaryKernelFn);
OCTET_DECLARE_KERNEL(compare_kernel, CompareKernelFn);
OCTET_DECLARE_KERNEL(where_kernel, WhereKernelFn);
OCTET_DECLARE_KERNEL(gelu_fp8_kernel, GeluFp8KernelFn);

}  // namespace octet
