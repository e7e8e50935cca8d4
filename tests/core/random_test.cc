// Random tensors and dropout: determinism from (seed, offset), independence of
// the thread count, moments close to the distribution's, dropout's mask and
// scaling, and its gradient.
#include <gtest/gtest.h>

#include <cmath>

#include <octet/autograd/gradcheck.h>
#include <octet/core/philox.h>
#include <octet/core/random.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/random.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;

TEST(Philox, MatchesPublishedKnownAnswer) {
  // Random123 known-answer test for philox4x32_10 with counter 0 and key 0.
  const Philox4 r = Philox(0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

TEST(Random, SameSeedSameValuesAnyThreadCount) {
  Generator g1(123), g2(123);
  Tensor a = Randn({1000}, 0, 1, {}, &g1);
  const Tensor b = [&] {
    const cpu::ScopedOmpThreads one_thread(1);
    return Randn({1000}, 0, 1, {}, &g2);
  }();
  EXPECT_TRUE(AllClose(a, b, 0, 0));
  EXPECT_EQ(g1.offset(), g2.offset());
  Tensor c = Randn({1000}, 0, 1, {}, &g1);  // the generator moved on
  EXPECT_FALSE(AllClose(a, c, 0, 0));
}

TEST(Random, StateRestoresTheStream) {
  Generator g(7);
  Rand({10}, 0, 1, {}, &g);
  const uint64_t offset = g.offset();
  Tensor a = Rand({10}, 0, 1, {}, &g);
  Generator h;
  h.SetState(7, offset);
  EXPECT_TRUE(AllClose(Rand({10}, 0, 1, {}, &h), a, 0, 0));
}

TEST(Random, MomentsMatchDistributions) {
  Generator g(99);
  const int64_t n = 200000;
  std::vector<double> u = Rand({n}, -1, 3, {.dtype = DType::kFloat64}, &g).ToDoubles();
  double mean = 0, var = 0, lo = 1e9, hi = -1e9;
  for (double v : u) {
    mean += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  mean /= n;
  for (double v : u) var += (v - mean) * (v - mean);
  var /= n;
  EXPECT_NEAR(mean, 1.0, 0.02);          // (a+b)/2; stddev of the mean ~0.0026
  EXPECT_NEAR(var, 16.0 / 12.0, 0.02);   // (b-a)^2/12
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 3.0);
  std::vector<double> z = Randn({n}, 2.0, 0.5, {.dtype = DType::kFloat64}, &g).ToDoubles();
  mean = var = 0;
  for (double v : z) mean += v;
  mean /= n;
  for (double v : z) var += (v - mean) * (v - mean);
  var /= n;
  EXPECT_NEAR(mean, 2.0, 0.01);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.01);
  std::vector<double> k = RandInt({n}, 3, 7, {.dtype = DType::kInt64}, &g).ToDoubles();
  std::vector<int> hist(4, 0);
  for (double v : k) {
    ASSERT_GE(v, 3);
    ASSERT_LT(v, 7);
    hist[static_cast<int>(v) - 3]++;
  }
  for (int h : hist) EXPECT_NEAR(h, n / 4, n / 100);
}

TEST(Dropout, ZeroesAboutPAndScalesSurvivors) {
  Generator g(5);
  Tensor x = Ones({100000});
  Tensor y = Dropout(x, 0.25, true, &g);
  const std::vector<double> v = y.ToDoubles();
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0)
      ++zeros;
    else
      ASSERT_NEAR(e, 1.0 / 0.75, 1e-6);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / v.size(), 0.25, 0.01);
  EXPECT_TRUE(Dropout(x, 0.25, /*training=*/false).is_same(x));
}

TEST(Dropout, BackwardReusesTheMask) {
  Generator g(6);
  Tensor x = Full({1000}, 2.0, {.dtype = DType::kFloat64, .requires_grad = true});
  Tensor y = Dropout(x, 0.5, true, &g);
  Sum(y).Backward();
  const std::vector<double> yv = y.ToDoubles(), gv = x.grad().ToDoubles();
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_EQ(gv[i], yv[i] == 0 ? 0.0 : 2.0);
}

// In each float dtype the same generator drops the same elements, and the
// survivors are x / (1 - p) rounded once to the dtype.
TEST(Dropout, EveryFloatDtypeDropsTheSameElements) {
  const Tensor x = Full({4096}, 1.5);
  Generator g32(9);
  const std::vector<double> ref = Dropout(x, 0.3, true, &g32).ToDoubles();
  for (DType dt : {DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    Generator g(9);
    const Tensor y = Dropout(x.To(dt), 0.3, true, &g);
    EXPECT_EQ(y.dtype(), dt);
    const double kept = Full({1}, 1.5 / 0.7, {.dtype = dt}).Item();
    const std::vector<double> v = y.ToDoubles();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], ref[i] == 0 ? 0.0 : kept) << Name(dt) << " " << i;
  }
}

TEST(Dropout, RejectsBadProbability) {
  EXPECT_NE(ErrorOf([] { Dropout(Ones({2}), 1.0); }).find("dropout: probability must be in [0, 1), got 1"),
            std::string::npos);
}

}  // namespace
}  // namespace octet
