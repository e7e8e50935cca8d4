#include <octet/optim/sgd.h>

#include <octet/autograd/grad_mode.h>
#include <octet/ops/optim_kernels.h>

namespace octet::optim {

SGD::SGD(NamedTensors params, Options options)
    : Optimizer("sgd", std::move(params), options.lr), options_(options) {
  CheckFiniteNonNegative(kind(), "momentum", options_.momentum);
  CheckFiniteNonNegative(kind(), "weight_decay", options_.weight_decay);
  OCTET_CHECK(!options_.nesterov || options_.momentum > 0.0, "sgd: nesterov needs momentum > 0");
  buffers_.resize(this->params().size());
  if (options_.momentum == 0.0) return;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Tensor& p = this->params()[i].second;
    const DType d = p.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
    buffers_[i] = Zeros(p.shape(), {.dtype = d, .device = p.device()});
  }
  for (size_t i = 0; i < buffers_.size(); ++i) RegisterState("sgd.momentum." + this->params()[i].first, &buffers_[i]);
}

void SGD::Step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params().size(); ++i) {
    const auto& [name, p] = params()[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    OCTET_CHECK(g.shape() == p.shape() && g.device() == p.device(), "sgd: gradient of '", name, "' is ",
                Describe(g), " but the parameter is ", Describe(p));
    OCTET_CHECK(g.dtype() == p.dtype() || g.dtype() == DType::kFloat32, "sgd: gradient of '", name, "' is ",
                Describe(g), "; expected ", Name(p.dtype()), " or float32");
    if (!g.is_contiguous()) g = g.Contiguous();
    const SgdHyper h{.lr = lr(), .momentum = options_.momentum, .weight_decay = options_.weight_decay,
                     .nesterov = options_.nesterov};
    sgd_kernel(p.device())(h, p, g, buffers_[i]);
    p.storage()->BumpVersion();
    if (buffers_[i].defined()) buffers_[i].storage()->BumpVersion();
  }
  IncrementStep();
}

}  // namespace octet::optim
