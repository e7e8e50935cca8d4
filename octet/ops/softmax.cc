#include <octet/ops/softmax.h>

#include <octet/autograd/function.h>
#include <octet/ops/index_check.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/ops/softmax_kernels.h>

namespace octet {

OCTET_DEFINE_KERNEL(softmax_fwd, SoftmaxFwdFn);
OCTET_DEFINE_KERNEL(softmax_bwd, SoftmaxBwdFn);
OCTET_DEFINE_KERNEL(cross_entropy_fwd, CrossEntropyFwdFn);
OCTET_DEFINE_KERNEL(cross_entropy_bwd, CrossEntropyBwdFn);

// NOTE [cross-entropy dtypes]: the loss and the per-row logsumexp are in f32
// (f64 for f64 logits) even for bf16/f16 logits. A bf16 loss would round the
// mean of a batch to 8 bits and the logged training curve with it, and the
// per-row logsumexp feeds every element of dlogits in backward. dlogits has
// the logits' dtype, as autograd requires.

namespace {

DType AccDType(DType d) { return d == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// x viewed as (outer, n, inner) around `dim` (a rank-0 x is one element).
Shape SoftmaxView(const Tensor& x, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  return {outer, x.dim() == 0 ? 1 : x.shape()[dim], inner};
}

struct SoftmaxOp : autograd::Op<SoftmaxOp> {
  static constexpr const char* kName = "softmax";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, int64_t dim, bool log) {
    const char* name = log ? "log_softmax" : "softmax";
    ctx.set_op_name(name);
    CheckUnscaledFloat(name, x, "x");
    const int64_t d = x.dim() == 0 ? 0 : WrapDim(dim, x.dim(), name);
    OCTET_CHECK(x.dim() > 0 || dim == 0 || dim == -1, name, ": dim ", dim, " is out of range for ", Describe(x));
    const Shape view = SoftmaxView(x, d);
    Tensor y = Empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    if (x.numel() > 0) softmax_fwd(x.device())(x.Contiguous().View(view), log, y.View(view));
    ctx.Save(y);
    ctx.shapes = {view};
    ctx.ints = {log ? 1 : 0};
    return y;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const Tensor y = ctx.Saved(0);
    const Shape& view = ctx.shapes[0];
    Tensor dx = Empty(y.shape(), {.dtype = y.dtype(), .device = y.device()});
    if (y.numel() > 0)
      softmax_bwd(y.device())(dy.Contiguous().View(view), y.View(view), ctx.ints[0] != 0, dx.View(view));
    return {dx};
  }
};

void CheckCrossEntropyArgs(const Tensor& logits, const Tensor& targets) {
  constexpr const char* kOp = "cross_entropy";
  CheckUnscaledFloat(kOp, logits, "logits");
  OCTET_CHECK(logits.dim() == 2, kOp, ": logits must be (N, V), got ", Describe(logits),
              " (flatten leading dims with Reshape({-1, V}))");
  CheckDtypeIn(kOp, targets, "targets", {DType::kInt64, DType::kInt32});
  OCTET_CHECK(targets.dim() == 1 && targets.shape()[0] == logits.shape()[0], kOp,
              ": targets must be (N) with N = ", logits.shape()[0], " to match logits ", Describe(logits), ", got ",
              Describe(targets));
  OCTET_CHECK(logits.shape()[1] > 0, kOp, ": logits have no classes (V = 0): ", Describe(logits));
  CheckSameDevice(kOp, logits, targets);
}

struct CrossEntropyOp : autograd::Op<CrossEntropyOp> {
  static constexpr const char* kName = "cross_entropy";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                        int reduction_int) {
    CheckCrossEntropyArgs(logits, targets);
    const Reduction reduction = static_cast<Reduction>(reduction_int);
    const int64_t n = logits.shape()[0], v = logits.shape()[1];
    // NOTE [deferred index checks]: the targets checked on the device, bad ones
    // replaced by ignore_index; the count of used rows stays a device tensor.
    const bool deferred = DeferredIndexChecks();
    if (!deferred) CheckIndexCheckCapturable();
    Tensor count;  // int64 [1], deferred only
    const Tensor lc = logits.Contiguous();
    const Tensor tc = deferred ? CheckIndicesDeferred(IndexCheckOp::kCrossEntropy, targets.Contiguous(), v,
                                                      /*has_ignore=*/true, ignore_index, ignore_index, &count)
                               : targets.Contiguous();
    const TensorOptions acc{.dtype = AccDType(logits.dtype()), .device = logits.device()};
    Tensor loss = Empty({n}, acc), lse = Empty({n}, acc);
    const CrossEntropyFwdResult r = cross_entropy_fwd(logits.device())(lc, tc, ignore_index, loss, lse, deferred);
    OCTET_CHECK(r.bad_position < 0, kName, ": target ", r.bad_value, " at position ", r.bad_position,
                " is out of range for V = ", v, " classes (logits ", Describe(logits),
                "); targets must be in [0, ", v, ") or equal ignore_index (", ignore_index, ")");
    ctx.Save(lc);
    ctx.Save(tc);
    ctx.Save(lse);
    ctx.ints = {ignore_index, reduction_int, r.count, deferred ? 1 : 0};
    if (deferred) {
      // 1/count (0 when no row counts) in f64, as the immediate path's host
      // double: the same bits after the same roundings.
      const TensorOptions f64{.dtype = DType::kFloat64, .device = logits.device()};
      const Tensor c64 = count.To(DType::kFloat64).Reshape({});
      const Tensor recip = Where(CompareScalar(CompareOp::kGt, c64, 0.0), Div(Full({}, 1.0, f64), c64), Zeros({}, f64));
      ctx.Save(recip);
      if (reduction == Reduction::kMean) return Mul(Sum(loss), recip.To(acc.dtype));
    }
    switch (reduction) {
      case Reduction::kNone: return loss;
      case Reduction::kSum: return Sum(loss);
      case Reduction::kMean: return r.count > 0 ? MulScalar(Sum(loss), 1.0 / static_cast<double>(r.count))
                                                : Zeros({}, acc);
    }
    OCTET_FAIL(kName, ": unknown reduction ", reduction_int);
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    if (!ctx.NeedsInputGrad(0)) return {Tensor(), Tensor()};
    const Tensor logits = ctx.Saved(0), targets = ctx.Saved(1), lse = ctx.Saved(2);
    const int64_t ignore_index = ctx.ints[0], count = ctx.ints[2];
    const Reduction reduction = static_cast<Reduction>(ctx.ints[1]);
    const int64_t n = logits.shape()[0];
    Tensor dlogits = Empty(logits.shape(), {.dtype = logits.dtype(), .device = logits.device()});
    Tensor dloss = reduction == Reduction::kNone ? dout.Contiguous() : dout.Reshape({1}).Expand({n});
    double scale = reduction == Reduction::kMean ? (count > 0 ? 1.0 / static_cast<double>(count) : 0.0) : 1.0;
    if (ctx.ints[3] == 1 && reduction == Reduction::kMean) {
      // NOTE [deferred index checks]: the kernel's A(double(dloss) * scale)
      // with scale on the device: A(double(dout) * recip), then scale 1.
      const Tensor g = Mul(dout.To(DType::kFloat64).Reshape({}), ctx.Saved(3)).To(dout.dtype());
      dloss = g.Reshape({1}).Expand({n});
      scale = 1.0;
    }
    cross_entropy_bwd(logits.device())(logits, targets, lse, dloss, scale, ignore_index, dlogits);
    return {dlogits, Tensor()};
  }
};

}  // namespace

Tensor Softmax(const Tensor& x, int64_t dim) { return SoftmaxOp::Apply(x, dim, false); }

Tensor LogSoftmax(const Tensor& x, int64_t dim) { return SoftmaxOp::Apply(x, dim, true); }

Tensor CrossEntropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  return CrossEntropyOp::Apply(logits, targets, ignore_index, static_cast<int>(reduction));
}

}  // namespace octet
