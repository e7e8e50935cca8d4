#include <octet/nn/attention.h>

#include <octet/nn/fp8_scaling.h>
#include <octet/ops/attention.h>
#include <octet/ops/cast.h>

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
  const amp::Recipe& recipe = amp_recipe();
  if (amp_level() != amp::Level::kO1 || !recipe.fp8_attention_inputs)
    return resid_dropout_(proj_(CausalAttentionQkv(qkv, options_.n_head)));  // (B,T,C)
  // O1: the attention keeps only an FP8 copy of qkv (NOTE [fp8 attention
  // inputs]), quantized with its own amax (current scaling: no state).
  const DType fp8 = recipe.forward_dtype;
  const Tensor one = Full({1}, 1.0, {.dtype = DType::kFloat32, .device = qkv.device()});
  const Tensor scale = amp::CurrentScale(recipe, fp8, Amax(qkv), one);
  return resid_dropout_(proj_(CausalAttentionQkvFp8(Quantize(qkv, fp8, scale), options_.n_head, qkv.dtype())));
}

}  // namespace octet::nn
