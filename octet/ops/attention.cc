#include <octet/ops/attention.h>

#include <cmath>

#include <octet/autograd/function.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/op_checks.h>

namespace octet {

OCTET_DEFINE_KERNEL(causal_attention_fwd, CausalAttentionFwdFn);
OCTET_DEFINE_KERNEL(causal_attention_bwd, CausalAttentionBwdFn);

DType AttentionLseDtype(DType input) { return input == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

namespace {

constexpr const char* kOpName = "causal_attention";

void CheckAttentionArgs(const Tensor& q, const Tensor& k, const Tensor& v) {
  CheckUnscaledFloat(kOpName, q, "q");
  CheckUnscaledFloat(kOpName, k, "k");
  CheckUnscaledFloat(kOpName, v, "v");
  OCTET_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kOpName,
              ": q, k and v must have rank 4 (B,H,T,D), got q ", Describe(q), ", k ", Describe(k), ", v ",
              Describe(v));
  OCTET_CHECK(q.shape() == k.shape() && q.shape() == v.shape(), kOpName,
              ": q, k and v must have the same shape (B,H,T,D), got q ", Describe(q), ", k ", Describe(k), ", v ",
              Describe(v));
  CheckSameDtype(kOpName, q, k);
  CheckSameDtype(kOpName, q, v);
  CheckSameDevice(kOpName, q, k);
  CheckSameDevice(kOpName, q, v);
  OCTET_CHECK(q.size(3) > 0, kOpName, ": head size D must be at least 1, got q ", Describe(q));
}

struct CausalAttentionOp : autograd::Op<CausalAttentionOp> {
  static constexpr const char* kName = kOpName;

  static Tensor Forward(autograd::Ctx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
    CheckAttentionArgs(q, k, v);
    const Shape& shape = q.shape();  // (B,H,T,D)
    const double s = scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(shape[3])) : scale;
    Tensor out = Empty(shape, {.dtype = q.dtype(), .device = q.device()});
    Tensor lse = Empty({shape[0], shape[1], shape[2]}, {.dtype = AttentionLseDtype(q.dtype()), .device = q.device()});
    if (out.numel() > 0) causal_attention_fwd(q.device())(q, k, v, s, out, lse);
    if (ctx.recording()) {
      ctx.Save(q);
      ctx.Save(k);
      ctx.Save(v);
      ctx.Save(out);
      ctx.Save(lse);
      ctx.doubles = {s};
    }
    return out;
  }

  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    const Tensor q = ctx.Saved(0), k = ctx.Saved(1), v = ctx.Saved(2), out = ctx.Saved(3), lse = ctx.Saved(4);
    OCTET_CHECK(dout.shape() == q.shape() && dout.dtype() == q.dtype(), kOpName,
                " backward: output gradient ", Describe(dout), " does not match the output ", Describe(out));
    const TensorOptions options{.dtype = q.dtype(), .device = q.device()};
    Tensor dq = ctx.NeedsInputGrad(0) ? Empty(q.shape(), options) : Tensor();
    Tensor dk = ctx.NeedsInputGrad(1) ? Empty(q.shape(), options) : Tensor();
    Tensor dv = ctx.NeedsInputGrad(2) ? Empty(q.shape(), options) : Tensor();
    if (q.numel() > 0 && (dq.defined() || dk.defined() || dv.defined()))
      causal_attention_bwd(q.device())(q, k, v, out, dout, lse, ctx.doubles[0], dq, dk, dv);
    return {dq, dk, dv};
  }
};

}  // namespace

Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  return CausalAttentionOp::Apply(q, k, v, scale);
}

}  // namespace octet
