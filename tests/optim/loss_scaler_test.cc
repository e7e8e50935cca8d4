// Dynamic loss scaler: unscaling, inf/NaN detection, the skip / grow /
// back-off sequence, state dict.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <octet/optim/loss_scaler.h>
#include "tests/test_util.h"

namespace octet::optim {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;

Tensor WithGrad(const std::vector<double>& g, DType dtype = DType::kFloat32) {
  Tensor p = Zeros({static_cast<int64_t>(g.size())}, {.dtype = dtype, .requires_grad = true});
  p.set_grad(FromVector(g, p.shape(), {.dtype = dtype}));
  return p;
}

TEST(LossScaler, UnscaleDividesByTheScaleAndDetectsInf) {
  DynamicLossScaler s({.init_scale = 1024.0});
  Tensor a = WithGrad({1024.0, -512.0}), b = WithGrad({2048.0}, DType::kFloat16);
  EXPECT_FALSE(s.Unscale({{"a", a}, {"b", b}}));
  EXPECT_TRUE(AllClose(a.grad(), {1.0, -0.5}, 0, 0));
  EXPECT_TRUE(AllClose(b.grad(), {2.0}, 0, 0));
  Tensor c = WithGrad({1.0, std::numeric_limits<double>::infinity()}, DType::kFloat16);
  EXPECT_TRUE(s.Unscale({{"c", c}}));
  Tensor d = WithGrad({std::nan("")});
  EXPECT_TRUE(s.Unscale({{"d", d}}));
}

// The CPU kernel unscales in place through the data pointer: a strided
// gradient is refused with an error that names it.
TEST(LossScaler, RejectsANonContiguousCpuGradient) {
  DynamicLossScaler s({.init_scale = 4.0});
  Tensor p = Zeros({2, 2}, {.requires_grad = true});
  p.set_grad(FromVector(std::vector<double>{4, 8, 12, 16}, {2, 2}).T());
  ASSERT_FALSE(p.grad().is_contiguous());
  EXPECT_NE(ErrorOf([&] { s.Unscale({{"p", p}}); }).find("needs a contiguous gradient, got float32[2, 2]"),
            std::string::npos)
      << ErrorOf([&] { s.Unscale({{"p", p}}); });
  // Refused before any element changed.
  EXPECT_TRUE(AllClose(p.grad(), {4, 12, 8, 16}, 0, 0));
}

TEST(LossScaler, ScaleLossMultiplies) {
  DynamicLossScaler s({.init_scale = 8.0});
  EXPECT_DOUBLE_EQ(s.ScaleLoss(Scalar(1.5)).Item(), 12.0);
}

TEST(LossScaler, SkipGrowBackoffSequence) {
  DynamicLossScaler s({.init_scale = 256.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3});
  // (found_inf, expected scale after Update, expected skipped count)
  const struct {
    bool inf;
    double scale;
    int64_t skipped;
  } seq[] = {{false, 256, 0}, {false, 256, 0}, {false, 512, 0},  // 3 good steps: grow
             {true, 256, 1},                                       // overflow: back off, skip
             {false, 256, 1}, {false, 256, 1}, {true, 128, 2},     // tracker reset by the overflow
             {false, 128, 2}, {false, 128, 2}, {false, 256, 2}};
  for (const auto& e : seq) {
    s.Update(e.inf);
    EXPECT_EQ(s.scale(), e.scale);
    EXPECT_EQ(s.skipped_steps(), e.skipped);
  }
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScaler, ScaleStaysWithinBounds) {
  DynamicLossScaler s({.init_scale = 2.0, .growth_interval = 1, .min_scale = 1.0, .max_scale = 4.0});
  for (int i = 0; i < 5; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 1.0);
  for (int i = 0; i < 5; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 4.0);
}

TEST(LossScaler, StateDictRoundTripAndErrors) {
  DynamicLossScaler s({.init_scale = 64.0, .growth_interval = 10});
  s.Update(true);
  s.Update(false);
  DynamicLossScaler t;
  ASSERT_NO_THROW(t.LoadStateDict(s.StateDict()));
  EXPECT_EQ(t.scale(), 32.0);
  EXPECT_EQ(t.growth_tracker(), 1);
  EXPECT_EQ(t.skipped_steps(), 1);
  auto bad = s.StateDict();
  bad["loss_scaler.scale"] = "-1";
  const std::string st = ErrorOf([&] { t.LoadStateDict(bad); });
  EXPECT_NE(st.find("'loss_scaler.scale' is missing or not a positive number"), std::string::npos) << st;
  EXPECT_EQ(t.scale(), 32.0);  // unchanged
  EXPECT_NE(ErrorOf([] { DynamicLossScaler x({.backoff_factor = 1.5}); }).find("backoff_factor must be in (0, 1)"),
            std::string::npos);
}

// Each bad option is named with its value; an infinite growth factor or
// max_scale would let the scale reach inf, where every step overflows and
// backing off never brings it back.
TEST(LossScaler, RejectsBadOptions) {
  using O = DynamicLossScaler::Options;
  const auto err = [](const O& o) { return ErrorOf([&] { DynamicLossScaler s(o); }); };
  EXPECT_NE(err(O{.growth_factor = 1.0}).find("growth_factor must be finite and > 1, got 1"), std::string::npos);
  EXPECT_NE(err(O{.growth_factor = INFINITY}).find("growth_factor must be finite and > 1, got inf"),
            std::string::npos);
  EXPECT_NE(err(O{.backoff_factor = 1.0}).find("backoff_factor must be in (0, 1), got 1"), std::string::npos);
  EXPECT_NE(err(O{.growth_interval = 0}).find("growth_interval must be > 0, got 0"), std::string::npos);
  EXPECT_NE(err(O{.init_scale = 0.5}).find("need 0 < min_scale <= init_scale <= max_scale < inf, got 1, 0.5,"),
            std::string::npos);
  EXPECT_NE(err(O{.max_scale = INFINITY}).find("max_scale < inf, got 1, 65536, inf"), std::string::npos);
  EXPECT_EQ(err(O{}), "");
}

}  // namespace
}  // namespace octet::optim
