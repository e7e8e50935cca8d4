#include "optim/clip.h"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype_traits.h"
#include "ops/cpu/loops.h"

namespace octet::optim {
namespace {

constexpr int64_t kBlock = 16384;  // fixed blocks: a thread-count independent sum

void CheckGrad(const char* op, const std::string& name, const Tensor& g) {
  OCTET_CHECK(IsUnscaledFloat(g.dtype()), op, ": gradient of '", name, "' is ", Describe(g),
              "; expected float32, float64, bfloat16 or float16");
  OCTET_CHECK(g.device().is_cpu(), op, ": gradient of '", name, "' is on ", g.device(),
              "; only CPU gradients are supported so far");
}

// Sum of squares of one gradient, in f64.
double SumSquares(const Tensor& grad) {
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
  double total = 0.0;
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    CheckGrad("clip_grad_norm", name, g);
    total += SumSquares(g);
  }
  return std::sqrt(total);
}

void ScaleGrads(const NamedTensors& params, double s) {
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    CheckGrad("scale_grads", name, g);
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

double ClipGradNorm(const TensorList& params, double max_norm, bool error_if_nonfinite) {
  return ClipGradNorm(Unnamed(params), max_norm, error_if_nonfinite);
}

}  // namespace octet::optim
