// Learning-rate schedules against their closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <octet/optim/lr_schedule.h>
#include "tests/test_util.h"

namespace octet::optim {
namespace {

using ::octet::testing::ErrorOf;

TEST(LrSchedule, CosineWarmupThenDecayToFinalFrac) {
  LrSchedule s({.kind = LrScheduleKind::kCosine, .max_lr = 6e-4, .warmup_steps = 10, .total_steps = 110,
                .final_frac = 0.1});
  EXPECT_DOUBLE_EQ(s.LrAt(0), 6e-4 * 1 / 10);
  EXPECT_DOUBLE_EQ(s.LrAt(4), 6e-4 * 5 / 10);
  EXPECT_DOUBLE_EQ(s.LrAt(9), 6e-4);
  EXPECT_DOUBLE_EQ(s.LrAt(10), 6e-4);  // r = 0
  const double min_lr = 6e-5;
  EXPECT_DOUBLE_EQ(s.LrAt(60), min_lr + 0.5 * (6e-4 - min_lr));  // r = 0.5, cos = 0
  EXPECT_DOUBLE_EQ(s.LrAt(35), min_lr + 0.5 * (1 + std::cos(std::numbers::pi * 0.25)) * (6e-4 - min_lr));
  EXPECT_DOUBLE_EQ(s.LrAt(110), min_lr);  // r = 1
  EXPECT_DOUBLE_EQ(s.LrAt(1000), min_lr);  // clamped past the end
  EXPECT_DOUBLE_EQ(s.min_lr(), min_lr);
}

TEST(LrSchedule, Gpt2RecipeEndsAtZero) {
  LrSchedule s({.max_lr = 6e-4, .warmup_steps = 700, .total_steps = 18865, .final_frac = 0.0});
  EXPECT_DOUBLE_EQ(s.LrAt(699), 6e-4);
  EXPECT_NEAR(s.LrAt(18865), 0.0, 1e-20);
  for (int64_t t = 700; t < 18865; t += 997) EXPECT_GE(s.LrAt(t), s.LrAt(t + 1));  // monotone decay
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin({.kind = LrScheduleKind::kLinear, .max_lr = 1.0, .warmup_steps = 0, .total_steps = 100,
                  .final_frac = 0.2});
  EXPECT_DOUBLE_EQ(lin.LrAt(0), 1.0);
  EXPECT_DOUBLE_EQ(lin.LrAt(25), 1.0 - 0.25 * 0.8);
  EXPECT_DOUBLE_EQ(lin.LrAt(100), 0.2);
  LrSchedule c({.kind = LrScheduleKind::kConstant, .max_lr = 0.5, .warmup_steps = 4});
  EXPECT_DOUBLE_EQ(c.LrAt(0), 0.125);
  EXPECT_DOUBLE_EQ(c.LrAt(3), 0.5);
  EXPECT_DOUBLE_EQ(c.LrAt(1000000), 0.5);
}

TEST(LrSchedule, ParseAndErrors) {
  EXPECT_EQ(ParseLrScheduleKind("linear"), LrScheduleKind::kLinear);
  EXPECT_NE(ErrorOf([] { ParseLrScheduleKind("wsd"); }).find("unknown learning-rate schedule 'wsd'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { LrSchedule s({.warmup_steps = 10, .total_steps = 10}); })
                .find("cosine needs total_steps > warmup_steps"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { LrSchedule s({.final_frac = 2.0}); }).find("final_frac must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { LrSchedule s({.max_lr = INFINITY}); }).find("max_lr must be finite and >= 0, got inf"),
            std::string::npos);
  LrSchedule s({});
  EXPECT_NE(ErrorOf([&] { s.LrAt(-1); }).find("step must be >= 0"), std::string::npos);
}

}  // namespace
}  // namespace octet::optim
