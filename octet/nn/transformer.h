// Pre-LN transformer block (GPT-2):
//   x = x + attn(ln_1(x))
//   x = x + mlp(ln_2(x))
// At O1 with delayed scaling ln_1 / ln_2 write the FP8 input of attn.qkv /
// mlp.fc directly (NOTE [layer norm fused into the fp8 linear] in
// nn/linear.h).
// The residual stream keeps x's dtype (float32 at O0, bfloat16 at O1/O2); a
// branch output of another dtype is converted to it before the add.
#pragma once

#include <cstdint>

#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/attention.h>
#include <octet/nn/layer_norm.h>
#include <octet/nn/mlp.h>
#include <octet/nn/module.h>

namespace octet::nn {

class TransformerBlock : public Module {
 public:
  struct Options {
    int64_t n_embd = 0;
    int64_t n_head = 1;
    bool bias = true;
    double dropout = 0.0;
    double ln_eps = 1e-5;
    Generator* gen = nullptr;
  };
  explicit TransformerBlock(const Options& options);
  // x: (B,T,C) -> (B,T,C).
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
  CausalSelfAttention& attn() { return attn_; }
  MLP& mlp() { return mlp_; }
  LayerNorm& ln_1() { return ln_1_; }
  LayerNorm& ln_2() { return ln_2_; }

 private:
  LayerNorm& ln_1_;
  CausalSelfAttention& attn_;
  LayerNorm& ln_2_;
  MLP& mlp_;
};

}  // namespace octet::nn
