#include <octet/nn/attention.h>

#include <octet/autograd/function.h>
#include <octet/ops/attention.h>

namespace octet::nn {
namespace {
const CausalSelfAttention::Options& Checked(const CausalSelfAttention::Options& o) {
  OCTET_CHECK(o.n_embd > 0 && o.n_head > 0 && o.n_embd % o.n_head == 0,
              "nn::CausalSelfAttention: n_head (", o.n_head, ") must divide n_embd (", o.n_embd, ")");
  return o;
}

// q, k, v as (B,H,T,D) strided views of the fused projection qkv (B,T,3C).
// NOTE [split heads]: one op instead of three Select/Narrow views: the
// backward of each view would allocate and zero a gradient of qkv's full size
// and the engine would add the three (3 fills + 2 adds of (B,T,3C)); this
// writes dq, dk, dv into one (B,T,3C) gradient instead. The result is the
// same bits (adding zeros is exact).
struct SplitHeadsOp : autograd::Op<SplitHeadsOp> {
  static constexpr const char* kName = "split_heads";
  static TensorList Forward(autograd::Ctx& ctx, const Tensor& qkv, int64_t n_head) {
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = n_head, D = C / H;
    ctx.shapes = {qkv.shape()};
    ctx.ints = {n_head};
    const Tensor heads = qkv.detach().View({B, T, 3, H, D}).Permute({2, 0, 3, 1, 4});  // (3,B,H,T,D)
    return {heads.Select(0, 0), heads.Select(0, 1), heads.Select(0, 2)};
  }
  static TensorList Backward(autograd::Ctx& ctx, const TensorList& grads) {
    const Shape& s = ctx.shapes[0];
    const int64_t B = s[0], T = s[1], C = s[2] / 3, H = ctx.ints[0], D = C / H;
    const Tensor& any = grads[0].defined() ? grads[0] : grads[1].defined() ? grads[1] : grads[2];
    Tensor dqkv = Empty(s, {.dtype = any.dtype(), .device = any.device()});
    const Tensor heads = dqkv.View({B, T, 3, H, D}).Permute({2, 0, 3, 1, 4});
    for (int i = 0; i < 3; ++i) {
      Tensor dst = heads.Select(0, i);
      if (grads[i].defined())
        dst.CopyFrom_(grads[i]);
      else
        dst.Fill_(0.0);
    }
    return {dqkv};
  }
};
}  // namespace

CausalSelfAttention::CausalSelfAttention(const Options& o)
    : options_(Checked(o)),
      qkv_(RegisterModule<Linear>("qkv", {.in = o.n_embd, .out = 3 * o.n_embd, .bias = o.bias, .gen = o.gen})),
      proj_(RegisterModule<Linear>("proj", {.in = o.n_embd, .out = o.n_embd, .bias = o.bias, .gen = o.gen})),
      resid_dropout_(RegisterModule<Dropout>("resid_dropout", {.p = o.dropout, .gen = o.gen})) {}

void CausalSelfAttention::CheckInput(const Tensor& x) const {
  OCTET_CHECK(x.dim() == 3 && x.size(2) == options_.n_embd, "nn::CausalSelfAttention: expected x of shape (B,T,",
              options_.n_embd, "), got ", Describe(x));
}

Tensor CausalSelfAttention::Forward(const Tensor& x) {
  CheckInput(x);
  return Attend(qkv_(x));
}

Tensor CausalSelfAttention::ForwardLayerNorm(LayerNorm& ln, const Tensor& x) {
  CheckInput(x);
  return Attend(qkv_.ForwardLayerNorm(ln, x));
}

Tensor CausalSelfAttention::Attend(const Tensor& qkv) {  // qkv (B,T,3C)
  const int64_t B = qkv.size(0), T = qkv.size(1), C = options_.n_embd, H = options_.n_head;
  const TensorList qkv_heads = SplitHeadsOp::Apply(qkv, H);                // 3 x (B,H,T,D), strided views
  const Tensor y = CausalAttention(qkv_heads[0], qkv_heads[1], qkv_heads[2]);  // (B,H,T,D)
  const Tensor merged = y.Permute({0, 2, 1, 3}).Reshape({B, T, C});     // (B,T,C)
  return resid_dropout_(proj_(merged));
}

}  // namespace octet::nn
