#include <octet/nn/attention.h>

#include <octet/ops/attention.h>

namespace octet::nn {
namespace {
const CausalSelfAttention::Options& Checked(const CausalSelfAttention::Options& o) {
  OCTET_CHECK(o.n_embd > 0 && o.n_head > 0 && o.n_embd % o.n_head == 0,
              "nn::CausalSelfAttention: n_head (", o.n_head, ") must divide n_embd (", o.n_embd, ")");
  return o;
}
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
  // Heads read from qkv and written side by side in place (NOTE [attention
  // in the qkv layout] in ops/attention.cc).
  return resid_dropout_(proj_(CausalAttentionQkv(qkv, options_.n_head)));  // (B,T,C)
}

}  // namespace octet::nn
