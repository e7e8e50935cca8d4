// MLP of a GPT block: Linear C -> hidden (4C), GELU (tanh form), Linear
// hidden -> C, dropout. The first Linear and the GELU go through
// Linear::ForwardGelu: on CUDA the GELU runs in the GEMM's epilogue where
// cuBLASLt can do it (see NOTE [fused gelu at O1] in nn/linear.h) — except
// at O1 with delayed scaling, where the GELU writes proj's FP8 input
// instead (NOTE [gelu fused into the fp8 linear] in nn/linear.h).
#pragma once

#include <cstdint>

#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/activation.h>
#include <octet/nn/layer_norm.h>
#include <octet/nn/linear.h>
#include <octet/nn/module.h>

namespace octet::nn {

class MLP : public Module {
 public:
  struct Options {
    int64_t dim = 0;     // C
    int64_t hidden = 0;  // 0 means 4C
    bool bias = true;
    double dropout = 0.0;
    Generator* gen = nullptr;
  };
  explicit MLP(const Options& options);
  // x: (..., C) -> (..., C).
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
  // Forward(ln(x)) with ln fused into fc's FP8 input where
  // Linear::FusesLayerNorm decides so (NOTE [layer norm fused into the fp8
  // linear] in nn/linear.h). x: (..., C), ln's input.
  Tensor ForwardLayerNorm(LayerNorm& ln, const Tensor& x);
  Linear& fc() { return fc_; }
  Linear& proj() { return proj_; }

 private:
  Linear& fc_;
  Linear& proj_;
  Dropout& dropout_;
};

}  // namespace octet::nn
