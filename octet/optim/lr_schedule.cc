#include <octet/optim/lr_schedule.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include <octet/core/error.h>

namespace octet::optim {

const char* Name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kCosine: return "cosine";
    case LrScheduleKind::kLinear: return "linear";
    case LrScheduleKind::kConstant: return "constant";
  }
  return "?";
}

LrScheduleKind ParseLrScheduleKind(const std::string& text) {
  for (LrScheduleKind k : {LrScheduleKind::kCosine, LrScheduleKind::kLinear, LrScheduleKind::kConstant}) {
    if (text == Name(k)) return k;
  }
  OCTET_FAIL("unknown learning-rate schedule '", text, "' (expected cosine, linear or constant)");
}

LrSchedule::LrSchedule(const Options& options) : options_(options) {
  const Options& o = options_;
  OCTET_CHECK(std::isfinite(o.max_lr) && o.max_lr >= 0.0, "lr schedule: max_lr must be finite and >= 0, got ",
              o.max_lr);
  OCTET_CHECK(o.warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got ", o.warmup_steps);
  OCTET_CHECK(o.final_frac >= 0.0 && o.final_frac <= 1.0, "lr schedule: final_frac must be in [0, 1], got ",
              o.final_frac);
  OCTET_CHECK(o.kind == LrScheduleKind::kConstant || o.total_steps > o.warmup_steps, "lr schedule: ", Name(o.kind),
              " needs total_steps > warmup_steps, got total_steps ", o.total_steps, " and warmup_steps ",
              o.warmup_steps);
}

double LrSchedule::LrAt(int64_t step) const {
  const Options& o = options_;
  OCTET_CHECK(step >= 0, "lr schedule: step must be >= 0, got ", step);
  if (step < o.warmup_steps) {
    return o.max_lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  if (o.kind == LrScheduleKind::kConstant) return o.max_lr;
  const double r = std::clamp(static_cast<double>(step - o.warmup_steps) /
                                  static_cast<double>(o.total_steps - o.warmup_steps),
                              0.0, 1.0);
  const double min_lr = o.max_lr * o.final_frac;
  if (o.kind == LrScheduleKind::kLinear) return o.max_lr - r * (o.max_lr - min_lr);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * r));
  return min_lr + coeff * (o.max_lr - min_lr);
}

}  // namespace octet::optim
