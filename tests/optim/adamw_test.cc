// AdamW: steps against a float64 reference written here (bias correction,
// decoupled weight decay, the dim >= 2 rule), FP32 master weights for bf16
// parameters, low-precision state (bf16; fp8 m + fp16 v with per-tensor
// scales) against the fp32 trajectory. State dicts: adamw_state_dict_test.cc.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert_testing.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/ops/cpu/loops.h>
#include <octet/optim/adamw.h>
#include <octet/optim/sgd.h>
#include "tests/optim/param_util.h"
#include "tests/test_util.h"

namespace octet::optim {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomValues;

// Float64 AdamW, llm.c's formula.
struct RefAdamW {
  double lr, b1, b2, eps;
  std::vector<double> p, m, v;
  int t = 0;
  void Step(const std::vector<double>& g, double wd) {
    ++t;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mhat = m[i] / bc1, vhat = v[i] / bc2;
      p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
    }
  }
};

using ::octet::optim::testing::Param;
using ::octet::optim::testing::SetGrad;
using ::octet::testing::Bytes;

class AdamWVsReference : public ::testing::TestWithParam<DType> {};

TEST_P(AdamWVsReference, SeveralStepsWithWeightDecayAndBiasCorrection) {
  const DType dtype = GetParam();
  const std::vector<double> w0 = RandomValues(12, 1), b0 = RandomValues(4, 2);
  Tensor w = Param(w0, {3, 4}, dtype), b = Param(b0, {4}, dtype);
  AdamW opt({{"w", w}, {"b", b}}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  RefAdamW rw{0.01, 0.9, 0.95, 1e-8, w0, std::vector<double>(12), std::vector<double>(12)};
  RefAdamW rb{0.01, 0.9, 0.95, 1e-8, b0, std::vector<double>(4), std::vector<double>(4)};
  EXPECT_EQ(opt.state(0).weight_decay, 0.1);  // 2-D: decayed
  EXPECT_EQ(opt.state(1).weight_decay, 0.0);  // 1-D: not decayed
  for (int step = 0; step < 5; ++step) {
    // Exactly representable in f32 so both sides see the same gradient.
    std::vector<double> gw = RandomValues(12, 100 + step), gb = RandomValues(4, 200 + step);
    for (double& x : gw) x = static_cast<float>(x);
    for (double& x : gb) x = static_cast<float>(x);
    SetGrad(w, gw, dtype);
    SetGrad(b, gb, dtype);
    if (step == 3) {
      opt.set_lr(0.005);
      rw.lr = rb.lr = 0.005;
    }
    opt.Step();
    rw.Step(gw, 0.1);
    rb.Step(gb, 0.0);
  }
  EXPECT_EQ(opt.step_count(), 5);
  // f64: only rounding differences; f32: the kernel computes in f32.
  const double tol = dtype == DType::kFloat64 ? 1e-13 : 2e-6;
  EXPECT_TRUE(AllClose(w, rw.p, tol, tol));
  EXPECT_TRUE(AllClose(b, rb.p, tol, tol));
  EXPECT_TRUE(AllClose(opt.state(0).m, rw.m, tol, tol));
  EXPECT_TRUE(AllClose(opt.state(0).v, rw.v, tol, tol * 1e-2));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamWVsReference, ::testing::Values(DType::kFloat64, DType::kFloat32),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(AdamW, LargeTensorAcrossChunksAndThreadsMatchesReference) {
  // Crosses the kernel's chunk and block boundaries and the OpenMP split.
  const int64_t n = 3 * 16384 + 78;
  const std::vector<double> w0 = RandomValues(n, 21);
  std::vector<std::vector<double>> grads;
  for (int s = 0; s < 3; ++s) {
    grads.push_back(RandomValues(n, 22 + s));
    for (double& x : grads.back()) x = static_cast<float>(x);
  }
  Tensor w = Param(w0, {2, n / 2}, DType::kFloat32);
  AdamW opt({{"w", w}}, {.lr = 0.01, .beta2 = 0.95, .weight_decay = 0.1});
  RefAdamW ref{0.01, 0.9, 0.95, 1e-8, w0, std::vector<double>(n), std::vector<double>(n)};
  for (const auto& g : grads) {
    SetGrad(w, g, DType::kFloat32);
    opt.Step();
    ref.Step(g, 0.1);
  }
  EXPECT_TRUE(AllClose(w, ref.p, 2e-6, 2e-6));

  // The scaled state gives the same bits on 1 and 2 threads.
  std::vector<std::vector<uint8_t>> results;
  for (int threads : {1, 2}) {
    const cpu::ScopedOmpThreads scoped(threads);
    Tensor x = Param(w0, {n}, DType::kBFloat16);
    AdamW o({{"x", x}}, {.lr = 0.01, .state_dtype = StateDType::kFp8Fp16});
    for (const auto& g : grads) {
      SetGrad(x, g, DType::kBFloat16);
      o.Step();
    }
    std::vector<uint8_t> all = Bytes(x);
    for (const Tensor& t : {o.state(0).m, o.state(0).v, o.state(0).master, o.state(0).m_meta->scale_inv}) {
      const std::vector<uint8_t> b = Bytes(t);
      all.insert(all.end(), b.begin(), b.end());
    }
    results.push_back(all);
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(AdamW, FirstStepMovesEachWeightByLrTimesSign) {
  // With bias correction, step 1 gives m^/sqrt(v^) = g/|g| = sign(g).
  Tensor p = Param({1.0, -2.0, 3.0}, {3});
  AdamW opt({{"p", p}}, {.lr = 0.1, .eps = 0.0, .weight_decay = 0.0});
  SetGrad(p, {0.5, -0.001, 100.0}, DType::kFloat32);
  opt.Step();
  EXPECT_TRUE(AllClose(p, {0.9, -1.9, 2.9}, 1e-6, 1e-6));
}

TEST(AdamW, ParametersWithoutGradientAreSkipped) {
  Tensor a = Param({1.0, 2.0}, {2}), b = Param({3.0, 4.0}, {2});
  AdamW opt({{"a", a}, {"b", b}}, {.lr = 0.1});
  SetGrad(a, {1.0, 1.0}, DType::kFloat32);
  opt.Step();
  EXPECT_TRUE(AllClose(b, {3.0, 4.0}, 0, 0));
  EXPECT_FALSE(AllClose(a, {1.0, 2.0}, 0, 1e-3));
  opt.ZeroGrad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(AdamW, DecayFilterAndNoDecayNames) {
  Tensor w = Param({1.0, 1.0, 1.0, 1.0}, {2, 2}), e = Param({1.0, 1.0, 1.0, 1.0}, {2, 2}), b = Param({1.0}, {1});
  AdamW opt({{"w", w}, {"emb", e}, {"b", b}},
            {.weight_decay = 0.5,
             .decay_filter = [](const std::string& name, const Tensor&) { return name != "w"; },
             .no_decay = {"emb"}});
  EXPECT_EQ(opt.state(0).weight_decay, 0.0);
  EXPECT_EQ(opt.state(1).weight_decay, 0.0);
  EXPECT_EQ(opt.state(2).weight_decay, 0.5);
  EXPECT_NE(ErrorOf([&] { AdamW bad({{"w", w}}, {.no_decay = {"nope"}}); }).find("'nope', which is not a parameter"),
            std::string::npos);
}

TEST(AdamW, RejectsBadParametersAndOptions) {
  Tensor ok = Param({1.0}, {1});
  Tensor no_grad = FromVector(std::vector<double>{1.0}, {1});
  EXPECT_NE(ErrorOf([&] { AdamW o({{"x", no_grad}}, {}); }).find("'x'"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { AdamW o({{"x", no_grad}}, {}); }).find("must be a leaf tensor that requires grad"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { AdamW o({{"x", ok}, {"x", Param({2.0}, {1})}}, {}); }).find("'x' appears twice"),
            std::string::npos);
  Tensor fp8 = FromVector(std::vector<double>{1.0}, {1}, {.dtype = DType::kFloat8E4M3});
  EXPECT_NE(ErrorOf([&] { AdamW o({{"q", fp8}}, {}); }).find("keep FP8 copies outside the optimizer"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { AdamW o({{"x", ok}}, {.beta1 = 1.0}); }).find("beta1 must be in [0, 1)"),
            std::string::npos);
  // Not finite: an infinite lr took one step and then diverged (train_gpt --lr=inf).
  EXPECT_NE(ErrorOf([&] { AdamW o({{"x", ok}}, {.lr = INFINITY}); }).find("adamw: lr must be finite and >= 0, got inf"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { AdamW o({{"x", ok}}, {.eps = INFINITY}); }).find("eps must be finite and >= 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { AdamW o({{"x", ok}}, {.weight_decay = INFINITY}); }).find("weight_decay must be finite"),
            std::string::npos);
  AdamW o({{"x", ok}}, {});
  EXPECT_NE(ErrorOf([&] { o.set_lr(NAN); }).find("adamw: lr must be finite and >= 0, got nan"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { o.set_lr(-1e-3); }).find("got -0.001"), std::string::npos);
  o.set_lr(1e-3);
  EXPECT_EQ(o.lr(), 1e-3);
}

TEST(AdamW, NarrowParamsKeepFp32MasterAndEqualItsRounding) {
  // Initial values and gradients exact in the parameter's dtype, so an f32
  // run with the same gradients must follow the master bit for bit. Three
  // chunks of the narrow update (256 elements, NOTE [adamw chunk length]) and
  // a tail of 37, against the f32 update's chunks of 1024.
  constexpr int64_t kRows = 5, kCols = 161, kN = kRows * kCols;
  for (const DType dt : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(Name(dt));
    auto bits_of = [dt](float x) { return dt == DType::kBFloat16 ? FloatToBf16Bits(x) : FloatToF16Bits(x); };
    auto exact = [&](std::vector<double> v) {
      for (double& x : v) {
        const uint16_t b = bits_of(static_cast<float>(x));
        x = dt == DType::kBFloat16 ? Bf16BitsToFloat(b) : F16BitsToFloat(b);
      }
      return v;
    };
    const std::vector<double> w0 = exact(RandomValues(kN, 7));
    Tensor wn = Param(w0, {kRows, kCols}, dt);
    Tensor wf = Param(w0, {kRows, kCols}, DType::kFloat32);
    const AdamW::Options o{.lr = 1e-3, .beta2 = 0.95, .weight_decay = 0.1};
    AdamW on({{"w", wn}}, o), of({{"w", wf}}, o);
    ASSERT_TRUE(on.state(0).master.defined());
    EXPECT_EQ(on.state(0).master.dtype(), DType::kFloat32);
    EXPECT_FALSE(of.state(0).master.defined());
    for (int step = 0; step < 10; ++step) {
      const std::vector<double> g = exact(RandomValues(kN, 300 + step));
      SetGrad(wn, g, dt);
      SetGrad(wf, g, DType::kFloat32);
      on.Step();
      of.Step();
    }
    const Tensor& master = on.state(0).master;
    EXPECT_EQ(Bytes(master), Bytes(wf));  // master == the f32 trajectory
    const std::vector<float> mf = master.ToFloats();
    const auto* bits = static_cast<const uint16_t*>(wn.raw_data());
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(bits[i], bits_of(mf[i])) << i;
    // The updates (~1e-3 * 10) are below the narrow dtype's resolution for
    // many entries: without the master they would be lost.
    EXPECT_FALSE(AllClose(master, w0, 0, 1e-4));
  }
}

// The documented contract of the master copy: weights written into a bf16
// parameter behind the optimizer's back are overwritten by the next step,
// unless SyncMasterFromParams() copies them into the master first.
TEST(AdamW, SyncMasterFromParamsAdoptsWeightsLoadedBehindItsBack) {
  const AdamW::Options o{.lr = 0.25, .weight_decay = 0.0};
  auto run = [&](bool sync) {
    Tensor w = Param({1.0, -2.0}, {2}, DType::kBFloat16);
    Tensor b = Param({0.5}, {1}, DType::kFloat32);  // f32: no master, nothing to sync
    AdamW opt({{"w", w}, {"b", b}}, o);
    // New weights loaded into the model (e.g. from a model-only checkpoint).
    w.detach().CopyFrom_(FromVector(std::vector<double>{4.0, 8.0}, {2}, {.dtype = DType::kBFloat16}));
    if (sync) opt.SyncMasterFromParams();
    SetGrad(w, {1.0, -1.0}, DType::kBFloat16);
    SetGrad(b, {1.0}, DType::kFloat32);
    opt.Step();  // the first step moves each weight by lr against its gradient's sign
    EXPECT_EQ(b.ToDoubles(), (std::vector<double>{0.25}));
    return w.ToDoubles();
  };
  EXPECT_EQ(run(/*sync=*/false), (std::vector<double>{0.75, -1.75}));  // the old master's trajectory
  EXPECT_EQ(run(/*sync=*/true), (std::vector<double>{3.75, 8.25}));
}

TEST(AdamW, IndexOfFindsAParameterByNameOrNamesTheMissingOne) {
  Tensor a = Param({1.0}, {1}, DType::kFloat32), b = Param({2.0}, {1}, DType::kFloat32);
  AdamW opt({{"a", a}, {"layer.b", b}}, {});
  EXPECT_EQ(opt.IndexOf("a"), 0u);
  EXPECT_EQ(opt.IndexOf("layer.b"), 1u);
  EXPECT_NE(ErrorOf([&] { opt.IndexOf("b"); }).find("adamw: no parameter named 'b'"), std::string::npos);
}

TEST(AdamW, StateIndexOutOfRangeNamesTheIndexAndTheCount) {
  Tensor a = Param({1.0}, {1}, DType::kFloat32);
  AdamW opt({{"a", a}}, {});
  EXPECT_NE(ErrorOf([&] { opt.state(99); }).find("AdamW::state: index 99 is out of range for 1 parameters"),
            std::string::npos);
}

TEST(AdamW, Bf16GradientsForBf16Params) {
  Tensor w = Param({0.5, -0.25}, {2}, DType::kBFloat16);
  AdamW opt({{"w", w}}, {.lr = 0.125, .eps = 0.0, .weight_decay = 0.0});
  SetGrad(w, {1.0, -1.0}, DType::kBFloat16);
  opt.Step();
  EXPECT_TRUE(AllClose(w, {0.375, -0.125}, 0, 0));
}

// 0.5 * sum a_i (x_i - c_i)^2 with curvatures over two decades: gradient a*(x - c).
struct Quadratic {
  std::vector<double> a, c;
  explicit Quadratic(int n) : a(n), c(RandomValues(n, 11, -2, 2)) {
    for (int i = 0; i < n; ++i) a[i] = std::pow(10.0, 2.0 * i / (n - 1) - 1.0);
  }
  std::vector<double> Grad(const std::vector<double>& x) const {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) g[i] = static_cast<float>(a[i] * (x[i] - c[i]));
    return g;
  }
  double Loss(const std::vector<double>& x) const {
    double l = 0;
    for (size_t i = 0; i < x.size(); ++i) l += 0.5 * a[i] * (x[i] - c[i]) * (x[i] - c[i]);
    return l;
  }
};

std::vector<std::vector<double>> RunQuadratic(StateDType state, int steps) {
  const int n = 256;
  Quadratic q(n);
  Tensor x = Param(std::vector<double>(n, 0.0), {16, 16});
  AdamW opt({{"x", x}}, {.lr = 0.02, .beta2 = 0.99, .weight_decay = 0.0, .state_dtype = state});
  std::vector<std::vector<double>> traj;
  for (int s = 0; s < steps; ++s) {
    const std::vector<double> xv = x.ToDoubles();
    SetGrad(x, q.Grad(xv), DType::kFloat32);
    opt.Step();
    traj.push_back(x.ToDoubles());
  }
  return traj;
}

TEST(AdamW, LowPrecisionStateFollowsFp32TrajectoryOnQuadratic) {
  // Stated tolerances, measured against the fp32-state run over 300 steps of
  // a 256-dim quadratic (coordinates travel up to ~2, lr 0.02): along the
  // whole trajectory every coordinate stays within 0.03 (bf16 state; measured
  // 0.013) / 0.3 (fp8 m + fp16 v; measured 0.19); at the end within 0.01 of
  // it; and the final loss differs by less than 1% of the initial loss. The
  // fp8 run is ahead of the fp32 one mid-way because e4m3's 3-bit mantissa
  // makes a slowly shrinking momentum stick (NOTE [adamw state dtype]).
  const int steps = 300;
  const auto ref = RunQuadratic(StateDType::kFloat32, steps);
  const auto bf = RunQuadratic(StateDType::kBFloat16, steps);
  const auto f8 = RunQuadratic(StateDType::kFp8Fp16, steps);
  Quadratic q(256);
  double dev_bf = 0, dev_f8 = 0, end_bf = 0, end_f8 = 0;
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < ref[s].size(); ++i) {
      dev_bf = std::max(dev_bf, std::abs(bf[s][i] - ref[s][i]));
      dev_f8 = std::max(dev_f8, std::abs(f8[s][i] - ref[s][i]));
      if (s == steps - 1) {
        end_bf = std::max(end_bf, std::abs(bf[s][i] - ref[s][i]));
        end_f8 = std::max(end_f8, std::abs(f8[s][i] - ref[s][i]));
      }
    }
  }
  const double l0 = q.Loss(std::vector<double>(256, 0.0));
  const double l_ref = q.Loss(ref.back()), l_bf = q.Loss(bf.back()), l_f8 = q.Loss(f8.back());
  EXPECT_LT(l_ref, 0.01 * l0);  // the problem is actually being solved
  EXPECT_LT(dev_bf, 0.03);
  EXPECT_LT(dev_f8, 0.3);
  EXPECT_LT(end_bf, 0.01);
  EXPECT_LT(end_f8, 0.01);
  EXPECT_LT(std::abs(l_bf - l_ref), 0.01 * l0);
  EXPECT_LT(std::abs(l_f8 - l_ref), 0.01 * l0);
  // And low precision is not a no-op: the trajectories do differ.
  EXPECT_GT(dev_bf, 0.0);
  EXPECT_GT(dev_f8, 0.0);
}

TEST(AdamW, Fp8Fp16StateScalesFollowTheAmax) {
  Tensor x = Param(std::vector<double>(8, 0.0), {2, 4});
  AdamW opt({{"x", x}}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .state_dtype = StateDType::kFp8Fp16});
  const AdamW::ParamState& s = opt.state(0);
  ASSERT_EQ(s.m.dtype(), DType::kFloat8E4M3);
  ASSERT_EQ(s.v.dtype(), DType::kFloat16);
  ASSERT_NE(s.m.scale_meta(), nullptr);
  const std::vector<double> g = {0.5, -2.0, 0.25, 1.0, -0.125, 0.75, 1.5, -1.0};
  SetGrad(x, g, DType::kFloat32);
  opt.Step();
  // m = 0.1 g, v = 0.01 g^2: amax 0.2 and 0.04.
  const float am = 0.1f * 2.0f, av = 0.01f * 4.0f;
  const float ms = static_cast<float>(s.m_meta->scale.Item()), vs = static_cast<float>(s.v_meta->scale.Item());
  EXPECT_FLOAT_EQ(static_cast<float>(s.m_meta->amax.Item()), am);
  EXPECT_FLOAT_EQ(static_cast<float>(s.v_meta->amax.Item()), av);
  EXPECT_FLOAT_EQ(ms, 448.0f / am);
  EXPECT_FLOAT_EQ(vs, 65504.0f / av);
  EXPECT_EQ(static_cast<float>(s.m_meta->scale_inv.Item()), 1.0f / ms);
  EXPECT_EQ(static_cast<float>(s.v_meta->scale_inv.Item()), 1.0f / vs);
  // Decoded state ~ 0.1 g and 0.01 g^2 (e4m3: 3 mantissa bits; f16: 10).
  std::vector<double> m_ref, v_ref;
  for (double gi : g) m_ref.push_back(0.1 * gi), v_ref.push_back(0.01 * gi * gi);
  EXPECT_TRUE(AllClose(s.m, m_ref, 1.0 / 16, 1e-6));  // ToDoubles applies the ScaleMeta
  const std::vector<float> vcodes = s.v.ToFloats();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(vcodes[i] / vs, v_ref[i], 1e-3 * v_ref[i]) << i;
  // The largest |m| sits at the top of the e4m3 range.
  EXPECT_EQ(static_cast<const uint8_t*>(s.m.raw_data())[1], 0xFE);  // -448
  // A 100x larger gradient raises the amax: the scales shrink.
  std::vector<double> g2 = g;
  for (double& x2 : g2) x2 *= 100;
  SetGrad(x, g2, DType::kFloat32);
  opt.Step();
  EXPECT_LT(static_cast<float>(s.m_meta->scale.Item()), ms / 5);
  EXPECT_LT(static_cast<float>(s.v_meta->scale.Item()), vs / 50);
  // A zero gradient with a zero state would keep the previous scale (amax 0);
  // here m decays, so the scale grows back by 1/beta1.
  const float ms2 = static_cast<float>(s.m_meta->scale.Item());
  SetGrad(x, std::vector<double>(8, 0.0), DType::kFloat32);
  opt.Step();
  EXPECT_NEAR(s.m_meta->scale.Item(), ms2 / 0.9, 1e-4 * ms2);
}

// The amax pass keeps kLanes independent maxima (NOTE [adamw chunk isa]):
// the largest |m| is found wherever it sits, in a full group of lanes or in
// the tail, and equals the f32 value of the first step's m = (1-beta1) g.
TEST(AdamW, Fp8StateAmaxFindsTheLargestMomentInEveryPosition) {
  constexpr int64_t n = 16 * 5 + 7;
  for (int64_t at : {int64_t{0}, int64_t{37}, int64_t{47}, int64_t{80}, n - 1}) {
    std::vector<double> g = RandomValues(n, 300 + at);
    for (double& x : g) x = static_cast<float>(x);
    g[at] = -3.5;  // |g| <= 1 elsewhere
    Tensor x = Param(std::vector<double>(n, 0.0), {n});
    AdamW opt({{"x", x}}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .state_dtype = StateDType::kFp8Fp16});
    SetGrad(x, g, DType::kFloat32);
    opt.Step();
    const float omb1 = static_cast<float>(1.0 - 0.9), omb2 = static_cast<float>(1.0 - 0.99);
    EXPECT_EQ(static_cast<float>(opt.state(0).m_meta->amax.Item()), omb1 * 3.5f) << "at " << at;
    EXPECT_EQ(static_cast<float>(opt.state(0).v_meta->amax.Item()), omb2 * (3.5f * 3.5f)) << "at " << at;
  }
}

// A NaN gradient anywhere makes the amax NaN, so the scales stay as they were
// (ComputeScale refuses a non-finite amax) instead of being derived from the
// finite elements only.
TEST(AdamW, Fp8StateNanGradientKeepsTheScales) {
  constexpr int64_t n = 16 * 5 + 7;
  for (int64_t at : {int64_t{5}, int64_t{53}, n - 2}) {
    std::vector<double> g = RandomValues(n, 400 + at);
    Tensor x = Param(std::vector<double>(n, 0.0), {n});
    AdamW opt({{"x", x}}, {.lr = 1e-3, .state_dtype = StateDType::kFp8Fp16});
    SetGrad(x, g, DType::kFloat32);
    opt.Step();
    const ScaleMeta& mm = *opt.state(0).m_meta;
    const ScaleMeta& vm = *opt.state(0).v_meta;
    const double ms = mm.scale.Item(), vs = vm.scale.Item();
    ASSERT_NE(ms, 1.0);  // the first step did set them
    g[at] = std::nan("");
    SetGrad(x, g, DType::kFloat32);
    opt.Step();
    EXPECT_TRUE(std::isnan(mm.amax.Item())) << "at " << at;
    EXPECT_TRUE(std::isnan(vm.amax.Item())) << "at " << at;
    EXPECT_EQ(mm.scale.Item(), ms) << "at " << at;
    EXPECT_EQ(vm.scale.Item(), vs) << "at " << at;
  }
}

// The chunk loops are built for the baseline ISA and for AVX-512 (NOTE
// [adamw chunk isa]): both give the same bits for every state format, over
// lengths that cross the lane, chunk and block boundaries. On a CPU without
// AVX-512 both runs take the baseline.
TEST(AdamW, IsaBuildsGiveIdenticalBits) {
  const int64_t n = 2 * 16384 + 1024 + 29;
  const std::vector<double> w0 = RandomValues(n, 31);
  std::vector<std::vector<double>> grads;
  for (int s = 0; s < 3; ++s) grads.push_back(RandomValues(n, 32 + s));
  for (StateDType state : {StateDType::kFloat32, StateDType::kBFloat16, StateDType::kFp8Fp16}) {
    std::vector<std::vector<uint8_t>> results;
    for (bool avx512 : {false, true}) {
      internal::SetConverterIsaForTesting({avx512, avx512, avx512});
      Tensor x = Param(w0, {n}, DType::kBFloat16);
      AdamW o({{"x", x}}, {.lr = 0.01, .weight_decay = 0.1, .state_dtype = state});
      for (const auto& g : grads) {
        SetGrad(x, g, DType::kBFloat16);
        o.Step();
      }
      std::vector<uint8_t> all = Bytes(x);
      for (const Tensor& t : {o.state(0).m, o.state(0).v, o.state(0).master}) {
        const std::vector<uint8_t> b = Bytes(t);
        all.insert(all.end(), b.begin(), b.end());
      }
      results.push_back(all);
    }
    internal::ForceScalarConvertersForTesting(false);
    EXPECT_EQ(results[0], results[1]) << Name(state);
  }
}


// NOTE [adamw one region]: one step over many tensors runs them all in one
// parallel loop over their concatenated elements; every tensor must end
// bit-identical to a step of that tensor alone (pieces cut at the tensor
// boundaries, none skipped or run twice). Sizes cross the chunk, the amax
// block and the loop's grain; dtypes mix f32 and bf16 (master) parameters.
TEST(AdamW, ManyTensorsInOneStepEqualEachTensorAlone) {
  struct Spec {
    Shape shape;
    DType dtype;
  };
  const std::vector<Spec> specs = {{{5}, DType::kFloat32},        {{200, 200}, DType::kBFloat16},
                                   {{1}, DType::kBFloat16},       {{70001}, DType::kFloat32},
                                   {{3, 10925}, DType::kFloat32}, {{2 * 16384 + 7}, DType::kBFloat16}};
  for (StateDType state : {StateDType::kFloat32, StateDType::kBFloat16, StateDType::kFp8Fp16}) {
    std::vector<std::vector<double>> w0, grads;
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t n = Numel(specs[i].shape);
      w0.push_back(RandomValues(n, 40 + static_cast<int>(i)));
      grads.push_back(RandomValues(n, 60 + static_cast<int>(i)));
    }
    const AdamW::Options options{.lr = 0.01, .weight_decay = 0.1, .state_dtype = state};
    NamedTensors together;
    for (size_t i = 0; i < specs.size(); ++i)
      together.push_back({"p" + std::to_string(i), Param(w0[i], specs[i].shape, specs[i].dtype)});
    AdamW all(together, options);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < specs.size(); ++i) {
        std::vector<double> g = grads[i];
        for (double& x : g) x *= 1.0 + step;
        SetGrad(together[i].second, g, specs[i].dtype);
      }
      all.Step();
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      Tensor alone = Param(w0[i], specs[i].shape, specs[i].dtype);
      AdamW one({{"p" + std::to_string(i), alone}}, options);
      for (int step = 0; step < 3; ++step) {
        std::vector<double> g = grads[i];
        for (double& x : g) x *= 1.0 + step;
        SetGrad(alone, g, specs[i].dtype);
        one.Step();
      }
      const std::string what = absl::StrCat(Name(state), " tensor ", i);
      EXPECT_EQ(Bytes(together[i].second), Bytes(alone)) << what;
      EXPECT_EQ(Bytes(all.state(i).m), Bytes(one.state(0).m)) << what;
      EXPECT_EQ(Bytes(all.state(i).v), Bytes(one.state(0).v)) << what;
      if (specs[i].dtype == DType::kBFloat16) EXPECT_EQ(Bytes(all.state(i).master), Bytes(one.state(0).master)) << what;
      if (state == StateDType::kFp8Fp16)
        EXPECT_EQ(Bytes(all.state(i).m_meta->scale_inv), Bytes(one.state(0).m_meta->scale_inv)) << what;
    }
  }
}

}  // namespace
}  // namespace octet::optim
