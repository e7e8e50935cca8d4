// ZeroAdamW's narrow weight all-gather (ZeroOptions::gather_dtype bf16 and
// fp8_e4m3), with real processes over loopback (Gloo) at world sizes 2, 3
// and 4: after each step every rank's parameters are exactly the owners'
// updated FP32 weights rounded to the gather dtype, and the owners keep their
// FP32 masters (the second step starts from the unrounded weights); their
// MasterWeights() are those FP32 weights, and loading them back
// (LoadFullStateDict after the model) restores the rounded parameters and
// continues exactly.
//
// The reference FP32 weights come from a second ZeroAdamW over a copy of the
// parameters with an FP32 gather, stepped with the same gradients in the same
// process group. Its gathered parameters are the owners' masters bit for bit
// (the FP32 gather copies bytes), and both optimizers do the same arithmetic
// up to the gather: the same reduce-scatter of the same gradients and AdamW on
// the same pieces (elementwise; adamw_cpu.cc is compiled without FMA
// contraction, so a piece's result does not depend on where it lies in memory).
//
// The roundings, computed here independently of octet's converters:
//   bf16: round to nearest, ties to even (the nearer of the two bf16
//         neighbours, by exact comparison in double).
//   fp8:  one shared per-tensor scale s = 448 / amax (a float division), amax
//         = max |w| over all the FP32 weights; q = the E4M3 value nearest to
//         the float product w * s (ties to the even code, subnormals included,
//         |w * s| > 448 clamped to 448), and the weight is q * (1 / s) (a float
//         multiply by the float reciprocal).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <octet/distributed/init.h>
#include <octet/distributed/zero.h>
#include <octet/optim/adamw.h>
#include "tests/distributed/multiprocess.h"

namespace octet::dist {
namespace {

float Hash(int64_t i, int salt) {
  uint32_t h = static_cast<uint32_t>(i * 2654435761u + salt * 40503u + 977u);
  h ^= h >> 16;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

std::vector<float> Values(int64_t n, int salt, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = Hash(i, salt) * scale;
  return v;
}

// Four parameters, 59 elements in all (prime: every world size pads, and
// parameters straddle shard boundaries). "u" is tiny and gets no gradient
// (like an embedding row no token used), so only weight decay moves it and
// FP8 rounds its weights to subnormals and to zero.
struct ParamSpec {
  const char* name;
  Shape shape;
  float scale;
};
const ParamSpec kParams[] = {{"w", {7, 5}, 1.5f}, {"b", {11}, 0.02f}, {"u", {3, 4}, 1e-5f}, {"g", {1}, 0.7f}};

ZeroAdamW::NamedTensors MakeParams() {
  ZeroAdamW::NamedTensors out;
  int salt = 1;
  for (const ParamSpec& p : kParams) {
    Tensor t = FromVector(Values(Numel(p.shape), salt++, p.scale), p.shape);
    t.requires_grad_();
    out.emplace_back(p.name, t);
  }
  return out;
}

// Different gradients on every rank and every step.
void SetGrads(const ZeroAdamW::NamedTensors& params, int rank, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    if (params[i].first == "u") {
      p.set_grad(Full(p.shape(), 0.0));
      continue;
    }
    p.set_grad(FromVector(Values(p.numel(), 1000 + 97 * step + 13 * rank + static_cast<int>(i), 0.05f), p.shape()));
  }
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to the nearest bf16 (ties to even). Finite inputs only.
float RoundBf16(float x) {
  const uint32_t lo = Bits(x) & 0xFFFF0000u;  // toward zero
  const uint32_t hi = lo + 0x10000u;          // the next bf16 away from zero
  const double d_lo = std::fabs(static_cast<double>(x) - FromBits(lo));
  const double d_hi = std::fabs(static_cast<double>(FromBits(hi)) - x);
  if (d_lo < d_hi) return FromBits(lo);
  if (d_hi < d_lo) return FromBits(hi);
  return FromBits((lo & 0x10000u) == 0 ? lo : hi);  // tie: the even bf16
}

// The value of positive E4M3 code c (0 .. 0x7E).
double E4m3Value(int c) {
  const int e = c >> 3, m = c & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
}

// The E4M3 value nearest to x (ties to the even code), clamped to +-448.
float RoundE4m3(float x) {
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double dc = std::fabs(E4m3Value(c) - a), db = std::fabs(E4m3Value(best) - a);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  const float q = static_cast<float>(E4m3Value(best));
  return std::signbit(x) ? -q : q;
}

const optim::AdamW::Options kAdamW{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};

TEST(ZeroGatherWorker, DISABLED_NarrowGatherIsTheRoundedMaster) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  const std::string which = std::getenv("OCTET_TEST_GATHER");
  const DType dt = which == "fp8" ? DType::kFloat8E4M3 : DType::kBFloat16;

  const ZeroAdamW::NamedTensors ref = MakeParams(), narrow = MakeParams();
  ZeroAdamW ref_opt(pg, ref, kAdamW, {.gather_dtype = DType::kFloat32});
  ZeroAdamW opt(pg, narrow, kAdamW, {.gather_dtype = dt});
  int64_t changed = 0, subnormal = 0, zeros = 0;
  // Every rank's parameters are the reference weights rounded to dt.
  auto check = [&](const std::string& when) {
    float amax = 0.0f;
    for (const auto& [name, p] : ref)
      for (float v : p.ToFloats()) amax = std::max(amax, std::fabs(v));
    const float scale = 448.0f / amax, scale_inv = 1.0f / scale;
    for (size_t i = 0; i < ref.size(); ++i) {
      const std::vector<float> master = ref[i].second.ToFloats(), got = narrow[i].second.ToFloats();
      ASSERT_EQ(master.size(), got.size());
      for (size_t k = 0; k < got.size(); ++k) {
        float want;
        if (dt == DType::kBFloat16) {
          want = RoundBf16(master[k]);
        } else {
          const float q = RoundE4m3(master[k] * scale);
          subnormal += q != 0.0f && std::fabs(q) < 0.015625f;
          zeros += q == 0.0f;
          want = q * scale_inv;
        }
        changed += want != master[k];
        ASSERT_EQ(Bits(got[k]), Bits(want))
            << Name(dt) << " gather, " << when << ", rank " << pg.rank() << " of " << pg.size() << ": "
            << ref[i].first << "[" << k << "] is " << got[k] << ", expected " << want << " (FP32 master "
            << master[k] << ")";
      }
    }
  };
  auto step = [&](int s) {
    SetGrads(ref, pg.rank(), s);
    ref_opt.ReduceGradients();
    ref_opt.Step();
    SetGrads(narrow, pg.rank(), s);
    opt.ReduceGradients();
    opt.Step();
  };
  for (int s = 0; s < 2; ++s) {
    step(s);
    check("step " + std::to_string(s + 1));
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The test saw real rounding (and, for fp8, the subnormal range and flushes).
  EXPECT_GT(changed, 50);
  if (dt == DType::kFloat8E4M3) {
    EXPECT_GT(subnormal, 0);
    EXPECT_GT(zeros, 0);
  }

  // Checkpoint round trip (what train_gpt does): MasterWeights() are the FP32
  // weights; loaded as the model's weights, LoadFullStateDict takes them as
  // masters and rounds the parameters again, and training continues exactly.
  const ZeroAdamW::NamedTensors masters = opt.MasterWeights();
  ASSERT_EQ(masters.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(masters[i].first, ref[i].first);
    ASSERT_EQ(masters[i].second.shape(), ref[i].second.shape());
    const std::vector<float> m = masters[i].second.ToFloats(), want = ref[i].second.ToFloats();
    for (size_t k = 0; k < m.size(); ++k) {
      ASSERT_EQ(Bits(m[k]), Bits(want[k])) << "master " << ref[i].first << "[" << k << "]";
    }
  }
  const optim::OptimizerState state = opt.FullStateDict();
  for (size_t i = 0; i < narrow.size(); ++i) narrow[i].second.detach().CopyFrom_(masters[i].second);
  ASSERT_NO_THROW(opt.LoadFullStateDict(state));
  check("after loading the FP32 masters");
  if (::testing::Test::HasFatalFailure()) return;
  step(2);
  check("the step after loading");
  EXPECT_EQ(opt.step_count(), 3);
}

void RunGather(int world, const std::string& dtype) {
  const std::string dir = testing::FreshDir("zero_gather" + std::to_string(world) + dtype);
  const std::map<std::string, std::string> env = {
      {"OCTET_MASTER", dir + "/store"}, {"OCTET_TIMEOUT_MS", "20000"}, {"OCTET_TEST_GATHER", dtype}};
  testing::ExpectAllPassed(
      testing::RunRanks(world, "ZeroGatherWorker.DISABLED_NarrowGatherIsTheRoundedMaster", env, dir));
  std::filesystem::remove_all(dir);
}

class ZeroGather : public ::testing::TestWithParam<int> {};

TEST_P(ZeroGather, Bf16WeightsAreTheRoundedFp32Masters) {
  if (testing::IsWorker()) GTEST_SKIP();
  RunGather(GetParam(), "bf16");
}

TEST_P(ZeroGather, Fp8E4m3WeightsAreTheRoundedFp32Masters) {
  if (testing::IsWorker()) GTEST_SKIP();
  RunGather(GetParam(), "fp8");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ZeroGather, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "World" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace octet::dist
