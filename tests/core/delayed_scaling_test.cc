// The delayed-scaling slot update shared by the CPU path and the CUDA kernel
// (core/delayed_scaling.h): history roll, max vs most_recent, margin,
// power-of-two rounding, and zero / inf / NaN amax keeping the previous scale;
// the multi-slot entry point UpdateDelayedScaling (ops/delayed_scaling.h) on CPU.
// Expected values are closed forms computed here in double.
#include <octet/core/delayed_scaling.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <octet/ops/delayed_scaling.h>
#include "tests/test_util.h"

namespace octet {
namespace {

constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;

struct Slot {
  std::vector<float> history;
  float scale = 1.0f;
  float scale_inv = 1.0f;
  explicit Slot(int h) : history(h, 0.0f) {}
  void Update(float amax, float fp8_max, const DelayedScalingConfig& cfg) {
    UpdateDelayedScalingSlot(history.data(), static_cast<int>(history.size()), amax, fp8_max, cfg, &scale, &scale_inv);
  }
};

TEST(DelayedScaling, RollsHistoryNewestFirstAndDropsOldest) {
  Slot s(3);
  const DelayedScalingConfig cfg;
  s.Update(1.0f, kE4M3Max, cfg);
  s.Update(2.0f, kE4M3Max, cfg);
  EXPECT_EQ(s.history, (std::vector<float>{2.0f, 1.0f, 0.0f}));
  s.Update(3.0f, kE4M3Max, cfg);
  s.Update(0.5f, kE4M3Max, cfg);
  EXPECT_EQ(s.history, (std::vector<float>{0.5f, 3.0f, 2.0f}));  // 1.0 dropped
}

TEST(DelayedScaling, MaxAlgoUsesLargestAmaxInWindow) {
  Slot s(4);
  const DelayedScalingConfig cfg{.margin = 0, .algo = AmaxAlgo::kMax};
  for (float a : {2.0f, 8.0f, 1.0f}) s.Update(a, kE4M3Max, cfg);
  EXPECT_FLOAT_EQ(s.scale, 448.0f / 8.0f);
  EXPECT_FLOAT_EQ(s.scale_inv, 8.0f / 448.0f);
  // 8 (second entry) leaves a window of 4 after three more updates.
  for (float a : {1.0f, 1.0f}) s.Update(a, kE4M3Max, cfg);
  EXPECT_FLOAT_EQ(s.scale, 448.0f / 8.0f);
  s.Update(0.25f, kE4M3Max, cfg);
  EXPECT_EQ(s.history, (std::vector<float>{0.25f, 1.0f, 1.0f, 1.0f}));
  EXPECT_FLOAT_EQ(s.scale, 448.0f / 1.0f);
}

TEST(DelayedScaling, MostRecentAlgoIgnoresOlderEntries) {
  Slot s(4);
  const DelayedScalingConfig cfg{.algo = AmaxAlgo::kMostRecent};
  s.Update(100.0f, kE5M2Max, cfg);
  s.Update(4.0f, kE5M2Max, cfg);
  EXPECT_FLOAT_EQ(s.scale, 57344.0f / 4.0f);
  EXPECT_FLOAT_EQ(s.history[1], 100.0f);
}

TEST(DelayedScaling, MarginDividesByPowerOfTwo) {
  for (int margin : {0, 1, 3, -2}) {
    Slot s(2);
    s.Update(3.0f, kE4M3Max, {.margin = margin});
    const double expected = (448.0 / 3.0) / std::pow(2.0, margin);
    EXPECT_NEAR(s.scale, expected, expected * 1e-6) << "margin " << margin;
    EXPECT_NEAR(s.scale_inv, 1.0 / expected, 1e-6 / expected) << "margin " << margin;
  }
}

TEST(DelayedScaling, PowerOfTwoRoundsScaleDown) {
  Slot s(2);
  s.Update(3.0f, kE4M3Max, {.power_of_two = true});
  EXPECT_EQ(s.scale, 128.0f);  // 149.33 -> 128
  EXPECT_EQ(s.scale_inv, 1.0f / 128.0f);
}

TEST(DelayedScaling, ZeroInfAndNanAmaxKeepPreviousScale) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {0.0f, inf, nan}) {
    Slot s(1);  // window 1: the bad amax is the whole history
    s.scale = 7.0f;
    s.Update(bad, kE4M3Max, {});
    EXPECT_EQ(s.scale, 7.0f) << "amax " << bad;
    EXPECT_EQ(s.scale_inv, 1.0f / 7.0f);
  }
  // All-zero history (first steps of a run) keeps the initial scale 1.
  Slot fresh(16);
  fresh.Update(0.0f, kE5M2Max, {});
  EXPECT_EQ(fresh.scale, 1.0f);
}

TEST(DelayedScaling, NanInWindowFreezesScaleUntilItLeaves) {
  Slot s(2);
  s.Update(2.0f, kE4M3Max, {});
  EXPECT_FLOAT_EQ(s.scale, 224.0f);
  s.Update(std::numeric_limits<float>::quiet_NaN(), kE4M3Max, {});
  EXPECT_FLOAT_EQ(s.scale, 224.0f);
  s.Update(4.0f, kE4M3Max, {});  // NaN still in the window
  EXPECT_FLOAT_EQ(s.scale, 224.0f);
  s.Update(4.0f, kE4M3Max, {});
  EXPECT_FLOAT_EQ(s.scale, 112.0f);
}

TEST(DelayedScaling, OverflowingScaleKeepsPrevious) {
  Slot s(1);
  s.scale = 3.0f;
  s.Update(1e-40f, kE5M2Max, {});  // 57344 / 1e-40 overflows float
  EXPECT_EQ(s.scale, 3.0f);
}

// The Tensor-level entry point (ops/delayed_scaling.h) on CPU tensors: every
// slot updated by the same function, errors name the slot.
TEST(DelayedScaling, UpdateDelayedScalingUpdatesEverySlot) {
  std::vector<DelayedScalingSlot> slots;
  std::vector<Slot> expected;
  for (int i = 0; i < 5; ++i) {
    const int h = 1 + i;
    std::vector<float> hist(h, 0.0f);
    for (int j = 0; j < h; ++j) hist[j] = 0.5f * static_cast<float>(j + i);
    const float amax = i == 3 ? 0.0f : 1.0f + static_cast<float>(i);
    const float fmax = i % 2 ? kE5M2Max : kE4M3Max;
    slots.push_back({FromVector(hist, {h}), Full({1}, amax), Full({1}, 4.0), Empty({1}), fmax});
    Slot s(h);
    s.history = hist;
    s.scale = 4.0f;
    s.Update(amax, fmax, {.margin = 2});
    expected.push_back(s);
  }
  UpdateDelayedScaling(slots, {.margin = 2});
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(slots[i].history.ToFloats(), expected[i].history) << "slot " << i;
    EXPECT_EQ(slots[i].scale.ToFloats()[0], expected[i].scale) << "slot " << i;
    EXPECT_EQ(slots[i].scale_inv.ToFloats()[0], expected[i].scale_inv) << "slot " << i;
  }
  // Errors name the slot and the tensor.
  std::vector<DelayedScalingSlot> bad = {slots[0]};
  bad[0].scale = Full({2}, 1.0);
  std::string msg = ::octet::testing::ErrorOf([&] { UpdateDelayedScaling(bad, {}); });
  EXPECT_NE(msg.find("slot 0: scale must be a contiguous float32 [1]"), std::string::npos) << msg;
  bad[0] = slots[0];
  bad[0].history = Empty({0});
  msg = ::octet::testing::ErrorOf([&] { UpdateDelayedScaling(bad, {}); });
  EXPECT_NE(msg.find("history must be a contiguous float32 [H] (H >= 1)"), std::string::npos) << msg;
  bad[0] = slots[0];
  bad[0].amax = Full({1}, 1.0, {.dtype = DType::kFloat64});
  msg = ::octet::testing::ErrorOf([&] { UpdateDelayedScaling(bad, {}); });
  EXPECT_NE(msg.find("slot 0: amax"), std::string::npos) << msg;
}

}  // namespace
}  // namespace octet
