#include <octet/optim/sgd.h>

#include <type_traits>

#include <octet/autograd/grad_mode.h>
#include <octet/core/dtype_traits.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/pointwise.h>

namespace octet::optim {

SGD::SGD(NamedTensors params, Options options)
    : Optimizer("sgd", std::move(params), options.lr), options_(options) {
  OCTET_CHECK(options_.lr >= 0.0, "sgd: lr must be >= 0, got ", options_.lr);
  OCTET_CHECK(options_.momentum >= 0.0, "sgd: momentum must be >= 0, got ", options_.momentum);
  OCTET_CHECK(options_.weight_decay >= 0.0, "sgd: weight_decay must be >= 0, got ", options_.weight_decay);
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

namespace {

template <typename P, typename G>
void SgdTensor(const SGD::Options& o, double lr_d, P* param, const G* grad, void* buffer, int64_t n) {
  using C = std::conditional_t<std::is_same_v<P, double>, double, float>;
  const C lr = static_cast<C>(lr_d), wd = static_cast<C>(o.weight_decay), mom = static_cast<C>(o.momentum);
  C* buf = static_cast<C*>(buffer);
  const bool nesterov = o.nesterov;
  cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const C p = ConvertElement<C>(param[i]);
      C g = ConvertElement<C>(grad[i]) + wd * p;
      if (buf != nullptr) {
        const C b = mom * buf[i] + g;
        buf[i] = b;
        g = nesterov ? g + mom * b : b;
      }
      param[i] = ConvertElement<P>(p - lr * g);
    }
  });
}

// NOTE [sgd on a device]: the update of SgdTensor as tensor ops on the
// parameter's device, in the same compute dtype C (float32, float64 for
// float64 parameters), rounding to the parameter's dtype once at the end.
// A few passes instead of one fused kernel: SGD is not on any hot path here
// (the GPT example uses the fused AdamW kernel).
void SgdTensorOps(const SGD::Options& o, double lr, Tensor& p, const Tensor& g_in, Tensor& buf) {
  const DType c = p.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  Tensor pc = p.dtype() == c ? p : p.To(c);
  Tensor g = g_in.To(c).Clone();
  if (o.weight_decay != 0.0) AddInPlace(g, pc, o.weight_decay);
  if (buf.defined()) {
    MulScalarInPlace(buf, o.momentum);
    AddInPlace(buf, g);
    if (o.nesterov) {
      AddInPlace(g, buf, o.momentum);
    } else {
      g = buf;
    }
  }
  AddInPlace(pc, g, -lr);
  if (!pc.is_same(p)) p.CopyFrom_(pc);
}

}  // namespace

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
    if (!p.device().is_cpu()) {
      Tensor param = p;
      SgdTensorOps(options_, lr(), param, g, buffers_[i]);
      continue;
    }
    if (!g.is_contiguous()) g = g.Contiguous();
    void* buf = buffers_[i].defined() ? buffers_[i].raw_data() : nullptr;
    DispatchFloat(p.dtype(), "sgd", [&]<typename P>() {
      if (g.dtype() == p.dtype()) {
        SgdTensor<P, P>(options_, lr(), p.data<P>(), g.data<P>(), buf, p.numel());
      } else if constexpr (!std::is_same_v<P, float>) {
        SgdTensor<P, float>(options_, lr(), p.data<P>(), g.data<float>(), buf, p.numel());
      }
    });
    p.storage()->BumpVersion();
    if (buf != nullptr) buffers_[i].storage()->BumpVersion();
  }
  IncrementStep();
}

}  // namespace octet::optim
