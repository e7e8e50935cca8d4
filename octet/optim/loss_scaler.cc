#include <octet/optim/loss_scaler.h>

#include <algorithm>
#include <cmath>

#include <octet/autograd/grad_mode.h>
#include <octet/ops/optim_kernels.h>
#include <octet/ops/pointwise.h>

namespace octet::optim {

DynamicLossScaler::DynamicLossScaler() : DynamicLossScaler(Options{}) {}

DynamicLossScaler::DynamicLossScaler(const Options& options) : options_(options), scale_(options.init_scale) {
  const Options& o = options_;
  OCTET_CHECK(o.growth_factor > 1.0 && std::isfinite(o.growth_factor),
              "loss scaler: growth_factor must be finite and > 1, got ", o.growth_factor);
  OCTET_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "loss scaler: backoff_factor must be in (0, 1), got ",
              o.backoff_factor);
  OCTET_CHECK(o.growth_interval > 0, "loss scaler: growth_interval must be > 0, got ", o.growth_interval);
  OCTET_CHECK(o.min_scale > 0.0 && o.min_scale <= o.init_scale && o.init_scale <= o.max_scale &&
                  std::isfinite(o.max_scale),
              "loss scaler: need 0 < min_scale <= init_scale <= max_scale < inf, got ", o.min_scale, ", ",
              o.init_scale, ", ", o.max_scale);
}

Tensor DynamicLossScaler::ScaleLoss(const Tensor& loss) const { return MulScalar(loss, scale_); }

bool DynamicLossScaler::Unscale(const NamedTensors& params) {
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  bool found_inf = false;
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    OCTET_CHECK(IsUnscaledFloat(g.dtype()), "loss scaler: gradient of '", name, "' is ", Describe(g),
                "; expected a float32/float64/bfloat16/float16 tensor");
    found_inf |= unscale_grad_kernel(g.device())(g, inv);
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

void DynamicLossScaler::LoadStateDict(const std::map<std::string, std::string>& scalars) {
  auto get = [&](const char* key) -> const std::string* {
    auto it = scalars.find(key);
    return it == scalars.end() ? nullptr : &it->second;
  };
  double scale = 0;
  int64_t tracker = 0, skipped = 0;
  const std::string* s = get("loss_scaler.scale");
  if (s == nullptr || !ParseDouble(*s, &scale) || !(scale > 0.0) || !std::isfinite(scale)) {
    OCTET_FAIL("loss scaler LoadStateDict: 'loss_scaler.scale' is missing or not a positive number");
  }
  s = get("loss_scaler.growth_tracker");
  if (s == nullptr || !ParseInt64(*s, &tracker) || tracker < 0) {
    OCTET_FAIL(
        "loss scaler LoadStateDict: 'loss_scaler.growth_tracker' is missing or not a non-negative integer");
  }
  s = get("loss_scaler.skipped_steps");
  if (s == nullptr || !ParseInt64(*s, &skipped) || skipped < 0) {
    OCTET_FAIL(
        "loss scaler LoadStateDict: 'loss_scaler.skipped_steps' is missing or not a non-negative integer");
  }
  scale_ = scale;
  growth_tracker_ = tracker;
  skipped_steps_ = skipped;
}

}  // namespace octet::optim
