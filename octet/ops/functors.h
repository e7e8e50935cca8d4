// Pointwise math written once for both backends. Each functor takes and
// returns the compute type (float, or double for f64 tensors); the CPU and CUDA
// launchers load/store the tensor's element type around it.
//
// NOTE [gelu]: GELU is the tanh approximation used by GPT-2 and llm.c:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#pragma once

#include <cmath>
#include <cstdint>

#include <octet/core/macros.h>

namespace octet {

enum class UnaryOp : uint8_t {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kTanh,
  kRelu,
  kGelu,
  kSigmoid,
  kAbs,
  kSquare,
  kAddScalar,  // x + alpha
  kMulScalar,  // x * alpha
  kPowScalar,  // x ^ alpha
  kRSubScalar, // alpha - x
  kCount
};

enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMaximum,
  kMinimum,
  // Backward helpers: (dy, saved) -> dx.
  kGeluBackward,   // dy * gelu'(x)
  kReluBackward,   // dy * (x > 0)
  kTanhBackward,   // dy * (1 - y^2), saved = y
  kSigmoidBackward,// dy * y (1 - y), saved = y
  kPowBackward,    // dy * alpha * x^(alpha-1)  (alpha passed separately)
  kCount
};

enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kCount };

const char* Name(UnaryOp op);
const char* Name(BinaryOp op);
const char* Name(CompareOp op);

// X-macro lists of the ops that have a functor, in enum order: a backend
// launcher instantiates one loop per entry, so adding an op touches the enum,
// its Name() and these lists only.
#define OCTET_FOR_EACH_UNARY_OP(X) \
  X(kNeg) X(kExp) X(kLog) X(kSqrt) X(kRsqrt) X(kTanh) X(kRelu) X(kGelu) X(kSigmoid) X(kAbs) X(kSquare) \
      X(kAddScalar) X(kMulScalar) X(kPowScalar) X(kRSubScalar)
#define OCTET_FOR_EACH_BINARY_OP(X)                                                                     \
  X(kAdd) X(kSub) X(kMul) X(kDiv) X(kMaximum) X(kMinimum) X(kGeluBackward) X(kReluBackward) X(kTanhBackward) \
      X(kSigmoidBackward) X(kPowBackward)

namespace functors {

#if !defined(__CUDA_ARCH__)
using std::exp;
using std::log;
using std::pow;
using std::sqrt;
using std::tanh;
#endif

#if !defined(__CUDA_ARCH__)
// NOTE [exp clamp bounds]: ExpFast's clamp bounds, -87.33654 and 88.8,
// defined in ops/pointwise.cc where no caller's compiler can see their
// values. Seen as constants, GCC's partial redundancy elimination (-O3)
// splits every loop that uses ExpFast into a path per clamp arm, on which
// ExpFast of the bound folds to a constant, and keeps each path's result:
// GELU's and the sigmoid's x / (1 + e^z) became two divisions per vector
// (one by 1 + e^88.8 for the clamped lanes, masked) plus four compares and
// two blends for the clamp. With the bounds opaque it stays one vminps, one
// vmaxps and one division, and the results are the same bits (the two
// clamps in a row are the nested one's, NaN included). Measured in
// NOTE [gelu exp]. A link-time optimiser could fold them again.
extern const float kExpFastLo;
extern const float kExpFastHi;
#endif

// NOTE [fast exp]: e^x for float in branch-free arithmetic the compiler can
// vectorise (a libm call in a loop cannot be). x, clamped to [-87.33654,
// 88.8], is n ln2 + r with |r| <= ln2/2 (ln2 in two parts); e^r by its
// degree-7 Taylor polynomial (truncation error < 3e-9 relative), evaluated
// with every coefficient doubled, which gives exactly twice the plain
// polynomial's value (a power of two commutes with rounding); that times
// 2^(n-1), built in the exponent bits, is the result. Scaling by 2^(n-1)
// rather than 2^n keeps the scale a normal number at the top (n = 128), so
// e^x is finite up to ln(FLT_MAX) = 88.7228 and +inf above it, rounded
// once there, where 2^n would have been +inf from x = 127.5 ln2 = 88.376 on
// (e^88.5 = 2.7e38 came out +inf). At the bottom of the clamp n = -126 makes
// the scale +0, so results below e^-86.99 ~ 1.7e-38 are 0, -inf included; a
// NaN gives NaN through the arithmetic. No fix-up blends: the clamp alone
// gives the range behaviour (measured on a Zen 5, 2026-11-27, octet_norm_bench
// CrossEntropyFwdBwd, (2048, 4096), minima of 7 repetitions, alternating
// rounds, rounds disturbed by other load left out, ms, old form with three
// fix-up blends -> this: f32 one thread 6.26-6.41 -> 5.75-5.84, two threads
// 3.59-3.67 -> 3.12-3.16; bf16 6.91-6.97 -> 6.35-6.38, 4.03-4.26 ->
// 3.79-3.87; GELU, which never had the blends, unchanged). Max error 1.15
// ulp against a float64 reference (Pointwise.ExpFastOverTheFloatRange
// sweeps the range). GELU and the sigmoid take it as a term of 1 + e^x.
// Device code uses expf.
//
// NOTE [exp fused multiply-adds]: every multiply-add of the range reduction
// and of the polynomial is written as one (__builtin_fmaf). GCC fused them
// anyway at -O2 (-ffp-contract=fast), so optimized builds compute the same
// bits as before; written out, the -O1 sanitizer build computes them too,
// and the intrinsic forms (ExpFastx16 in ops/cpu/cross_entropy_cpu.cc,
// ExpFastPart in ops/cpu/row_helpers.h) agree with this one in every build. Returns
// e^x as its two factors: p (twice e^r) and scale (2^(n-1)). Host code.
namespace exp_fast {
// The constants of ExpFastFactors and of its vector forms: log2(e), ln 2 in
// two parts, and the doubled Taylor coefficients of e^r, highest first
// (2/7!, 2/6!, ..., 2/1!, 2/0!).
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;
inline constexpr int kPolyTerms = 8;
inline constexpr float kPoly[kPolyTerms] = {2.0f / 5040.0f, 2.0f / 720.0f, 2.0f / 120.0f, 2.0f / 24.0f,
                                            2.0f / 6.0f,    1.0f,          2.0f,          2.0f};
}  // namespace exp_fast

#if !defined(__CUDA_ARCH__)
OCTET_INLINE void ExpFastFactors(float x, float& p, float& scale) {
  using namespace exp_fast;
  // min(hi, x) then max(lo, .), each in the operand order of vminps /
  // vmaxps, so a NaN stays NaN (NOTE [exp clamp bounds]).
  float xc = x > kExpFastHi ? kExpFastHi : x;
  xc = xc < kExpFastLo ? kExpFastLo : xc;
  const float n = __builtin_floorf(__builtin_fmaf(xc, kLog2e, 0.5f));
  const float r = __builtin_fmaf(-n, kLn2Lo, __builtin_fmaf(-n, kLn2Hi, xc));
  // 2 e^r, written out (a loop over kPoly kept GCC 12 from vectorising the
  // callers' loops).
  float q = __builtin_fmaf(kPoly[0], r, kPoly[1]);
  q = __builtin_fmaf(q, r, kPoly[2]);
  q = __builtin_fmaf(q, r, kPoly[3]);
  q = __builtin_fmaf(q, r, kPoly[4]);
  q = __builtin_fmaf(q, r, kPoly[5]);
  q = __builtin_fmaf(q, r, kPoly[6]);
  p = __builtin_fmaf(q, r, kPoly[7]);
  const int32_t bits = (static_cast<int32_t>(n) + 126) << 23;  // 2^(n-1), n in [-126, 128]
  __builtin_memcpy(&scale, &bits, 4);
}
#endif

OCTET_HOST_DEVICE OCTET_INLINE float ExpFast(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  float p, scale;
  ExpFastFactors(x, p, scale);
  return p * scale;
#endif
}

// exp in the compute type: the fast float path, std::exp for double.
template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE T Exp(T x) {
  if constexpr (sizeof(T) == 4) {
    return ExpFast(x);
  } else {
    return exp(x);
  }
}

// 1 + e^x in the compute type, for the sigmoid and GELU forms below.
template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE T OnePlusExp(T x) {
  if constexpr (sizeof(T) == 4) {
    return T(1) + ExpFast(x);
  } else {
    return T(1) + exp(x);
  }
}

// 1 / (1 + e^-x), stable for both signs (e^-x overflows to inf for x << 0,
// giving 0).
template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE T Sigmoid(T x) {
  return T(1) / OnePlusExp(-x);
}

// See NOTE [gelu]. 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + e^-2u):
// no cancellation for x << 0, no tanh call, one rounding after the division.
// NOTE [gelu exp]: with one division where x * sigmoid(2u) divided and then
// multiplied, and 1 + e^z taken without ExpFast's former range fix-up blends
// (since 2026-11-27 ExpFast has none), measured on a Zen 5
// (octet_pointwise_bench, 2 threads, 4096 x 3072, three alternating rounds,
// 2026-11-24, ms before -> after): GELU f32 2.72-2.82 -> 2.15-2.20, bf16
// 3.50-3.58 -> 2.65-2.76; backward f32 3.42-3.45 -> 3.20-3.39, bf16
// 4.06-4.23 -> 3.55-3.64; GeluFp8 3.75-4.03 -> 3.20-3.39. With the clamp
// bounds opaque (NOTE [exp clamp bounds]; one division per vector instead
// of two; four alternating rounds, 2026-11-28, same bench and sizes, ms
// before -> after): GELU f32 2.07-2.20 -> 1.71-1.74, bf16 2.28-2.44 ->
// 1.96-2.04; backward f32 3.31-3.44 -> 2.60-2.78, bf16 3.24-3.28 ->
// 2.83-2.98; GeluToFp8 fused 3.10-3.23 -> 2.57-2.71; and the softmax
// cross-entropy (octet_norm_bench CrossEntropyFwdBwd, its clamp now a
// vminps and a vmaxps) f32 3.06-3.12 -> 2.69-2.83, bf16 3.60-3.72 ->
// 3.18-3.32.
template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE T Gelu(T x) {
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  const T c = T(0.044715);
  return x / OnePlusExp(T(-2) * k * (x + c * x * x * x));
}

// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u)
//             = s + 2 x s (1 - s) u',             s = sigmoid(2u).
template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE T GeluGrad(T x) {
  const T k = T(0.7978845608028654);
  const T c = T(0.044715);
  const T s = Sigmoid(T(2) * k * (x + c * x * x * x));
  const T du = k * (T(1) + T(3) * c * x * x);
  return s + T(2) * x * s * (T(1) - s) * du;
}


template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE T Unary(UnaryOp op, T x, T alpha) {
  switch (op) {
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kExp: return Exp(x);
    case UnaryOp::kLog: return log(x);
    case UnaryOp::kSqrt: return sqrt(x);
    case UnaryOp::kRsqrt: return T(1) / sqrt(x);
    case UnaryOp::kTanh: return tanh(x);
    case UnaryOp::kRelu: return x > T(0) ? x : T(0);
    case UnaryOp::kGelu: return Gelu(x);
    case UnaryOp::kSigmoid: return Sigmoid(x);
    case UnaryOp::kAbs: return x < T(0) ? -x : x;
    case UnaryOp::kSquare: return x * x;
    case UnaryOp::kAddScalar: return x + alpha;
    case UnaryOp::kMulScalar: return x * alpha;
    case UnaryOp::kPowScalar: return pow(x, alpha);
    case UnaryOp::kRSubScalar: return alpha - x;
    default: return x;
  }
}

// Each unary op as its own functor so launchers can instantiate one tight loop
// per op (the switch above is for generic/slow paths and device code).
template <UnaryOp Op>
struct UnaryFn {
  template <typename T>
  OCTET_HOST_DEVICE OCTET_INLINE T operator()(T x, T alpha) const {
    return Unary(Op, x, alpha);
  }
};

template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE T Binary(BinaryOp op, T a, T b, T alpha) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMaximum: return (a > b || a != a) ? a : b;
    case BinaryOp::kMinimum: return (a < b || a != a) ? a : b;
    case BinaryOp::kGeluBackward: return a * GeluGrad(b);
    case BinaryOp::kReluBackward: return b > T(0) ? a : T(0);
    case BinaryOp::kTanhBackward: return a * (T(1) - b * b);
    case BinaryOp::kSigmoidBackward: return a * b * (T(1) - b);
    case BinaryOp::kPowBackward: return a * alpha * pow(b, alpha - T(1));
    default: return a;
  }
}

template <BinaryOp Op>
struct BinaryFn {
  template <typename T>
  OCTET_HOST_DEVICE OCTET_INLINE T operator()(T a, T b, T alpha) const {
    return Binary(Op, a, b, alpha);
  }
};

template <typename T>
OCTET_HOST_DEVICE OCTET_INLINE bool Compare(CompareOp op, T a, T b) {
  switch (op) {
    case CompareOp::kEq: return a == b;
    case CompareOp::kNe: return a != b;
    case CompareOp::kLt: return a < b;
    case CompareOp::kLe: return a <= b;
    case CompareOp::kGt: return a > b;
    case CompareOp::kGe: return a >= b;
    default: return false;
  }
}

}  // namespace functors
}  // namespace octet
