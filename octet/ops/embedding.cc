#include <octet/ops/embedding.h>

#include <string>

#include <octet/autograd/function.h>
#include <octet/ops/embedding_kernels.h>
#include <octet/ops/index_check.h>
#include <octet/ops/op_checks.h>

namespace octet {

OCTET_DEFINE_KERNEL(embedding_fwd, EmbeddingFwdFn);
OCTET_DEFINE_KERNEL(embedding_bwd, EmbeddingBwdFn);

namespace {

// "[1, 2]": flat position `pos` of a row-major tensor of `shape` as an index.
std::string IndexStr(int64_t pos, const Shape& shape) {
  Shape idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = pos % shape[d];
    pos /= shape[d];
  }
  return ShapeStr(idx);
}

struct EmbeddingOp : autograd::Op<EmbeddingOp> {
  static constexpr const char* kName = "embedding";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& weight, const Tensor& indices) {
    CheckUnscaledFloat(kName, weight, "weight");
    OCTET_CHECK(weight.dim() == 2, kName, ": weight must be (V, C), got ", Describe(weight));
    CheckDtypeIn(kName, indices, "indices", {DType::kInt64, DType::kInt32});
    CheckSameDevice(kName, weight, indices);
    const int64_t v = weight.shape()[0], c = weight.shape()[1], n = indices.numel();
    const Tensor w = weight.Contiguous();
    // NOTE [deferred index checks]: checked on the device, read later.
    const bool deferred = DeferredIndexChecks() && v > 0;
    if (!DeferredIndexChecks()) CheckIndexCheckCapturable();
    const Tensor idx = deferred ? CheckIndicesDeferred(IndexCheckOp::kEmbedding, indices.Contiguous().View({n}), v,
                                                       /*has_ignore=*/false, 0, /*replacement=*/0, nullptr)
                                : indices.Contiguous().View({n});  // (N)
    Shape out_shape = indices.shape();
    out_shape.push_back(c);
    Tensor out = Empty(out_shape, {.dtype = weight.dtype(), .device = weight.device()});
    const EmbeddingFwdResult r = embedding_fwd(weight.device())(w, idx, out.View({n, c}), deferred);
    OCTET_CHECK(r.bad_position < 0, kName, ": index ", r.bad_value, " at position ",
                IndexStr(r.bad_position, indices.shape()), " of indices ", Describe(indices),
                " is out of range for V = ", v, " rows (weight ", Describe(weight), ")");
    ctx.Save(idx);
    ctx.shapes = {weight.shape()};
    return out;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    if (!ctx.NeedsInputGrad(0)) return {Tensor(), Tensor()};
    const Tensor idx = ctx.Saved(0);
    const Shape& wshape = ctx.shapes[0];
    Tensor dweight = Empty(wshape, {.dtype = dout.dtype(), .device = dout.device()});
    embedding_bwd(dout.device())(dout.Contiguous().View({idx.numel(), wshape[1]}), idx, dweight);
    return {dweight, Tensor()};
  }
};

}  // namespace

Tensor Embedding(const Tensor& weight, const Tensor& indices) { return EmbeddingOp::Apply(weight, indices); }

}  // namespace octet
