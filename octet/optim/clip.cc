#include <octet/optim/clip.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include <octet/core/dtype_traits.h>
#include <octet/autograd/grad_mode.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>

namespace octet::optim {
namespace {

constexpr int64_t kBlock = 16384;  // fixed blocks: a thread-count independent sum

void CheckGrad(const char* op, const std::string& name, const Tensor& g) {
  OCTET_CHECK(IsUnscaledFloat(g.dtype()), op, ": gradient of '", name, "' is ", Describe(g),
              "; expected float32, float64, bfloat16 or float16");
}

// Sum of squares of one device gradient, as a float64 [] tensor on its
// device (NOTE [gradient norm on a device]).
Tensor DeviceSumSquares(const Tensor& grad) {
  const Tensor g64 = grad.To(DType::kFloat64);
  return Sum(Mul(g64, g64));
}

// Sum of squares of one gradient, in f64.
double SumSquares(const Tensor& grad) {
  if (!grad.device().is_cpu()) return DeviceSumSquares(grad).Item();
  const Tensor g = grad.Contiguous();
  const int64_t n = g.numel();
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(nblocks, 0.0);
  DispatchFloat(g.dtype(), "clip_grad_norm", [&]<typename T>() {
    const T* x = g.data<T>();
    cpu::ParallelFor(nblocks, 2, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        double s = 0.0;
        const int64_t end = std::min(n, (b + 1) * kBlock);
        for (int64_t i = b * kBlock; i < end; ++i) {
          const double v = ConvertElement<double>(x[i]);
          s += v * v;
        }
        partial[b] = s;
      }
    });
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

NamedTensors Unnamed(const TensorList& params) {
  NamedTensors named;
  named.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) named.emplace_back(absl::StrCat("#", i), params[i]);
  return named;
}

}  // namespace

double GradNorm(const NamedTensors& params) {
  NoGradGuard no_grad;
  double total = 0.0;
  // NOTE [gradient norm on a device]: the per-gradient sums stay on their
  // device and are added there; one host read per device.
  std::vector<std::pair<Device, Tensor>> device_totals;
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    CheckGrad("clip_grad_norm", name, g);
    if (g.device().is_cpu()) {
      total += SumSquares(g);
      continue;
    }
    const Tensor s = DeviceSumSquares(g);
    auto it = std::find_if(device_totals.begin(), device_totals.end(),
                           [&](const auto& d) { return d.first == g.device(); });
    if (it == device_totals.end()) {
      device_totals.emplace_back(g.device(), s);
    } else {
      it->second = Add(it->second, s);
    }
  }
  for (const auto& [device, s] : device_totals) total += s.Item();
  return std::sqrt(total);
}

void ScaleGrads(const NamedTensors& params, double s) {
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    CheckGrad("scale_grads", name, g);
    if (!g.device().is_cpu()) {
      // The device's pointwise kernel: the same f32 (f64) multiply and rounding.
      NoGradGuard no_grad;
      MulScalarInPlace(g, s);
      continue;
    }
    OCTET_CHECK(g.is_contiguous(), "scale_grads: gradient of '", name, "' is not contiguous");
    DispatchFloat(g.dtype(), "scale_grads", [&]<typename T>() {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const C c = static_cast<C>(s);
      T* x = g.data<T>();
      cpu::ParallelFor(g.numel(), cpu::kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) x[i] = ConvertElement<T>(ConvertElement<C>(x[i]) * c);
      });
    });
    g.storage()->BumpVersion();
  }
}

double ClipGradNorm(const NamedTensors& params, double max_norm, bool error_if_nonfinite) {
  OCTET_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const double total = GradNorm(params);
  if (!std::isfinite(total)) {
    if (error_if_nonfinite) {
      std::string bad;
      for (const auto& [name, p] : params) {
        if (!p.defined() || !p.grad().defined()) continue;
        if (!std::isfinite(SumSquares(p.grad()))) absl::StrAppend(&bad, bad.empty() ? "'" : ", '", name, "'");
      }
      if (bad.empty()) bad = "none individually (the sum overflowed)";
      OCTET_FAIL("clip_grad_norm: the total gradient norm is ", total, "; non-finite gradients in ", bad);
    }
    return total;  // NOTE [non-finite gradient norm]: reported, gradients untouched
  }
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) ScaleGrads(params, coef);
  return total;
}

Tensor GradNormTensor(const NamedTensors& params) {
  NoGradGuard no_grad;
  // NOTE [clipping without a host read]: CPU gradients are summed as in
  // GradNorm (host memory: no round trip); device ones on their device.
  std::optional<Device> device;
  double cpu_total = 0.0;
  Tensor total;
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    CheckGrad("clip_grad_norm", name, g);
    OCTET_CHECK(!device.has_value() || *device == g.device(), "clip_grad_norm: gradient of '", name, "' is on ",
                g.device(), " but an earlier one is on ", *device, "; the device-side norm needs one device");
    device = g.device();
    if (g.device().is_cpu()) {
      cpu_total += SumSquares(g);
    } else {
      const Tensor s = DeviceSumSquares(g);
      total = total.defined() ? Add(total, s) : s;
    }
  }
  if (!device.has_value() || device->is_cpu()) return Full({}, std::sqrt(cpu_total), {.dtype = DType::kFloat64});
  return Sqrt(total);
}

Tensor ClipGradNormTensor(const NamedTensors& params, double max_norm) {
  OCTET_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  NoGradGuard no_grad;
  const Tensor total = GradNormTensor(params);
  const TensorOptions f64{.dtype = DType::kFloat64, .device = total.device()};
  // coef = max_norm / (total + 1e-6) where total is finite and coef < 1, else 1.
  const Tensor coef = Div(Full({}, max_norm, f64), AddScalar(total, 1e-6));
  const Tensor finite = CompareScalar(CompareOp::kLt, Abs(total), std::numeric_limits<double>::infinity());
  const Tensor c64 = Where(finite, Minimum(coef, Full({}, 1.0, f64)), Full({}, 1.0, f64));
  const Tensor c32 = c64.To(DType::kFloat32);
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // As ScaleGrads: f64 gradients by the f64 coefficient, others in f32.
    const Tensor scaled = g.dtype() == DType::kFloat64   ? Mul(g, c64)
                          : g.dtype() == DType::kFloat32 ? Mul(g, c32)
                                                         : Mul(g.To(DType::kFloat32), c32).To(g.dtype());
    g.CopyFrom_(scaled);
  }
  return total;
}

double ClipGradNorm(const TensorList& params, double max_norm, bool error_if_nonfinite) {
  return ClipGradNorm(Unnamed(params), max_norm, error_if_nonfinite);
}

}  // namespace octet::optim
