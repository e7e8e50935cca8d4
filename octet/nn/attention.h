// CausalSelfAttention (GPT-2): one fused qkv Linear (C -> 3C), split into q,
// k, v in that order, heads of size D = C/H, causal scaled dot-product
// attention (ops/attention.h, scale 1/sqrt(D)), then the output projection
// (C -> C) and residual dropout.
//
// Dimension letters: B batch, T sequence, C channels, H heads, D head size.
// Dropout applies to the projection output only (the fused attention kernel
// has no dropout on the attention probabilities).
#pragma once

#include <cstdint>

#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/activation.h>
#include <octet/nn/layer_norm.h>
#include <octet/nn/linear.h>
#include <octet/nn/module.h>

namespace octet::nn {

class CausalSelfAttention : public Module {
 public:
  struct Options {
    int64_t n_embd = 0;  // C
    int64_t n_head = 1;  // H; must divide C
    bool bias = true;
    double dropout = 0.0;
    Generator* gen = nullptr;  // dropout and init
  };
  explicit CausalSelfAttention(const Options& options);
  // x: (B,T,C) -> (B,T,C).
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
  // Forward(ln(x)) with ln fused into the qkv Linear's FP8 input where
  // Linear::FusesLayerNorm decides so (NOTE [layer norm fused into the fp8
  // linear] in nn/linear.h). x: (B,T,C), ln's input.
  Tensor ForwardLayerNorm(LayerNorm& ln, const Tensor& x);
  Linear& qkv() { return qkv_; }
  Linear& proj() { return proj_; }

 private:
  void CheckInput(const Tensor& x) const;
  Tensor Attend(const Tensor& qkv);  // qkv (B,T,3C) -> (B,T,C)
  Options options_;
  Linear& qkv_;
  Linear& proj_;
  Dropout& resid_dropout_;
};

}  // namespace octet::nn
