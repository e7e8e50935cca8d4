#include <octet/ops/reduce.h>

#include <octet/autograd/function.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce_kernels.h>

namespace octet {

OCTET_DEFINE_KERNEL(reduce_kernel, ReduceKernelFn);
OCTET_DEFINE_KERNEL(argmax_kernel, ArgMaxKernelFn);

namespace {

const char* ReduceName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAbsMax: return "absmax";
  }
  return "reduce";
}

// NOTE [rank-0 reductions]: as PyTorch, a rank-0 tensor accepts dim 0 (or
// -1) and reduces over its one element: Sum(Scalar(2), {0}) is Scalar(2),
// ArgMax(Scalar(2), 0) is 0; keepdim keeps rank 0.
std::vector<bool> ReducedMask(const Tensor& x, const Shape& dims, const char* op) {
  std::vector<bool> reduced(x.dim(), dims.empty());
  bool scalar_dim_seen = false;  // a rank-0 tensor has no mask entry to mark
  for (int64_t d : dims) {
    const int64_t w = WrapDim(d, x.dim(), op);
    const bool seen = x.dim() == 0 ? scalar_dim_seen : reduced[w];
    OCTET_CHECK(!seen, op, ": dim ", d, " given twice in ", ShapeStr(dims));
    if (x.dim() == 0) {
      scalar_dim_seen = true;
    } else {
      reduced[w] = true;
    }
  }
  return reduced;
}

Shape KeepdimShape(const Tensor& x, const std::vector<bool>& reduced) {
  Shape s = x.shape();
  for (size_t d = 0; d < s.size(); ++d)
    if (reduced[d]) s[d] = 1;
  return s;
}

Shape OutShape(const Tensor& x, const std::vector<bool>& reduced, bool keepdim) {
  Shape s;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d])
      s.push_back(x.shape()[d]);
    else if (keepdim)
      s.push_back(1);
  }
  return s;
}

Tensor RawReduce(ReduceOp op, const Tensor& x, const std::vector<bool>& reduced) {
  Tensor out = Empty(KeepdimShape(x, reduced), {.dtype = x.dtype(), .device = x.device()});
  if (x.numel() == 0) {
    OCTET_CHECK(op == ReduceOp::kSum, ReduceName(op), ": cannot reduce an empty tensor ", Describe(x));
    out.Fill_(0.0);
    return out;
  }
  reduce_kernel(x.device())(op, x, reduced, out);
  return out;
}

struct ReduceFwd : autograd::Op<ReduceFwd> {
  static constexpr const char* kName = "reduce";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, int op_int, const Shape& dims, bool keepdim,
                        bool mean) {
    const ReduceOp op = static_cast<ReduceOp>(op_int);
    const char* name = mean ? "mean" : ReduceName(op);
    ctx.set_op_name(name);
    CheckUnscaledFloat(name, x, "x");
    const std::vector<bool> reduced = ReducedMask(x, dims, name);
    Tensor kept = RawReduce(op, x, reduced);
    int64_t count = 1;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (reduced[d]) count *= x.shape()[d];
    if (mean) {
      OCTET_CHECK(count > 0, "mean: cannot average over zero elements of ", Describe(x));
      kept = UnaryRaw(UnaryOp::kMulScalar, kept, 1.0 / static_cast<double>(count));
    }
    ctx.ints = {op_int, mean ? 1 : 0, count};
    ctx.shapes = {x.shape(), kept.shape()};
    if (op != ReduceOp::kSum) {
      ctx.Save(x);
      ctx.Save(kept);
    }
    return kept.View(OutShape(x, reduced, keepdim));
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const ReduceOp op = static_cast<ReduceOp>(ctx.ints[0]);
    const bool mean = ctx.ints[1] != 0;
    const Shape& xshape = ctx.shapes[0];
    const Tensor dy_kept = dy.Reshape(ctx.shapes[1]);
    if (op == ReduceOp::kSum) {
      Tensor g = dy_kept.Expand(xshape);
      if (mean) g = UnaryRaw(UnaryOp::kMulScalar, g, 1.0 / static_cast<double>(ctx.ints[2]));
      return {g.Contiguous()};
    }
    const Tensor x = ctx.Saved(0);
    const Tensor kept = ctx.Saved(1);
    const Tensor xv = op == ReduceOp::kAbsMax ? UnaryRaw(UnaryOp::kAbs, x) : x;
    const Tensor hit = Compare(CompareOp::kEq, xv, kept.Expand(xshape)).To(dy.dtype());
    // Split evenly between ties.
    std::vector<bool> reduced(xshape.size());
    for (size_t d = 0; d < xshape.size(); ++d) reduced[d] = ctx.shapes[1][d] == 1 && xshape[d] != 1;
    const Tensor ties = RawReduce(ReduceOp::kSum, hit, reduced);
    Tensor g = BinaryRaw(BinaryOp::kMul, hit, BinaryRaw(BinaryOp::kDiv, dy_kept, ties).Expand(xshape));
    if (op == ReduceOp::kAbsMax) {
      const Tensor sign = BinaryRaw(BinaryOp::kSub, CompareScalar(CompareOp::kGt, x, 0.0).To(dy.dtype()),
                                    CompareScalar(CompareOp::kLt, x, 0.0).To(dy.dtype()));
      g = BinaryRaw(BinaryOp::kMul, g, sign);
    }
    return {g};
  }
};

}  // namespace

Tensor Sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return ReduceFwd::Apply(x, static_cast<int>(ReduceOp::kSum), dims, keepdim, false);
}
Tensor Mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return ReduceFwd::Apply(x, static_cast<int>(ReduceOp::kSum), dims, keepdim, true);
}
Tensor Max(const Tensor& x, const Shape& dims, bool keepdim) {
  return ReduceFwd::Apply(x, static_cast<int>(ReduceOp::kMax), dims, keepdim, false);
}
Tensor Min(const Tensor& x, const Shape& dims, bool keepdim) {
  return ReduceFwd::Apply(x, static_cast<int>(ReduceOp::kMin), dims, keepdim, false);
}
Tensor AbsMax(const Tensor& x, const Shape& dims, bool keepdim) {
  return ReduceFwd::Apply(x, static_cast<int>(ReduceOp::kAbsMax), dims, keepdim, false);
}

Tensor ArgMax(const Tensor& x, int64_t dim, bool keepdim) {
  CheckDefined("argmax", x, "x");
  OCTET_CHECK(!IsFp8(x.dtype()), "argmax: FP8 input ", Describe(x), " is rejected; dequantize first");
  const int64_t d = WrapDim(dim, x.dim(), "argmax");
  if (x.dim() == 0) return ArgMax(x.Reshape({1}), 0, false);  // NOTE [rank-0 reductions]
  OCTET_CHECK(x.shape()[d] > 0, "argmax: dim ", dim, " of ", Describe(x), " is empty");
  Shape kshape = x.shape();
  kshape[d] = 1;
  Tensor out = Empty(kshape, {.dtype = DType::kInt64, .device = x.device()});
  argmax_kernel(x.device())(x, d, out);
  return keepdim ? out : out.Squeeze(d);
}

Tensor SumToShape(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  OCTET_CHECK(lead >= 0, "sum_to_shape: cannot reduce ", Describe(x), " to ", ShapeStr(shape));
  Shape dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && x.shape()[d] != 1) {
      dims.push_back(d);
    } else {
      OCTET_CHECK(shape[d - lead] == x.shape()[d], "sum_to_shape: cannot reduce ", Describe(x), " to ",
                  ShapeStr(shape));
    }
  }
  if (dims.empty()) return x.Reshape(shape);
  return Sum(x, dims, /*keepdim=*/true).Reshape(shape);
}

}  // namespace octet
