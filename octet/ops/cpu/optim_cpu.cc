// CPU kernels of SGD (NOTE [sgd update] in ops/optim_kernels.h) and of the
// loss scaler's unscale: one OpenMP loop per tensor each. (AdamW has its own
// file, ops/cpu/adamw_cpu.cc.)
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <octet/core/dtype_traits.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/optim_kernels.h>

namespace octet::cpu {
namespace {

// ---- SGD -------------------------------------------------------------------------

template <typename P, typename G>
void SgdTensor(const SgdHyper& h, P* param, const G* grad, void* buffer, int64_t n) {
  using C = std::conditional_t<std::is_same_v<P, double>, double, float>;
  const C lr = static_cast<C>(h.lr), wd = static_cast<C>(h.weight_decay), mom = static_cast<C>(h.momentum);
  C* buf = static_cast<C*>(buffer);
  const bool nesterov = h.nesterov;
  ParallelFor(n, kParallelGrain, [&](int64_t begin, int64_t end) {
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

void SgdCpu(const SgdHyper& h, const Tensor& param, const Tensor& grad, const Tensor& buffer) {
  OCTET_CHECK(param.is_contiguous() && grad.is_contiguous() && grad.numel() == param.numel(),
              "sgd: the CPU kernel needs a contiguous parameter and gradient of one size, got ", Describe(param),
              " and ", Describe(grad));
  const DType c = param.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  OCTET_CHECK(!buffer.defined() || (buffer.dtype() == c && buffer.is_contiguous() && buffer.numel() == param.numel()),
              "sgd: the momentum buffer is ", Describe(buffer), "; expected a contiguous ", Name(c), " tensor like ",
              Describe(param));
  void* buf = buffer.defined() ? buffer.raw_data() : nullptr;
  DispatchFloat(param.dtype(), "sgd", [&]<typename P>() {
    if (grad.dtype() == param.dtype()) {
      SgdTensor<P, P>(h, param.data<P>(), grad.data<P>(), buf, param.numel());
    } else if (grad.dtype() == DType::kFloat32) {
      if constexpr (!std::is_same_v<P, float>) SgdTensor<P, float>(h, param.data<P>(), grad.data<float>(), buf,
                                                                    param.numel());
    } else {
      OCTET_FAIL("sgd: gradient ", Describe(grad), " does not match parameter ", Describe(param));
    }
  });
}

// ---- loss-scaler unscale -----------------------------------------------------------

bool UnscaleGradCpu(const Tensor& grad, double inv_scale) {
  OCTET_CHECK(grad.is_contiguous(), "loss scaler: the CPU unscale kernel needs a contiguous gradient, got ",
              Describe(grad), " (non-contiguous)");
  bool found_inf = false;
  DispatchFloat(grad.dtype(), "loss scaler unscale", [&]<typename T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const C c = static_cast<C>(inv_scale);
    T* x = grad.data<T>();
    const int64_t n = grad.numel();
    // One flag per fixed block (no shared writes from threads).
    constexpr int64_t kBlock = 16384;
    const int64_t nblocks = (n + kBlock - 1) / kBlock;
    std::vector<char> bad(nblocks, 0);
    ParallelFor(nblocks, 2, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        bool nonfinite = false;
        const int64_t end = std::min(n, (b + 1) * kBlock);
        for (int64_t i = b * kBlock; i < end; ++i) {
          const C v = ConvertElement<C>(x[i]) * c;
          nonfinite |= !std::isfinite(v);
          x[i] = ConvertElement<T>(v);
        }
        bad[b] = nonfinite;
      }
    });
    for (char b : bad) found_inf |= b != 0;
  });
  return found_inf;
}

}  // namespace

OCTET_REGISTER_KERNEL(sgd_kernel, DeviceType::kCPU, &SgdCpu);
OCTET_REGISTER_KERNEL(unscale_grad_kernel, DeviceType::kCPU, &UnscaleGradCpu);

}  // namespace octet::cpu
