// DistributedDataParallel with real processes on loopback:
//  - 2 ranks × batch b give the same parameters after k SGD steps as one
//    process × batch 2b (to FP32 rounding), with several buckets that all
//    start during backward, parameters broadcast from rank 0, and gradient
//    accumulation that talks only on the last micro-batch;
//  - FP8 sync's error against the FP32 mean stays within the bound its scale
//    implies (NOTE [fp8 grad sync] in distributed/ddp.h), for E4M3 and E5M2,
//    with the bytes sent in the ratio 4 : 2 : 1 (+ the amax) for fp32/bf16/fp8;
//  - an unused parameter is an error naming it, or a zero gradient when
//    allowed; then a rank that ran no backward at all contributes zeros.
#include <octet/distributed/ddp.h>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <octet/distributed/init.h>
#include <octet/ops/matmul.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/optim/sgd.h>
#include "tests/distributed/multiprocess.h"

namespace octet::dist {
namespace {

using testing::IsWorker;

float Hash(int64_t i, int salt) {
  uint32_t h = static_cast<uint32_t>(i * 2654435761u + salt * 40503u + 12345u);
  h ^= h >> 16;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
}

Tensor Filled(const Shape& shape, int salt, float scale, bool grad = false) {
  std::vector<float> v(Numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = Hash(static_cast<int64_t>(i), salt) * scale;
  Tensor t = FromVector(v, shape);
  if (grad) t.requires_grad_();
  return t;
}

// A two-layer tanh MLP, 8 -> 16 -> 4, plus one parameter that takes no part.
struct Mlp {
  explicit Mlp(int salt)
      : w1(Filled({16, 8}, salt + 1, 0.35f, true)),
        b1(Filled({16}, salt + 2, 0.1f, true)),
        w2(Filled({4, 16}, salt + 3, 0.25f, true)),
        b2(Filled({4}, salt + 4, 0.1f, true)),
        unused(Filled({3}, salt + 5, 1.0f, true)) {}
  Tensor Loss(const Tensor& x, const Tensor& y) const {
    Tensor h = Tanh(Linear(x, w1, b1));
    return Mean(Square(Sub(Linear(h, w2, b2), y)));
  }
  std::vector<std::pair<std::string, Tensor>> Params(bool with_unused = false) const {
    std::vector<std::pair<std::string, Tensor>> p = {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};
    if (with_unused) p.push_back({"unused", unused});
    return p;
  }
  Tensor w1, b1, w2, b2, unused;
};

// Rows [start, start + rows) of step `step`'s global batch.
Tensor BatchX(int step, int64_t start, int64_t rows) { return Filled({64, 8}, 100 + step, 1.0f).Narrow(0, start, rows).Contiguous(); }
Tensor BatchY(int step, int64_t start, int64_t rows) { return Filled({64, 4}, 200 + step, 1.0f).Narrow(0, start, rows).Contiguous(); }

constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 16;

TEST(DdpWorker, DISABLED_MatchesOneProcessWithTheWholeBatch) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  const int world = pg.size(), rank = pg.rank();
  const bool accumulate = std::getenv("OCTET_TEST_ACCUM") != nullptr;

  // Reference: one process, the whole batch.
  Mlp ref(0);
  optim::SGD ref_opt(ref.Params(), {.lr = 0.1});
  for (int step = 0; step < kSteps; ++step) {
    ref_opt.ZeroGrad();
    ref.Loss(BatchX(step, 0, kGlobalBatch), BatchY(step, 0, kGlobalBatch)).Backward();
    ref_opt.Step();
  }

  // DDP: rank 0's initial weights reach every rank; each rank sees its rows.
  Mlp model(rank == 0 ? 0 : 77);
  DistributedDataParallel ddp(pg, model.Params(), {.bucket_bytes = 300});  // several buckets
  ASSERT_GE(ddp.buckets().size(), 3u);
  optim::SGD opt(model.Params(), {.lr = 0.1});
  const int64_t local = kGlobalBatch / world;
  for (int step = 0; step < kSteps; ++step) {
    opt.ZeroGrad();
    if (accumulate) {
      // Two micro-batches of local/2 rows, each loss halved: only the last syncs.
      const int64_t half = local / 2;
      ddp.set_sync(false);
      const int64_t before = pg.counters().bytes_sent;
      MulScalar(model.Loss(BatchX(step, rank * local, half), BatchY(step, rank * local, half)), 0.5).Backward();
      EXPECT_EQ(pg.counters().bytes_sent, before) << "a no-sync micro-batch talked";
      ddp.set_sync(true);
      MulScalar(model.Loss(BatchX(step, rank * local + half, half), BatchY(step, rank * local + half, half)), 0.5)
          .Backward();
    } else {
      model.Loss(BatchX(step, rank * local, local), BatchY(step, rank * local, local)).Backward();
    }
    ddp.FinishGradSync();
    EXPECT_EQ(ddp.last_stats().buckets, static_cast<int64_t>(ddp.buckets().size()));
    EXPECT_EQ(ddp.last_stats().launched_in_backward, static_cast<int64_t>(ddp.buckets().size()))
        << "every bucket should start before backward returns";
    opt.Step();
  }
  const auto got = model.Params(), want = ref.Params();
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<float> g = got[i].second.ToFloats(), w = want[i].second.ToFloats();
    for (size_t k = 0; k < g.size(); ++k) {
      ASSERT_NEAR(g[k], w[k], 2e-6 + 2e-5 * std::fabs(w[k])) << got[i].first << "[" << k << "] rank " << rank;
    }
  }
}

// Gradient of Sum(p * c) is c: each rank's gradient is known exactly.
void BackwardWithGradient(const Tensor& p, const Tensor& c) { Sum(Mul(p, c)).Backward(); }

TEST(DdpWorker, DISABLED_Fp8SyncWithinItsBound) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  const int world = pg.size(), rank = pg.rank();
  constexpr int64_t n = 1000;  // one bucket; not a multiple of 3
  // Gradients spanning 2^-20 .. 1 in magnitude, different on every rank.
  auto grad_of = [](int r) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = Hash(i, 900 + r) * std::ldexp(1.0f, -static_cast<int>(i % 21));
    return v;
  };
  std::vector<double> mean(n, 0.0), mean_abs(n, 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> g = grad_of(r);
    for (int64_t i = 0; i < n; ++i) {
      mean[i] += static_cast<double>(g[i]) / world;
      mean_abs[i] += std::fabs(static_cast<double>(g[i])) / world;
    }
  }
  int64_t bytes[4] = {0, 0, 0, 0};
  const GradSync modes[] = {GradSync::kFp32, GradSync::kBf16, GradSync::kFp8E4M3, GradSync::kFp8E5M2};
  for (int m = 0; m < 4; ++m) {
    Tensor p = Zeros({n});
    p.requires_grad_();
    DistributedDataParallel ddp(pg, {{"p", p}}, {.grad_sync = modes[m]});
    BackwardWithGradient(p, FromVector(grad_of(rank), {n}));
    ddp.FinishGradSync();
    bytes[m] = ddp.last_stats().bytes_sent;
    const std::vector<float> got = p.grad().ToFloats();
    // The bound: mantissa bits m_b, shared scale s = fp8_max / A, A = max over
    // ranks of max|g|; half the smallest subnormal h (2^-10 E4M3, 2^-17 E5M2):
    //   |got - mean| <= 2^-(m_b+1) (mean|g| + |mean|) (1 + 2^-(m_b+1)) + 2 h / s + 2^-20 mean|g|.
    int mbits = 23;
    double half_sub = 0.0, fp8_max = 1.0;
    if (modes[m] == GradSync::kBf16) mbits = 7;
    if (modes[m] == GradSync::kFp8E4M3) mbits = 3, half_sub = std::ldexp(1.0, -10), fp8_max = 448;
    if (modes[m] == GradSync::kFp8E5M2) mbits = 2, half_sub = std::ldexp(1.0, -17), fp8_max = 57344;
    double amax = 0;
    for (int r = 0; r < world; ++r) {
      for (float v : grad_of(r)) amax = std::max(amax, static_cast<double>(std::fabs(v)));
    }
    const double s = fp8_max / amax;
    const double rel = std::ldexp(1.0, -(mbits + 1));
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double bound = rel * (mean_abs[i] + std::fabs(mean[i])) * (1 + rel) + (half_sub > 0 ? 2 * half_sub / s : 0) +
                           std::ldexp(mean_abs[i], -20);
      ASSERT_LE(std::fabs(got[i] - mean[i]), bound) << Name(modes[m]) << " element " << i << " rank " << rank;
      worst = std::max(worst, std::fabs(got[i] - mean[i]) / bound);
    }
    // The bound is not loose everywhere: some element uses a good part of it.
    if (modes[m] != GradSync::kFp32) EXPECT_GT(worst, 0.25) << Name(modes[m]);
    if (modes[m] == GradSync::kFp8E4M3 || modes[m] == GradSync::kFp8E5M2) {
      EXPECT_EQ(ddp.last_stats().saturated, 0);  // the shared scale is set by the largest amax
      // E4M3's smallest step here is 2^-9 / s ~ 4e-6: the 2^-20-sized gradients flush.
      if (modes[m] == GradSync::kFp8E4M3) EXPECT_GT(ddp.last_stats().flushed, 0);
    }
  }
  // Bytes: AllReduce of ceil(n/N)-element slices, twice (N-1) of them; FP8 adds the amax.
  const int64_t chunk = (n + world - 1) / world;
  EXPECT_EQ(bytes[0], 2 * (world - 1) * chunk * 4);
  EXPECT_EQ(bytes[1], 2 * (world - 1) * chunk * 2);
  EXPECT_EQ(bytes[2], 2 * (world - 1) * chunk * 1 + 2 * (world - 1) * 4);
  EXPECT_EQ(bytes[3], bytes[2]);
}

// Error feedback: with the same gradient every step, the running sum of the
// synchronised FP8 gradients tracks k·mean better than without it, because
// each step's input quantisation error is added back the next step (only the
// output re-quantisation error is left, and it does not accumulate the same
// way on every rank). Measured as the worst |sum_k got - k·mean| over elements.
TEST(DdpWorker, DISABLED_ErrorFeedbackCancelsAccumulatedQuantisationError) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  const int world = pg.size();
  constexpr int64_t n = 300;
  constexpr int kSteps = 16;
  auto grad_of = [](int r) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = Hash(i, 700 + r) * std::ldexp(1.0f, -static_cast<int>(i % 7));
    return v;
  };
  std::vector<double> mean(n, 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> g = grad_of(r);
    for (int64_t i = 0; i < n; ++i) mean[i] += static_cast<double>(g[i]) / world;
  }
  double worst[2] = {0, 0};
  for (int feedback = 0; feedback < 2; ++feedback) {
    Tensor p = Zeros({n});
    p.requires_grad_();
    DistributedDataParallel ddp(pg, {{"p", p}}, {.grad_sync = GradSync::kFp8E5M2, .error_feedback = feedback == 1});
    std::vector<double> sum(n, 0.0);
    for (int k = 0; k < kSteps; ++k) {
      p.zero_grad();
      BackwardWithGradient(p, FromVector(grad_of(pg.rank()), {n}));
      ddp.FinishGradSync();
      const std::vector<float> got = p.grad().ToFloats();
      for (int64_t i = 0; i < n; ++i) sum[i] += got[i];
    }
    for (int64_t i = 0; i < n; ++i) worst[feedback] = std::max(worst[feedback], std::fabs(sum[i] - kSteps * mean[i]));
  }
  std::printf("worst accumulated error: %g without, %g with error feedback\n", worst[0], worst[1]);
  EXPECT_LT(worst[1], 0.5 * worst[0]);
}

TEST(DdpWorker, DISABLED_UnusedParameter) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  {
    Mlp model(0);
    DistributedDataParallel ddp(pg, model.Params(/*with_unused=*/true));
    model.Loss(BatchX(0, 0, 4), BatchY(0, 0, 4)).Backward();
    try {
      ddp.FinishGradSync();
      ADD_FAILURE() << "an unused parameter was not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parameter 'unused' got no gradient"), std::string::npos) << e.what();
    }
  }
  Mlp model(0);
  DistributedDataParallel ddp(pg, model.Params(true), {.allow_unused = true});
  model.Loss(BatchX(0, pg.rank() * 4, 4), BatchY(0, pg.rank() * 4, 4)).Backward();
  ddp.FinishGradSync();
  EXPECT_EQ(model.unused.grad().ToFloats(), std::vector<float>(3, 0.0f));
  // The used parameters were still averaged: every rank holds the same gradient.
  Tensor g = model.w1.grad().Clone();
  Tensor g0 = g.Clone();
  pg.Broadcast(g0, 0)->Wait();
  EXPECT_EQ(g.ToFloats(), g0.ToFloats());

  // A step in which rank 0 ran no backward at all (its share of the data ran
  // out): it contributes zeros, and every rank ends with the others' mean.
  Mlp lone(0);
  DistributedDataParallel lone_ddp(pg, lone.Params(true), {.allow_unused = true});
  if (pg.rank() != 0) lone.Loss(BatchX(1, 0, 4), BatchY(1, 0, 4)).Backward();
  lone_ddp.FinishGradSync();
  Mlp ref(0);
  ref.Loss(BatchX(1, 0, 4), BatchY(1, 0, 4)).Backward();  // what each other rank computed
  ASSERT_TRUE(lone.w1.grad().defined());
  const std::vector<float> got = lone.w1.grad().ToFloats(), one = ref.w1.grad().ToFloats();
  const float share = static_cast<float>(pg.size() - 1) / static_cast<float>(pg.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], share * one[i], 1e-6f + 1e-5f * std::fabs(one[i])) << i;
  EXPECT_EQ(lone.unused.grad().ToFloats(), std::vector<float>(3, 0.0f));
}

// ---- the tests ------------------------------------------------------------------

void RunWorker(int world, const std::string& worker, std::map<std::string, std::string> env = {}) {
  const std::string dir = testing::FreshDir("ddp" + std::to_string(world));
  env["OCTET_MASTER"] = dir + "/store";
  env["OCTET_TIMEOUT_MS"] = "20000";
  testing::ExpectAllPassed(testing::RunRanks(world, worker, env, dir));
  std::filesystem::remove_all(dir);
}

TEST(Ddp, TwoRanksMatchOneProcessWithTwiceTheBatch) {
  if (IsWorker()) GTEST_SKIP();
  RunWorker(2, "DdpWorker.DISABLED_MatchesOneProcessWithTheWholeBatch");
}

TEST(Ddp, FourRanksWithGradientAccumulationMatchOneProcess) {
  if (IsWorker()) GTEST_SKIP();
  RunWorker(4, "DdpWorker.DISABLED_MatchesOneProcessWithTheWholeBatch", {{"OCTET_TEST_ACCUM", "1"}});
}

TEST(Ddp, Fp8SyncErrorWithinTheBoundOfItsScale) {
  if (IsWorker()) GTEST_SKIP();
  RunWorker(3, "DdpWorker.DISABLED_Fp8SyncWithinItsBound");
}

TEST(Ddp, ErrorFeedbackShrinksTheAccumulatedError) {
  if (IsWorker()) GTEST_SKIP();
  RunWorker(2, "DdpWorker.DISABLED_ErrorFeedbackCancelsAccumulatedQuantisationError");
}

TEST(Ddp, UnusedParameterIsNamedUnlessAllowedAndAnIdleRankAddsZeros) {
  if (IsWorker()) GTEST_SKIP();
  RunWorker(2, "DdpWorker.DISABLED_UnusedParameter");
}

TEST(Ddp, ParseGradSync) {
  GradSync s;
  ASSERT_TRUE(ParseGradSync("fp8", &s));
  EXPECT_EQ(s, GradSync::kFp8E4M3);
  ASSERT_TRUE(ParseGradSync("fp8_e5m2", &s));
  EXPECT_EQ(s, GradSync::kFp8E5M2);
  ASSERT_TRUE(ParseGradSync("bf16", &s));
  EXPECT_EQ(s, GradSync::kBf16);
  EXPECT_FALSE(ParseGradSync("fp16", &s));
}

}  // namespace
}  // namespace octet::dist
