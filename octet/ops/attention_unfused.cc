#include <octet/ops/attention_unfused.h>

#include <limits>

#include <octet/autograd/grad_mode.h>
#include <octet/ops/matmul.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>

namespace octet {
namespace {

DType ComputeDtype(DType input) { return input == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// scale·Q·Kᵀ with the causal mask: (B,H,T,T) in the compute dtype. The mask
// (key index > query index) is built on the device from two index vectors.
Tensor MaskedScores(const Tensor& qc, const Tensor& kc, double scale) {
  const int64_t t = qc.size(2);
  Tensor s = MulScalar(Matmul(qc, kc.Transpose(-1, -2)), scale);
  const Tensor idx = Arange(t, {.dtype = DType::kInt64, .device = qc.device()});
  const Tensor future = Compare(CompareOp::kGt, idx.Unsqueeze(0), idx.Unsqueeze(1));  // (T,T): column > row
  return MaskedFill(s, future, -std::numeric_limits<double>::infinity());
}

// Writes src (any dtype) into dst (a kernel output).
void Store(const Tensor& dst, const Tensor& src) {
  Tensor d = dst;
  d.CopyFrom_(src);
}

}  // namespace

void CausalAttentionFwdUnfused(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                               const Tensor& lse) {
  NoGradGuard no_grad;
  const DType c = ComputeDtype(q.dtype());
  const Tensor s = MaskedScores(q.To(c), k.To(c), scale);  // (B,H,T,T)
  // Every row keeps its diagonal, so the row max is finite.
  const Tensor m = Max(s, {-1}, /*keepdim=*/true);  // (B,H,T,1)
  const Tensor e = Exp(Sub(s, m));
  const Tensor l = Sum(e, {-1}, /*keepdim=*/true);
  Store(lse, Add(m, Log(l)).Squeeze(-1));
  Store(out, Matmul(Div(e, l), v.To(c)));
}

void CausalAttentionBwdUnfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& dout, const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv) {
  NoGradGuard no_grad;
  const DType c = ComputeDtype(q.dtype());
  const Tensor qc = q.To(c), kc = k.To(c), doc = dout.To(c);
  // P from the saved log-sum-exp; masked scores give exp(-inf) = 0.
  const Tensor p = Exp(Sub(MaskedScores(qc, kc, scale), lse.To(c).Unsqueeze(-1)));  // (B,H,T,T)
  if (dv.defined()) Store(dv, Matmul(p.Transpose(-1, -2), doc));
  if (!dq.defined() && !dk.defined()) return;
  const Tensor dp = Matmul(doc, v.To(c).Transpose(-1, -2));
  const Tensor row = Sum(Mul(doc, out.To(c)), {-1}, /*keepdim=*/true);  // (B,H,T,1)
  const Tensor ds = Mul(p, Sub(dp, row));
  if (dq.defined()) Store(dq, MulScalar(Matmul(ds, kc), scale));
  if (dk.defined()) Store(dk, MulScalar(Matmul(ds.Transpose(-1, -2), qc), scale));
}

}  // namespace octet
