#include <octet/nn/mlp.h>

namespace octet::nn {
namespace {
int64_t Hidden(const MLP::Options& o) {
  OCTET_CHECK(o.dim > 0 && o.hidden >= 0, "nn::MLP: dim must be positive and hidden >= 0, got dim=", o.dim,
              " hidden=", o.hidden);
  return o.hidden > 0 ? o.hidden : 4 * o.dim;
}
}  // namespace

MLP::MLP(const Options& o)
    : fc_(RegisterModule<Linear>("fc", {.in = o.dim, .out = Hidden(o), .bias = o.bias, .gen = o.gen})),
      proj_(RegisterModule<Linear>("proj", {.in = Hidden(o), .out = o.dim, .bias = o.bias, .gen = o.gen})),
      dropout_(RegisterModule<Dropout>("dropout", {.p = o.dropout, .gen = o.gen})) {}

// NOTE [gelu fused into the fp8 linear] in nn/linear.h: where proj fuses the
// GELU into its FP8 input, fc runs without its GELU.
Tensor MLP::Forward(const Tensor& x) {
  if (proj_.FusesGelu(x)) return dropout_(proj_.ForwardGeluInput(fc_(x)));
  return dropout_(proj_(fc_.ForwardGelu(x)));
}
Tensor MLP::ForwardLayerNorm(LayerNorm& ln, const Tensor& x) {
  if (proj_.FusesGelu(x)) return dropout_(proj_.ForwardGeluInput(fc_.ForwardLayerNorm(ln, x)));
  return dropout_(proj_(fc_.ForwardLayerNormGelu(ln, x)));
}

}  // namespace octet::nn
