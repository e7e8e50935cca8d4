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

double ResolvedScale(double scale, int64_t head_size) {
  return scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(head_size)) : scale;
}

// Runs the forward kernel into `out` ((B,H,T,D), any strides) and saves
// what backward reads. Returns nothing: out is the result.
void AttentionForward(autograd::Ctx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                      const Tensor& out) {
  const Shape& shape = q.shape();  // (B,H,T,D)
  const double s = ResolvedScale(scale, shape[3]);
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
}

// Runs the backward kernel from dout ((B,H,T,D), any strides) into dq, dk,
// dv (any strides, each undefined when not wanted).
void AttentionBackward(const autograd::Ctx& ctx, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv) {
  const Tensor q = ctx.Saved(0), k = ctx.Saved(1), v = ctx.Saved(2), out = ctx.Saved(3), lse = ctx.Saved(4);
  OCTET_CHECK(dout.shape() == q.shape() && dout.dtype() == q.dtype(), kOpName,
              " backward: output gradient ", Describe(dout), " does not match the output ", Describe(out));
  if (q.numel() > 0 && (dq.defined() || dk.defined() || dv.defined()))
    causal_attention_bwd(q.device())(q, k, v, out, dout, lse, ctx.doubles[0], dq, dk, dv);
}

struct CausalAttentionOp : autograd::Op<CausalAttentionOp> {
  static constexpr const char* kName = kOpName;

  static Tensor Forward(autograd::Ctx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
    CheckAttentionArgs(q, k, v);
    Tensor out = Empty(q.shape(), {.dtype = q.dtype(), .device = q.device()});
    AttentionForward(ctx, q, k, v, scale, out);
    return out;
  }

  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    const Tensor& q = ctx.Saved(0);
    const TensorOptions options{.dtype = q.dtype(), .device = q.device()};
    Tensor dq = ctx.NeedsInputGrad(0) ? Empty(q.shape(), options) : Tensor();
    Tensor dk = ctx.NeedsInputGrad(1) ? Empty(q.shape(), options) : Tensor();
    Tensor dv = ctx.NeedsInputGrad(2) ? Empty(q.shape(), options) : Tensor();
    AttentionBackward(ctx, dout, dq, dk, dv);
    return {dq, dk, dv};
  }
};

// NOTE [attention in the qkv layout]: a GPT block's attention reads q, k
// and v from one fused projection (B,T,3C) and hands its output, heads side
// by side, to the next projection as (B,T,C). Through CausalAttention that
// is a split into (B,H,T,D) views (no copy: any input strides are read in
// place), a contiguous (B,H,T,D) output permuted and copied into (B,T,C),
// and in backward three contiguous (B,H,T,D) gradients copied into one
// (B,T,3C) gradient: four copies of an activation-sized tensor per block
// and step, each its own parallel region on the CPU (perf: 16 of a small
// GPT step's ~220 regions). The kernels write any output strides, so this op
// hands them the heads of the (B,T,C) output and of the (B,T,3C) gradient
// as (B,H,T,D) views instead: no copies, the same values (the kernels
// compute each element the same way whatever its address).

// q, k, v (B,H,T,D) as views of qkv (B,T,3C), and the (B,H,T,D) view of a (B,T,C) tensor.
TensorList HeadsOf(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
  const Tensor heads = qkv.Reshape({B, T, 3, n_head, D}).Permute({2, 0, 3, 1, 4});  // (3,B,H,T,D)
  return {heads.Select(0, 0), heads.Select(0, 1), heads.Select(0, 2)};
}
Tensor HeadsOfMerged(const Tensor& x, int64_t n_head) {  // (B,T,C) -> (B,H,T,D)
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  return x.Reshape({B, T, n_head, C / n_head}).Permute({0, 2, 1, 3});
}

constexpr const char* kQkvOpName = "causal_attention_qkv";

struct CausalAttentionQkvOp : autograd::Op<CausalAttentionQkvOp> {
  static constexpr const char* kName = kQkvOpName;

  static Tensor Forward(autograd::Ctx& ctx, const Tensor& qkv, int64_t n_head, double scale) {
    CheckUnscaledFloat(kQkvOpName, qkv, "qkv");
    OCTET_CHECK(qkv.dim() == 3, kQkvOpName, ": qkv must have rank 3 (B,T,3C), got ", Describe(qkv));
    OCTET_CHECK(n_head >= 1, kQkvOpName, ": n_head must be at least 1, got ", n_head);
    const int64_t width = qkv.size(2);
    OCTET_CHECK(width % 3 == 0 && (width / 3) % n_head == 0 && width > 0, kQkvOpName,
                ": the last dim of qkv (", width, ") must be 3 * n_head (", n_head, ") * a head size >= 1, got ",
                Describe(qkv));
    const TensorList h = HeadsOf(qkv.detach(), n_head);
    CheckAttentionArgs(h[0], h[1], h[2]);
    Tensor out = Empty({qkv.size(0), qkv.size(1), width / 3}, {.dtype = qkv.dtype(), .device = qkv.device()});
    AttentionForward(ctx, h[0], h[1], h[2], scale, HeadsOfMerged(out, n_head));
    ctx.ints = {n_head};
    return out;
  }

  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    if (!ctx.NeedsInputGrad(0)) return {Tensor()};
    const int64_t n_head = ctx.ints[0];
    const Tensor& q = ctx.Saved(0);  // (B,H,T,D)
    const int64_t B = q.size(0), T = q.size(2), C = q.size(1) * q.size(3);
    OCTET_CHECK(dout.dim() == 3 && dout.size(0) == B && dout.size(1) == T && dout.size(2) == C, kQkvOpName,
                " backward: output gradient ", Describe(dout), " is not (B,T,C) = (", B, ",", T, ",", C, ")");
    Tensor dqkv = Empty({B, T, 3 * C}, {.dtype = q.dtype(), .device = q.device()});
    const TensorList d = HeadsOf(dqkv, n_head);
    AttentionBackward(ctx, HeadsOfMerged(dout, n_head), d[0], d[1], d[2]);
    return {dqkv};
  }
};

}  // namespace

Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  return CausalAttentionOp::Apply(q, k, v, scale);
}

Tensor CausalAttentionQkv(const Tensor& qkv, int64_t n_head, double scale) {
  CheckDefined(kQkvOpName, qkv, "qkv");
  return CausalAttentionQkvOp::Apply(qkv, n_head, scale);
}

}  // namespace octet
