// Pointwise ops with NumPy-style broadcasting. All are differentiable.
//
// Dtypes: float32, float64, bfloat16, float16 (bf16/f16 compute in f32).
// Binary ops need both operands of the same dtype and device. FP8 inputs are
// rejected: their values need a scale, go through ops/cast.h first.
// Errors name the op and the offending shapes/dtypes.
#pragma once

#include <octet/core/float8.h>
#include <octet/core/tensor.h>
#include <octet/ops/functors.h>

namespace octet {

// The broadcast of two shapes; throws naming `op` when they are incompatible.
Shape BroadcastShapes(const Shape& a, const Shape& b, const char* op);

Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor Maximum(const Tensor& a, const Tensor& b);
Tensor Minimum(const Tensor& a, const Tensor& b);

Tensor Neg(const Tensor& x);
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Rsqrt(const Tensor& x);
Tensor Tanh(const Tensor& x);
Tensor Relu(const Tensor& x);
Tensor Gelu(const Tensor& x);  // tanh approximation, see NOTE [gelu] in functors.h
// Gelu(x) written directly in FP8 with a per-tensor scale, as the input of
// an FP8 GEMM (NOTE [gelu to fp8] in ops/pointwise.cc): q = fp8(g * scale)
// where g is gelu(x) computed in float32 by Gelu's functor (f64 x computes
// in f64, g rounded to f32 first), one rounding, with ScaleMeta exactly as
// Quantize (ops/cast.h) gives it: a copy of `scale`, scale_inv = 1/scale,
// amax = max |g| of the unquantized float32 values (NaN if any is NaN), all
// on x's device and written by the kernel (the scale is never read on the
// host).
//   x: any shape (any strides), float32/float64/bfloat16/float16; fp8:
//   kFloat8E4M3 or kFloat8E5M2; scale: float32 with one element on x's
//   device; sat as for Quantize. Returns x's shape in FP8, contiguous.
// Differentiable in x (not in the scale): the gradient that reaches q is a
// float tensor (any float dtype; converted to x's dtype), and dx = dq *
// gelu'(x), the bits of Gelu's backward given that gradient in x's dtype.
// Errors: an FP8 or integer x, a target dtype that is not FP8, a scale that
// is not float32 with one element on x's device.
Tensor GeluFp8(const Tensor& x, DType fp8, const Tensor& scale, Fp8Saturation sat = Fp8Saturation::kSatFinite);
Tensor Sigmoid(const Tensor& x);
Tensor Abs(const Tensor& x);
Tensor Square(const Tensor& x);
Tensor Pow(const Tensor& x, double exponent);
Tensor AddScalar(const Tensor& x, double s);
Tensor MulScalar(const Tensor& x, double s);

// Comparisons return bool tensors (not differentiable).
Tensor Compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor Eq(const Tensor& a, const Tensor& b);
Tensor Lt(const Tensor& a, const Tensor& b);
Tensor Gt(const Tensor& a, const Tensor& b);
Tensor CompareScalar(CompareOp op, const Tensor& a, double s);

// cond ? a : b, broadcasting all three. cond: bool. Differentiable in a and b.
Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with value where mask is true. mask: bool, broadcastable to x.
Tensor MaskedFill(const Tensor& x, const Tensor& mask, double value);

// In place (not recorded by autograd; throws if x requires grad while grad mode
// is on). Bump x's version counter.
Tensor& AddInPlace(Tensor& x, const Tensor& y, double alpha = 1.0);  // x += alpha * y
Tensor& MulScalarInPlace(Tensor& x, double s);
// x = Maximum(x, y) (NaN from either side wins), y broadcast to x.
Tensor& MaximumInPlace(Tensor& x, const Tensor& y);

// Raw kernels for other ops' backward passes (no autograd): dy * f'(saved).
Tensor BinaryRaw(BinaryOp op, const Tensor& a, const Tensor& b, double alpha = 0.0);
Tensor UnaryRaw(UnaryOp op, const Tensor& x, double alpha = 0.0);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return Add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return Sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return Mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return Div(a, b); }
inline Tensor operator-(const Tensor& x) { return Neg(x); }
inline Tensor operator+(const Tensor& a, double s) { return AddScalar(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return AddScalar(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return MulScalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return MulScalar(a, 1.0 / s); }
inline Tensor operator*(double s, const Tensor& a) { return MulScalar(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return AddScalar(a, s); }

}  // namespace octet
