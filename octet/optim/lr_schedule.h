// Learning-rate schedules as pure functions of the step (llm.c
// llmc/schedulers.h, computed in double):
//
//   warmup (step < warmup_steps):  max_lr * (step + 1) / warmup_steps
//   then r = (step - warmup_steps) / (total_steps - warmup_steps), clamped to [0, 1],
//        min_lr = max_lr * final_frac, and
//     kCosine:   min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr)
//     kLinear:   max_lr - r * (max_lr - min_lr)
//     kConstant: max_lr
//
// Steps count from 0 (the first optimizer step uses LrAt(0)). Past
// total_steps the decaying schedules stay at min_lr. Unlike llm.c, kConstant
// also honours the warmup (warmup_steps = 0 gives llm.c's constant schedule).
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstdint>
#include <string>

namespace octet::optim {

enum class LrScheduleKind : uint8_t { kCosine, kLinear, kConstant };
const char* Name(LrScheduleKind kind);
// "cosine", "linear" or "constant"; throws octet::Error naming the text for
// anything else.
LrScheduleKind ParseLrScheduleKind(const std::string& text);

class LrSchedule {
 public:
  struct Options {
    LrScheduleKind kind = LrScheduleKind::kCosine;
    double max_lr = 6e-4;
    int64_t warmup_steps = 0;
    int64_t total_steps = 1;
    double final_frac = 0.0;  // min_lr = max_lr * final_frac
  };
  // Throws octet::Error when max_lr is < 0 or not finite, warmup_steps < 0,
  // final_frac is outside [0, 1], or a decaying schedule has total_steps <=
  // warmup_steps.
  explicit LrSchedule(const Options& options);

  double LrAt(int64_t step) const;
  double min_lr() const { return options_.max_lr * options_.final_frac; }
  const Options& options() const { return options_; }

 private:
  Options options_;
};

}  // namespace octet::optim
