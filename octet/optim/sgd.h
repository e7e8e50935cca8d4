// Stochastic gradient descent with momentum, Nesterov momentum and (coupled,
// L2-style) weight decay — PyTorch's torch.optim.SGD without dampening:
//
//   g = grad + weight_decay * p
//   if momentum != 0:  buf = momentum * buf + g      (buf starts at 0, so the
//                                                     first step has buf = g)
//                      g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
//
// Computes in f32 (f64 for f64 parameters); bf16/f16 parameters are rounded
// back after each step (no master copy: use AdamW, or f32 parameters, when
// that matters). The momentum buffer has the compute dtype (f32 or f64).
// State dict: "sgd.momentum.<param>" (only when momentum != 0); scalars type,
// step, lr.
#pragma once

#include <vector>

#include <octet/optim/optimizer.h>

namespace octet::optim {

class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 1e-2;
    double momentum = 0.0;
    bool nesterov = false;
    double weight_decay = 0.0;
  };
  // Throws octet::Error for bad parameters (see Optimizer), lr < 0,
  // momentum < 0, weight_decay < 0, or nesterov without momentum.
  SGD(NamedTensors params, Options options);

  void Step() override;
  const Options& options() const { return options_; }
  // The momentum buffer of params()[index] (undefined when momentum == 0).
  const Tensor& momentum_buffer(size_t index) const { return buffers_.at(index); }

 private:
  Options options_;
  std::vector<Tensor> buffers_;
};

}  // namespace octet::optim
