// Stateless activation modules: Dropout and GELU (tanh approximation, the
// GPT-2 form; see NOTE [gelu] in ops/functors.h). Both keep x's dtype.
#pragma once

#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/module.h>

namespace octet::nn {

class Dropout : public Module {
 public:
  struct Options {
    double p = 0.0;             // probability of zeroing an element, in [0, 1)
    Generator* gen = nullptr;   // null: the default generator
  };
  explicit Dropout(const Options& options);
  // Identity in eval mode or when p == 0.
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
  double p() const { return options_.p; }

 private:
  Options options_;
};

class GELU : public Module {
 public:
  struct Options {};
  explicit GELU(const Options& = {}) {}
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
};

}  // namespace octet::nn
