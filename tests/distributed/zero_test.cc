// ZeroAdamW (ZeRO-1) with real processes: 2 ranks × batch b with sharded
// AdamW state give the parameters of one process × batch 2b with plain AdamW
// (to FP32 rounding), each rank holding about half the state; the gathered
// state dict is what plain AdamW holds (a checkpoint from 2 ranks loads at 1),
// and a plain AdamW state loads into 2 sharded ranks and continues alike.
// BF16 weight gathering stays within bf16 rounding of the FP32 run, and BF16
// or FP8 gradient sync within the rounding of its format, element by element.
#include <octet/distributed/zero.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <octet/distributed/init.h>
#include <octet/ops/matmul.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/optim/adamw.h>
#include <octet/optim/clip.h>
#include "tests/distributed/multiprocess.h"

namespace octet::dist {
namespace {

float Hash(int64_t i, int salt) {
  uint32_t h = static_cast<uint32_t>(i * 2654435761u + salt * 40503u + 777u);
  h ^= h >> 16;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

Tensor Filled(const Shape& shape, int salt, float scale, bool grad = false) {
  std::vector<float> v(Numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = Hash(static_cast<int64_t>(i), salt) * scale;
  Tensor t = FromVector(v, shape);
  if (grad) t.requires_grad_();
  return t;
}

struct Mlp {
  Mlp()
      : w1(Filled({16, 8}, 1, 0.35f, true)),
        b1(Filled({16}, 2, 0.1f, true)),
        w2(Filled({4, 16}, 3, 0.25f, true)),
        b2(Filled({5}, 4, 0.1f, true)) {}  // 4 outputs + one (odd total: padded shards)
  Tensor Loss(const Tensor& x, const Tensor& y) const {
    Tensor h = Tanh(Linear(x, w1, b1));
    return Mean(Square(Sub(Linear(h, w2, b2.Narrow(0, 0, 4)), y)));
  }
  std::vector<std::pair<std::string, Tensor>> Params() const {
    return {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};
  }
  Tensor w1, b1, w2, b2;
};

Tensor BatchX(int step, int64_t start, int64_t rows) {
  return Filled({32, 8}, 100 + step, 1.0f).Narrow(0, start, rows).Contiguous();
}
Tensor BatchY(int step, int64_t start, int64_t rows) {
  return Filled({32, 4}, 200 + step, 1.0f).Narrow(0, start, rows).Contiguous();
}

const optim::AdamW::Options kAdamW{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
constexpr int64_t kBatch = 8;

void ExpectClose(const std::vector<std::pair<std::string, Tensor>>& got,
                 const std::vector<std::pair<std::string, Tensor>>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;
    const std::vector<float> g = got[i].second.ToFloats(), w = want[i].second.ToFloats();
    ASSERT_EQ(g.size(), w.size()) << what << " " << got[i].first;
    for (size_t k = 0; k < g.size(); ++k) {
      ASSERT_NEAR(g[k], w[k], tol * (1 + std::fabs(w[k]))) << what << " " << got[i].first << "[" << k << "]";
    }
  }
}

TEST(ZeroWorker, DISABLED_MatchesPlainAdamW) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  const int world = pg.size(), rank = pg.rank();
  const int64_t local = kBatch / world;
  const bool bf16 = std::getenv("OCTET_TEST_BF16") != nullptr;

  Mlp ref;
  optim::AdamW ref_opt(ref.Params(), kAdamW);
  auto ref_step = [&](int step) {
    ref_opt.ZeroGrad();
    ref.Loss(BatchX(step, 0, kBatch), BatchY(step, 0, kBatch)).Backward();
    optim::ClipGradNorm(ref_opt.params(), 0.5);
    ref_opt.Step();
  };
  Mlp model;
  ZeroAdamW opt(pg, model.Params(), kAdamW, {.gather_dtype = bf16 ? DType::kBFloat16 : DType::kFloat32});
  const int64_t total = 16 * 8 + 16 + 4 * 16 + 5;
  EXPECT_EQ(opt.total_elements(), total);
  EXPECT_LE(opt.shard_elements(), (total + world - 1) / world);
  auto zero_step = [&](int step) {
    for (auto& [n, p] : model.Params()) p.zero_grad();
    model.Loss(BatchX(step, rank * local, local), BatchY(step, rank * local, local)).Backward();
    opt.ReduceGradients();
    const double norm = opt.ClipGradNorm(0.5);
    EXPECT_GT(norm, 0.0);
    opt.Step();
  };
  for (int step = 0; step < 3; ++step) {
    ref_step(step);
    zero_step(step);
  }
  if (bf16) {
    // Every weight is a bf16 number (the gathered copy). Each AdamW step moves
    // a weight by at most about lr, so two runs 3 steps apart from the same
    // start differ by at most 2·3·lr (+ the last rounding): a gradient near 0
    // can change sign under bf16-rounded weights and send them opposite ways.
    for (const auto& [name, p] : model.Params()) {
      for (float v : p.ToFloats()) ASSERT_EQ(v, static_cast<float>(Tensor(Full({1}, v)).To(DType::kBFloat16).Item())) << name;
    }
    ExpectClose(model.Params(), ref.Params(), 6.5 * kAdamW.lr, "bf16-gathered parameters after 3 steps");
    return;
  }
  ExpectClose(model.Params(), ref.Params(), 2e-5, "parameters after 3 steps");

  // 2 ranks -> 1: the gathered state is plain AdamW's.
  optim::OptimizerState full = opt.FullStateDict();
  optim::OptimizerState plain = ref_opt.StateDict();
  EXPECT_EQ(full.scalars, plain.scalars);
  ExpectClose(full.tensors, plain.tensors, 2e-5, "gathered AdamW state");
  Mlp single;
  optim::AdamW single_opt(single.Params(), kAdamW);
  ASSERT_NO_THROW(single_opt.LoadStateDict(full));

  // 1 -> 2: plain AdamW's state loads into the shards; both continue alike.
  for (size_t i = 0; i < model.Params().size(); ++i) {
    model.Params()[i].second.detach().CopyFrom_(ref.Params()[i].second);
  }
  ASSERT_NO_THROW(opt.LoadFullStateDict(ref_opt.StateDict()));
  for (int step = 3; step < 5; ++step) {
    ref_step(step);
    zero_step(step);
  }
  ExpectClose(model.Params(), ref.Params(), 2e-5, "parameters after resuming from plain AdamW state");
}

// ReduceGradients with a narrow wire dtype: every element of the reduced
// mean gradient against the exact mean, within what the format's rounding
// allows. Each rank quantizes with its own scale and the owner narrows the
// sum with one of its own (process_group.h). The reduced gradient is read
// through the public API: AdamW's first step with beta1 = beta2 = 0 and
// lr = eps = 1e6 moves a weight from 0 by -g / (1 + |g| / 1e6), so the FP32
// masters hold -g to a relative 2e-6.
TEST(ZeroWorker, DISABLED_NarrowGradSyncWithinItsBound) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  const int world = pg.size(), rank = pg.rank();
  const Shape shapes[] = {{37}, {6, 50}};  // 337 elements: the shards are padded
  // Gradients spanning 2^-16 .. 1 in magnitude, different on every rank.
  auto grad_of = [&](int r, int k) {
    std::vector<float> v(Numel(shapes[k]));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = Hash(static_cast<int64_t>(i), 500 + 10 * r + k) * std::ldexp(1.0f, -static_cast<int>(i % 17));
    }
    return v;
  };
  // The exact mean, the mean of |g|, and each rank's amax over all its gradients.
  std::vector<double> mean, mean_abs;
  std::vector<double> amax(world, 0.0);
  for (int k = 0; k < 2; ++k) {
    const size_t base = mean.size();
    mean.resize(base + Numel(shapes[k]), 0.0);
    mean_abs.resize(mean.size(), 0.0);
    for (int r = 0; r < world; ++r) {
      const std::vector<float> g = grad_of(r, k);
      for (size_t i = 0; i < g.size(); ++i) {
        mean[base + i] += static_cast<double>(g[i]) / world;
        mean_abs[base + i] += std::fabs(static_cast<double>(g[i])) / world;
        amax[r] = std::max(amax[r], std::fabs(static_cast<double>(g[i])));
      }
    }
  }
  double sum_amax = 0.0;
  for (double a : amax) sum_amax += a;

  const optim::AdamW::Options readout{.lr = 1e6, .beta1 = 0.0, .beta2 = 0.0, .eps = 1e6, .weight_decay = 0.0};
  const GradSync modes[] = {GradSync::kFp32, GradSync::kBf16, GradSync::kFp8E4M3, GradSync::kFp8E5M2};
  for (GradSync mode : modes) {
    ZeroAdamW::NamedTensors params;
    for (int k = 0; k < 2; ++k) {
      Tensor p = Zeros(shapes[k]);
      p.requires_grad_();
      params.emplace_back(k == 0 ? "a" : "b", p);
    }
    ZeroAdamW opt(pg, params, readout, {.grad_sync = mode});
    for (int k = 0; k < 2; ++k) Sum(Mul(params[k].second, FromVector(grad_of(rank, k), shapes[k]))).Backward();
    opt.ReduceGradients();
    opt.Step();
    std::vector<float> got;
    for (const auto& [name, master] : opt.MasterWeights()) {
      for (float v : master.ToFloats()) got.push_back(-v);
    }
    ASSERT_EQ(got.size(), mean.size());
    // Mantissa bits m_b, rel = 2^-(m_b+1); a rank's quantization adds at most
    // h / s_r (h: half the smallest subnormal; s_r = fp8_max / amax_r), the
    // owner's narrowing of the sum h / s_out with s_out >= fp8_max /
    // ((1 + rel) sum_r amax_r); the mean divides by N:
    //   |got - mean| <= rel (mean|g| + |mean|)(1 + rel) + 2 h (1 + rel) sum_r amax_r / (fp8_max N)
    //                   + 2^-20 mean|g| (f32 sums) + 4e-6 |mean| (the read-out).
    int mbits = 23;
    double h = 0.0, fp8_max = 1.0;
    if (mode == GradSync::kBf16) mbits = 7;
    if (mode == GradSync::kFp8E4M3) mbits = 3, h = std::ldexp(1.0, -10), fp8_max = 448;
    if (mode == GradSync::kFp8E5M2) mbits = 2, h = std::ldexp(1.0, -17), fp8_max = 57344;
    const double rel = std::ldexp(1.0, -(mbits + 1));
    double worst = 0.0;
    for (size_t i = 0; i < mean.size(); ++i) {
      const double bound = rel * (mean_abs[i] + std::fabs(mean[i])) * (1 + rel) +
                           2 * h * (1 + rel) * sum_amax / (fp8_max * world) + std::ldexp(mean_abs[i], -20) +
                           4e-6 * std::fabs(mean[i]);
      ASSERT_LE(std::fabs(got[i] - mean[i]), bound) << Name(mode) << " element " << i << " rank " << rank;
      worst = std::max(worst, std::fabs(got[i] - mean[i]) / bound);
    }
    // The bound is not loose everywhere: some element uses a good part of it.
    if (mode != GradSync::kFp32) EXPECT_GT(worst, 0.25) << Name(mode);
  }
}

void RunZero(int world, std::map<std::string, std::string> env = {}) {
  const std::string dir = testing::FreshDir("zero" + std::to_string(world));
  env["OCTET_MASTER"] = dir + "/store";
  env["OCTET_TIMEOUT_MS"] = "20000";
  testing::ExpectAllPassed(testing::RunRanks(world, "ZeroWorker.DISABLED_MatchesPlainAdamW", env, dir));
  std::filesystem::remove_all(dir);
}

TEST(Zero1, TwoRanksMatchPlainAdamWAndCheckpointsMoveBetweenWorldSizes) {
  if (testing::IsWorker()) GTEST_SKIP();
  RunZero(2);
}

TEST(Zero1, ThreeRanksWithBf16WeightGather) {
  if (testing::IsWorker()) GTEST_SKIP();
  RunZero(3, {{"OCTET_TEST_BF16", "1"}});
}

TEST(Zero1, NarrowGradientSyncWithinTheBoundOfItsFormat) {
  if (testing::IsWorker()) GTEST_SKIP();
  const std::string dir = testing::FreshDir("zero_sync");
  testing::ExpectAllPassed(testing::RunRanks(
      3, "ZeroWorker.DISABLED_NarrowGradSyncWithinItsBound",
      {{"OCTET_MASTER", dir + "/store"}, {"OCTET_TIMEOUT_MS", "20000"}}, dir));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace octet::dist
