#include <octet/optim/loss_scaler.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include <octet/autograd/grad_mode.h>
#include <octet/core/dtype_traits.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cast.h>
#include <octet/ops/pointwise.h>

namespace octet::optim {

DynamicLossScaler::DynamicLossScaler() : DynamicLossScaler(Options{}) {}

DynamicLossScaler::DynamicLossScaler(const Options& options) : options_(options), scale_(options.init_scale) {
  const Options& o = options_;
  OCTET_CHECK(o.growth_factor > 1.0, "loss scaler: growth_factor must be > 1, got ", o.growth_factor);
  OCTET_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "loss scaler: backoff_factor must be in (0, 1), got ",
              o.backoff_factor);
  OCTET_CHECK(o.growth_interval > 0, "loss scaler: growth_interval must be > 0, got ", o.growth_interval);
  OCTET_CHECK(o.min_scale > 0.0 && o.min_scale <= o.init_scale && o.init_scale <= o.max_scale,
              "loss scaler: need 0 < min_scale <= init_scale <= max_scale, got ", o.min_scale, ", ", o.init_scale,
              ", ", o.max_scale);
}

Tensor DynamicLossScaler::ScaleLoss(const Tensor& loss) const { return MulScalar(loss, scale_); }

bool DynamicLossScaler::Unscale(const NamedTensors& params) {
  const double inv = 1.0 / scale_;
  bool found_inf = false;
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    OCTET_CHECK(IsUnscaledFloat(g.dtype()) && (g.is_contiguous() || !g.device().is_cpu()),
                "loss scaler: gradient of '", name, "' is ", Describe(g),
                "; expected a contiguous float32/float64/bfloat16/float16 tensor");
    if (!g.device().is_cpu()) {
      // The device's pointwise multiply (the same single rounding), then
      // max |g|, which is NaN or inf exactly when some element is.
      NoGradGuard no_grad;
      MulScalarInPlace(g, inv);
      found_inf |= !std::isfinite(Amax(g).Item());
      continue;
    }
    DispatchFloat(g.dtype(), "loss scaler unscale", [&]<typename T>() {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const C c = static_cast<C>(inv);
      T* x = g.data<T>();
      const int64_t n = g.numel();
      // One flag per fixed block (no shared writes from threads).
      constexpr int64_t kBlock = 16384;
      const int64_t nblocks = (n + kBlock - 1) / kBlock;
      std::vector<char> bad(nblocks, 0);
      cpu::ParallelFor(nblocks, 2, [&](int64_t b0, int64_t b1) {
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
    g.storage()->BumpVersion();
  }
  return found_inf;
}

void DynamicLossScaler::Update(bool found_inf) {
  if (found_inf) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
    ++skipped_steps_;
    return;
  }
  if (++growth_tracker_ >= options_.growth_interval) {
    scale_ = std::min(options_.max_scale, scale_ * options_.growth_factor);
    growth_tracker_ = 0;
  }
}

std::map<std::string, std::string> DynamicLossScaler::StateDict() const {
  return {{"loss_scaler.scale", DoubleToString(scale_)},
          {"loss_scaler.growth_tracker", std::to_string(growth_tracker_)},
          {"loss_scaler.skipped_steps", std::to_string(skipped_steps_)}};
}

absl::Status DynamicLossScaler::LoadStateDict(const std::map<std::string, std::string>& scalars) {
  auto get = [&](const char* key) -> const std::string* {
    auto it = scalars.find(key);
    return it == scalars.end() ? nullptr : &it->second;
  };
  double scale = 0;
  int64_t tracker = 0, skipped = 0;
  const std::string* s = get("loss_scaler.scale");
  if (s == nullptr || !ParseDouble(*s, &scale) || !(scale > 0.0) || !std::isfinite(scale)) {
    return absl::InvalidArgumentError("loss scaler LoadStateDict: 'loss_scaler.scale' is missing or not a positive number");
  }
  s = get("loss_scaler.growth_tracker");
  if (s == nullptr || !ParseInt64(*s, &tracker) || tracker < 0) {
    return absl::InvalidArgumentError(
        "loss scaler LoadStateDict: 'loss_scaler.growth_tracker' is missing or not a non-negative integer");
  }
  s = get("loss_scaler.skipped_steps");
  if (s == nullptr || !ParseInt64(*s, &skipped) || skipped < 0) {
    return absl::InvalidArgumentError(
        "loss scaler LoadStateDict: 'loss_scaler.skipped_steps' is missing or not a non-negative integer");
  }
  scale_ = scale;
  growth_tracker_ = tracker;
  skipped_steps_ = skipped;
  return absl::OkStatus();
}

}  // namespace octet::optim
