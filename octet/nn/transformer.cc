#include <octet/nn/transformer.h>

#include <octet/ops/pointwise.h>

namespace octet::nn {
namespace {
// x + branch in x's dtype.
Tensor Residual(const Tensor& x, const Tensor& branch) {
  return Add(x, branch.dtype() == x.dtype() ? branch : branch.To(x.dtype()));
}
}  // namespace

TransformerBlock::TransformerBlock(const Options& o)
    : ln_1_(RegisterModule<LayerNorm>("ln_1", {.dim = o.n_embd, .eps = o.ln_eps, .bias = o.bias})),
      attn_(RegisterModule<CausalSelfAttention>(
          "attn", {.n_embd = o.n_embd, .n_head = o.n_head, .bias = o.bias, .dropout = o.dropout, .gen = o.gen})),
      ln_2_(RegisterModule<LayerNorm>("ln_2", {.dim = o.n_embd, .eps = o.ln_eps, .bias = o.bias})),
      mlp_(RegisterModule<MLP>("mlp", {.dim = o.n_embd, .bias = o.bias, .dropout = o.dropout, .gen = o.gen})) {}

// ln_1 and ln_2 go into the first Linear of their branch through
// ForwardLayerNorm: fused into its FP8 input at O1 with delayed scaling,
// attn(ln_1(x)) and mlp(ln_2(h)) exactly otherwise (NOTE [layer norm fused
// into the fp8 linear] in nn/linear.h).
Tensor TransformerBlock::Forward(const Tensor& x) {
  const Tensor h = Residual(x, attn_.ForwardLayerNorm(ln_1_, x));
  return Residual(h, mlp_.ForwardLayerNorm(ln_2_, h));
}

}  // namespace octet::nn
