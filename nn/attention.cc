#include "nn/attention.h"

#include "ops/attention.h"

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

Tensor CausalSelfAttention::Forward(const Tensor& x) {
  OCTET_CHECK(x.dim() == 3 && x.size(2) == options_.n_embd, "nn::CausalSelfAttention: expected x of shape (B,T,",
              options_.n_embd, "), got ", Describe(x));
  const int64_t B = x.size(0), T = x.size(1), C = options_.n_embd, H = options_.n_head, D = C / H;
  const Tensor qkv = qkv_(x);                                             // (B,T,3C)
  const Tensor heads = qkv.View({B, T, 3, H, D}).Permute({2, 0, 3, 1, 4});  // (3,B,H,T,D), strided
  const Tensor y = CausalAttention(heads.Select(0, 0), heads.Select(0, 1), heads.Select(0, 2));  // (B,H,T,D)
  const Tensor merged = y.Permute({0, 2, 1, 3}).Reshape({B, T, C});     // (B,T,C)
  return resid_dropout_(proj_(merged));
}

}  // namespace octet::nn
