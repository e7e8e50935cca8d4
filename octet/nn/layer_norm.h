// LayerNorm and RMSNorm over the last dim (ops/norm.h), with learnable affine
// parameters kept in float32.
//
// amp: at O1/O2 the input is converted to bfloat16 (if it is not already), the
// affine parameters are cast to bfloat16 for the kernel (gradients flow back
// to the float32 masters through the cast) and the per-row statistics are
// float32 inside the kernel; the output is bfloat16. At O0 the input must have
// the parameters' dtype.
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>
#include <octet/nn/module.h>

namespace octet::nn {

class LayerNorm : public Module {
 public:
  struct Options {
    int64_t dim = 0;       // C, the size of the last dim
    double eps = 1e-5;
    bool affine = true;    // weight (init 1)
    bool bias = true;      // bias (init 0); only with affine
    DType dtype = DType::kFloat32;
  };
  explicit LayerNorm(const Options& options);
  // x: (..., C) -> (..., C).
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
  Tensor* weight() { return weight_; }
  Tensor* bias() { return bias_; }
  const Options& options() const { return options_; }

 private:
  Options options_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
};

class RMSNorm : public Module {
 public:
  struct Options {
    int64_t dim = 0;
    double eps = 1e-6;
    bool affine = true;  // weight (init 1)
    DType dtype = DType::kFloat32;
  };
  explicit RMSNorm(const Options& options);
  // x: (..., C) -> (..., C).
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
  Tensor* weight() { return weight_; }

 private:
  Options options_;
  Tensor* weight_ = nullptr;
};

// The tensor a module of level `level` computes on: x converted to the
// level's compute dtype (nn/amp_recipe.h ComputeDType) at O1/O2, x itself at O0.
Tensor ToComputeDType(const Tensor& x, amp::Level level);
// A parameter as the kernel of a level wants it: cast to bfloat16 at O1/O2
// (differentiable; the gradient returns to the float32 master), else itself.
// Undefined stays undefined.
Tensor CastParam(const Tensor* p, amp::Level level);

}  // namespace octet::nn
