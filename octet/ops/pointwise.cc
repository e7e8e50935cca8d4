#include <octet/ops/pointwise.h>

#include <octet/autograd/function.h>
#include <octet/autograd/grad_sum_internal.h>
#include <octet/core/scaling.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise_kernels.h>
#include <octet/ops/reduce.h>

namespace octet {

// NOTE [exp clamp bounds] in ops/functors.h: defined here, out of sight of
// the kernels that inline ExpFast.
namespace functors {
extern const float kExpFastLo = -87.33654f;
extern const float kExpFastHi = 88.8f;
}  // namespace functors

OCTET_DEFINE_KERNEL(unary_kernel, UnaryKernelFn);
OCTET_DEFINE_KERNEL(binary_kernel, BinaryKernelFn);
OCTET_DEFINE_KERNEL(compare_kernel, CompareKernelFn);
OCTET_DEFINE_KERNEL(where_kernel, WhereKernelFn);
OCTET_DEFINE_KERNEL(gelu_fp8_kernel, GeluFp8KernelFn);

const char* Name(UnaryOp op) {
  static const char* const kNames[] = {"neg",  "exp",     "log", "sqrt",   "rsqrt",     "tanh",      "relu",
                                       "gelu", "sigmoid", "abs", "square", "add_scalar", "mul_scalar", "pow",
                                       "rsub_scalar"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(UnaryOp::kCount));
  return kNames[static_cast<int>(op)];
}

const char* Name(BinaryOp op) {
  static const char* const kNames[] = {"add",           "sub",           "mul",           "div",
                                       "maximum",       "minimum",       "gelu_backward", "relu_backward",
                                       "tanh_backward", "sigmoid_backward", "pow_backward"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(BinaryOp::kCount));
  return kNames[static_cast<int>(op)];
}

const char* Name(CompareOp op) {
  static const char* const kNames[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(CompareOp::kCount));
  return kNames[static_cast<int>(op)];
}

Shape BroadcastShapes(const Shape& a, const Shape& b, const char* op) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    OCTET_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", ShapeStr(a), " and ", ShapeStr(b),
                " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

Tensor Unary(UnaryOp op, const Tensor& x, double alpha) {
  Tensor out = EmptyLike(x);
  unary_kernel(x.device())(op, x, out, alpha);
  return out;
}

Tensor Binary(BinaryOp op, const Tensor& a, const Tensor& b, double alpha, const char* name) {
  CheckUnscaledFloat(name, a, "a");
  CheckUnscaledFloat(name, b, "b");
  CheckSameDtype(name, a, b);
  CheckSameDevice(name, a, b);
  const Shape shape = BroadcastShapes(a.shape(), b.shape(), name);
  Tensor out = Empty(shape, {.dtype = a.dtype(), .device = a.device()});
  binary_kernel(a.device())(op, a.shape() == shape ? a : a.Expand(shape), b.shape() == shape ? b : b.Expand(shape),
                            out, alpha);
  return out;
}

template <UnaryOp kOp>
struct UnaryOpNode;

// d/dx for the simple unary ops, written in terms of the saved input x or
// output y.
struct UnaryFwd : autograd::Op<UnaryFwd> {
  static constexpr const char* kName = "unary";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, int op_int, double alpha) {
    const UnaryOp op = static_cast<UnaryOp>(op_int);
    ctx.set_op_name(Name(op));
    CheckUnscaledFloat(Name(op), x, "x");
    Tensor y = Unary(op, x, alpha);
    ctx.ints = {op_int};
    ctx.doubles = {alpha};
    switch (op) {
      case UnaryOp::kExp:
      case UnaryOp::kTanh:
      case UnaryOp::kSigmoid:
      case UnaryOp::kSqrt:
      case UnaryOp::kRsqrt:
        ctx.Save(y);
        break;
      default:
        ctx.Save(x);
    }
    return y;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const UnaryOp op = static_cast<UnaryOp>(ctx.ints[0]);
    const double alpha = ctx.doubles[0];
    const Tensor s = ctx.Saved(0);  // x or y, see Forward
    switch (op) {
      case UnaryOp::kNeg: return {UnaryRaw(UnaryOp::kNeg, dy)};
      case UnaryOp::kExp: return {BinaryRaw(BinaryOp::kMul, dy, s)};
      case UnaryOp::kLog: return {BinaryRaw(BinaryOp::kDiv, dy, s)};
      case UnaryOp::kSqrt: return {BinaryRaw(BinaryOp::kDiv, UnaryRaw(UnaryOp::kMulScalar, dy, 0.5), s)};
      case UnaryOp::kRsqrt:  // d/dx x^-1/2 = -1/2 y^3
        return {BinaryRaw(BinaryOp::kMul, UnaryRaw(UnaryOp::kMulScalar, dy, -0.5),
                          UnaryRaw(UnaryOp::kPowScalar, s, 3.0))};
      case UnaryOp::kTanh: return {BinaryRaw(BinaryOp::kTanhBackward, dy, s)};
      case UnaryOp::kRelu: return {BinaryRaw(BinaryOp::kReluBackward, dy, s)};
      case UnaryOp::kGelu: return {BinaryRaw(BinaryOp::kGeluBackward, dy, s)};
      case UnaryOp::kSigmoid: return {BinaryRaw(BinaryOp::kSigmoidBackward, dy, s)};
      case UnaryOp::kAbs:  // sign(x), 0 at 0
        return {BinaryRaw(BinaryOp::kMul, dy,
                          BinaryRaw(BinaryOp::kSub, CompareScalar(CompareOp::kGt, s, 0.0).To(s.dtype()),
                                    CompareScalar(CompareOp::kLt, s, 0.0).To(s.dtype())))};
      case UnaryOp::kSquare: return {BinaryRaw(BinaryOp::kMul, dy, UnaryRaw(UnaryOp::kMulScalar, s, 2.0))};
      case UnaryOp::kAddScalar: return {dy};
      case UnaryOp::kMulScalar: return {UnaryRaw(UnaryOp::kMulScalar, dy, alpha)};
      case UnaryOp::kPowScalar: return {BinaryRaw(BinaryOp::kPowBackward, dy, s, alpha)};
      case UnaryOp::kRSubScalar: return {UnaryRaw(UnaryOp::kNeg, dy)};
      default: OCTET_FAIL("unary backward: unknown op");
    }
  }
};

Tensor ApplyUnary(UnaryOp op, const Tensor& x, double alpha = 0.0) {
  return UnaryFwd::Apply(x, static_cast<int>(op), alpha);
}

struct BinaryFwd : autograd::Op<BinaryFwd> {
  static constexpr const char* kName = "binary";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& a, const Tensor& b, int op_int) {
    const BinaryOp op = static_cast<BinaryOp>(op_int);
    ctx.set_op_name(Name(op));
    Tensor y = Binary(op, a, b, 0.0, Name(op));
    ctx.ints = {op_int};
    ctx.shapes = {a.shape(), b.shape()};
    if (op == BinaryOp::kMul || op == BinaryOp::kDiv || op == BinaryOp::kMaximum || op == BinaryOp::kMinimum) {
      ctx.Save(a);
      ctx.Save(b);
    }
    return y;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const BinaryOp op = static_cast<BinaryOp>(ctx.ints[0]);
    const Shape& sa = ctx.shapes[0];
    const Shape& sb = ctx.shapes[1];
    Tensor da, db;
    switch (op) {
      case BinaryOp::kAdd:
        da = dy;
        db = dy;
        break;
      case BinaryOp::kSub:
        da = dy;
        db = ctx.NeedsInputGrad(1) ? UnaryRaw(UnaryOp::kNeg, dy) : Tensor();
        break;
      case BinaryOp::kMul: {
        const Tensor a = ctx.Saved(0), b = ctx.Saved(1);
        if (ctx.NeedsInputGrad(0)) da = BinaryRaw(BinaryOp::kMul, dy, b);
        if (ctx.NeedsInputGrad(1)) db = BinaryRaw(BinaryOp::kMul, dy, a);
        break;
      }
      case BinaryOp::kDiv: {
        const Tensor a = ctx.Saved(0), b = ctx.Saved(1);
        const Tensor da_full = BinaryRaw(BinaryOp::kDiv, dy, b);
        if (ctx.NeedsInputGrad(0)) da = da_full;
        // d(a/b)/db = -a/b^2 = -(dy/b) * (a/b)
        if (ctx.NeedsInputGrad(1))
          db = UnaryRaw(UnaryOp::kNeg, BinaryRaw(BinaryOp::kMul, da_full, BinaryRaw(BinaryOp::kDiv, a, b)));
        break;
      }
      case BinaryOp::kMaximum:
      case BinaryOp::kMinimum: {
        // The gradient goes to the selected operand; ties split it evenly.
        const Tensor a = ctx.Saved(0), b = ctx.Saved(1);
        const CompareOp pick = op == BinaryOp::kMaximum ? CompareOp::kGt : CompareOp::kLt;
        const Tensor wa = BinaryRaw(BinaryOp::kAdd, Compare(pick, a, b).To(dy.dtype()),
                                    UnaryRaw(UnaryOp::kMulScalar, Eq(a, b).To(dy.dtype()), 0.5));
        da = BinaryRaw(BinaryOp::kMul, dy, wa);
        db = BinaryRaw(BinaryOp::kSub, dy, da);
        break;
      }
      default: OCTET_FAIL("binary backward: ", Name(op), " is not differentiable");
    }
    return {da.defined() ? SumToShape(da, sa) : da, db.defined() ? SumToShape(db, sb) : db};
  }
};

Tensor ApplyBinary(BinaryOp op, const Tensor& a, const Tensor& b) {
  return BinaryFwd::Apply(a, b, static_cast<int>(op));
}

struct WhereOp : autograd::Op<WhereOp> {
  static constexpr const char* kName = "where";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& cond, const Tensor& a, const Tensor& b) {
    CheckDtypeIn(kName, cond, "cond", {DType::kBool});
    CheckUnscaledFloat(kName, a, "a");
    CheckUnscaledFloat(kName, b, "b");
    CheckSameDtype(kName, a, b);
    CheckSameDevice(kName, a, b);
    CheckSameDevice(kName, cond, a);
    const Shape shape = BroadcastShapes(BroadcastShapes(cond.shape(), a.shape(), kName), b.shape(), kName);
    Tensor out = Empty(shape, {.dtype = a.dtype(), .device = a.device()});
    where_kernel(a.device())(cond.Expand(shape), a.Expand(shape), b.Expand(shape), out);
    ctx.Save(cond);
    ctx.shapes = {a.shape(), b.shape()};
    return out;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const Tensor cond = ctx.Saved(0);
    const Tensor zero = Zeros({}, {.dtype = dy.dtype(), .device = dy.device()});
    Tensor da, db;
    if (ctx.NeedsInputGrad(1)) da = SumToShape(Where(cond, dy, zero), ctx.shapes[0]);
    if (ctx.NeedsInputGrad(2)) db = SumToShape(Where(cond, zero, dy), ctx.shapes[1]);
    return {Tensor(), da, db};
  }
};

// NOTE [gelu to fp8]: GeluFp8 is the GELU between an MLP's two FP8 Linears
// written straight in FP8 as the second Linear's input (Transformer Engine
// fuses the activation into the cast the same way), the GELU counterpart of
// NOTE [layer norm to fp8] in ops/norm.cc. The kernel computes each value
// with Gelu's functor in float32 (f64 in f64, then rounded to f32, as
// Quantize rounds an f64 input), multiplies it by the scale and rounds once
// to FP8, and takes amax of the float32 values in the same pass. Gelu
// followed by Quantize rounds twice (to x's dtype, bfloat16 at O1, then to
// FP8) and writes and reads the bfloat16 activation once more; for a float32
// x the two give the same bytes. The result carries ScaleMeta as a Quantize
// result does, so ScaledMatmul and the FP8 Linear take it as it is.
// Backward saves x (not the FP8 output: gelu' needs x) and runs Gelu's
// backward kernel; the gradient reaching the FP8 output is a float tensor
// (NOTE [straight-through FP8 casts] in ops/cast.h: the cast is the identity
// for gradients), converted to x's dtype first, as LayerNormFp8 does.
struct GeluFp8Op : autograd::Op<GeluFp8Op> {
  static constexpr const char* kName = "gelu_fp8";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& scale, DType fp8, Fp8Saturation sat) {
    CheckUnscaledFloat(kName, x, "x");
    CheckFp8Target(kName, x, fp8, scale);
    const Tensor xc = x.Contiguous();
    std::shared_ptr<ScaleMeta> meta = NewFp8OutputMeta(scale, x.device());
    Tensor q = Empty(x.shape(), {.dtype = fp8, .device = x.device()});
    // Also for an empty x: the kernel writes scale_inv and amax (0).
    gelu_fp8_kernel(x.device())(xc, meta->scale, sat, q, meta->scale_inv, meta->amax);
    ctx.Save(xc);
    return q.WithScaleMeta(std::move(meta));
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dq) {
    // A gradient the engine made up for an unused output is FP8 zeros
    // (unscaled); To() turns it into float zeros.
    const Tensor x = ctx.Saved(0);
    const Tensor dy = dq.dtype() == x.dtype() ? dq : dq.To(x.dtype());
    return {BinaryRaw(BinaryOp::kGeluBackward, dy, x), Tensor()};
  }
};

}  // namespace

Tensor UnaryRaw(UnaryOp op, const Tensor& x, double alpha) {
  CheckUnscaledFloat(Name(op), x, "x");
  return Unary(op, x, alpha);
}

Tensor BinaryRaw(BinaryOp op, const Tensor& a, const Tensor& b, double alpha) {
  return Binary(op, a, b, alpha, Name(op));
}

Tensor Add(const Tensor& a, const Tensor& b) { return ApplyBinary(BinaryOp::kAdd, a, b); }
// The engine sums gradients with Add (NOTE [autograd below ops] in autograd/grad_sum_internal.h).
namespace {
const bool kGradSumRegistered = (autograd::internal::SetGradSum(&Add), true);
}  // namespace
Tensor Sub(const Tensor& a, const Tensor& b) { return ApplyBinary(BinaryOp::kSub, a, b); }
Tensor Mul(const Tensor& a, const Tensor& b) { return ApplyBinary(BinaryOp::kMul, a, b); }
Tensor Div(const Tensor& a, const Tensor& b) { return ApplyBinary(BinaryOp::kDiv, a, b); }
Tensor Maximum(const Tensor& a, const Tensor& b) { return ApplyBinary(BinaryOp::kMaximum, a, b); }
Tensor Minimum(const Tensor& a, const Tensor& b) { return ApplyBinary(BinaryOp::kMinimum, a, b); }

Tensor Neg(const Tensor& x) { return ApplyUnary(UnaryOp::kNeg, x); }
Tensor Exp(const Tensor& x) { return ApplyUnary(UnaryOp::kExp, x); }
Tensor Log(const Tensor& x) { return ApplyUnary(UnaryOp::kLog, x); }
Tensor Sqrt(const Tensor& x) { return ApplyUnary(UnaryOp::kSqrt, x); }
Tensor Rsqrt(const Tensor& x) { return ApplyUnary(UnaryOp::kRsqrt, x); }
Tensor Tanh(const Tensor& x) { return ApplyUnary(UnaryOp::kTanh, x); }
Tensor Relu(const Tensor& x) { return ApplyUnary(UnaryOp::kRelu, x); }
Tensor Gelu(const Tensor& x) { return ApplyUnary(UnaryOp::kGelu, x); }
Tensor GeluFp8(const Tensor& x, DType fp8, const Tensor& scale, Fp8Saturation sat) {
  CheckDefined(GeluFp8Op::kName, x, "x");
  return GeluFp8Op::Apply(x, scale, fp8, sat);
}
Tensor Sigmoid(const Tensor& x) { return ApplyUnary(UnaryOp::kSigmoid, x); }
Tensor Abs(const Tensor& x) { return ApplyUnary(UnaryOp::kAbs, x); }
Tensor Square(const Tensor& x) { return ApplyUnary(UnaryOp::kSquare, x); }
Tensor Pow(const Tensor& x, double e) { return ApplyUnary(UnaryOp::kPowScalar, x, e); }
Tensor AddScalar(const Tensor& x, double s) { return ApplyUnary(UnaryOp::kAddScalar, x, s); }
Tensor MulScalar(const Tensor& x, double s) { return ApplyUnary(UnaryOp::kMulScalar, x, s); }

Tensor Compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = Name(op);
  CheckDefined(name, a, "a");
  CheckDefined(name, b, "b");
  OCTET_CHECK(!IsFp8(a.dtype()) && !IsFp8(b.dtype()), name, ": FP8 inputs are rejected (", Describe(a), ", ",
              Describe(b), "): dequantize first");
  CheckSameDtype(name, a, b);
  CheckSameDevice(name, a, b);
  const Shape shape = BroadcastShapes(a.shape(), b.shape(), name);
  Tensor out = Empty(shape, {.dtype = DType::kBool, .device = a.device()});
  compare_kernel(a.device())(op, a.Expand(shape), b.Expand(shape), out);
  return out;
}

Tensor Eq(const Tensor& a, const Tensor& b) { return Compare(CompareOp::kEq, a, b); }
Tensor Lt(const Tensor& a, const Tensor& b) { return Compare(CompareOp::kLt, a, b); }
Tensor Gt(const Tensor& a, const Tensor& b) { return Compare(CompareOp::kGt, a, b); }

Tensor CompareScalar(CompareOp op, const Tensor& a, double s) {
  CheckDefined(Name(op), a, "a");
  return Compare(op, a, Full({}, s, {.dtype = a.dtype(), .device = a.device()}));
}

Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b) { return WhereOp::Apply(cond, a, b); }

Tensor MaskedFill(const Tensor& x, const Tensor& mask, double value) {
  CheckUnscaledFloat("masked_fill", x, "x");
  return Where(mask, Full({}, value, {.dtype = x.dtype(), .device = x.device()}), x);
}

namespace {

// x = op(x, alpha * y) for an elementwise binary op, y checked and broadcast
// to x's shape. Every in-place op with a tensor operand comes through here: a
// y that partially overlaps x is read through a copy (NOTE [overlapping
// operands] in op_checks.h); alpha != 1 reads a fresh alpha * y anyway.
Tensor& BinaryInPlace(const char* op_name, BinaryOp op, Tensor& x, const Tensor& y, double alpha = 1.0) {
  CheckInPlaceAllowed(op_name, x);
  CheckUnscaledFloat(op_name, y, "y");
  CheckSameDtype(op_name, x, y);
  CheckSameDevice(op_name, x, y);
  const Shape shape = BroadcastShapes(x.shape(), y.shape(), op_name);
  OCTET_CHECK(shape == x.shape(), op_name, ": ", Describe(y), " does not broadcast to the in-place target ",
              Describe(x));
  const Tensor ys = alpha == 1.0 ? UnaliasedOperand(x, y) : Unary(UnaryOp::kMulScalar, y, alpha);
  binary_kernel(x.device())(op, x, ys.Expand(shape), x, 0.0);
  x.storage()->BumpVersion();
  return x;
}

}  // namespace

Tensor& AddInPlace(Tensor& x, const Tensor& y, double alpha) {
  return BinaryInPlace("add_", BinaryOp::kAdd, x, y, alpha);
}

Tensor& MaximumInPlace(Tensor& x, const Tensor& y) { return BinaryInPlace("maximum_", BinaryOp::kMaximum, x, y); }

Tensor& MulScalarInPlace(Tensor& x, double s) {
  CheckInPlaceAllowed("mul_", x);
  CheckUnscaledFloat("mul_", x, "x");
  unary_kernel(x.device())(UnaryOp::kMulScalar, x, x, s);
  x.storage()->BumpVersion();
  return x;
}

}  // namespace octet
