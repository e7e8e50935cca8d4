// The MLP's GELU fused into proj's FP8 input at O1 (NOTE [gelu fused into
// the fp8 linear] in nn/linear.h, NOTE [gelu to fp8] in ops/pointwise.cc):
//  - an MLP with the fusion and one without (same parameters, same
//    initialised FP8 state): fc's gradients, the gradient of x and proj's
//    bias gradient bit for bit (they do not depend on proj's FP8 input);
//    proj's output and weight gradient within one FP8 rounding; the amax the
//    input slot recorded is exactly max|gelu| of the float32 GELU of fc's
//    output (the unfused slot saw it rounded to bfloat16), and after an
//    update the slots' amax histories hold those amaxes;
//  - the cases that do not fuse give the unfused bits exactly;
//  - a small GPT at O1 takes the fused path on every step after the first
//    and its losses stay close to the unfused run; O0 and O2 never fuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/core/scaling.h>
#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/nn/linear.h>
#include <octet/nn/linear_testing.h>
#include <octet/nn/mlp.h>
#include <octet/ops/cast.h>
#include <octet/ops/pointwise.h>
#include <octet/optim/adamw.h>
#include "tests/nn/fused_linear_gpt.h"
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::RandomTensor;

struct NoGeluFusion {
  NoGeluFusion() { SetGeluFusionForTesting(false); }
  ~NoGeluFusion() { SetGeluFusionForTesting(std::nullopt); }
};

float Scalar(const Tensor& t) { return static_cast<float>(t.ToDoubles().at(0)); }

// Delayed scaling as after a first update.
void Initialise(amp::Fp8LinearState& s, float input_scale, float grad_scale) {
  s.input().SetInitialized(true);
  Tensor in = s.input().scale_tensor();
  in.Fill_(input_scale);
  s.grad_output().SetInitialized(true);
  Tensor g = s.grad_output().scale_tensor();
  g.Fill_(grad_scale);
}

// Two MLPs with the same parameters: a runs with the fusion, b without.
struct MlpPair {
  MLP a{{.dim = 64, .hidden = 160}}, b{{.dim = 64, .hidden = 160}};
  explicit MlpPair(amp::Level level, const amp::Recipe& recipe = {}) {
    b.LoadStateDict(a.StateDict());
    a.SetAmp(level, recipe);
    b.SetAmp(level, recipe);
  }
  void InitialiseFp8(float proj_input_scale) {
    for (MLP* m : {&a, &b}) {
      Initialise(*m->fc().fp8_state(), 8.0f, 4096.0f);
      Initialise(*m->proj().fp8_state(), proj_input_scale, 4096.0f);
    }
  }
  Tensor RunB(const Tensor& x) {
    NoGeluFusion off;
    return b(x);
  }
};

double MaxAbs(const Tensor& t) {
  double m = 0;
  for (double v : t.ToDoubles()) m = std::max(m, std::abs(v));
  return m;
}

TEST(GeluFusedLinear, GradientsAndAmaxEqualTheUnfusedPath) {
  MlpPair p(amp::Level::kO1);
  amp::Fp8State sa(p.a), sb(p.b);  // the models' contiguous FP8 state, as training makes it
  // 1000 maps GELU values above 0.448 past E4M3's 448: saturation is counted.
  p.InitialiseFp8(1000.0f);
  p.a.proj().fp8_state()->set_telemetry(true);
  const Tensor x = RandomTensor({3, 37, 64}, 21, DType::kFloat32, -2, 2);
  const Tensor dy = RandomTensor({3, 37, 64}, 22, DType::kBFloat16, -1, 1);
  const Tensor xa = x.detach().requires_grad_(), xb = x.detach().requires_grad_();
  ASSERT_TRUE(p.a.proj().FusesGelu(xa));
  const Tensor ya = p.a(xa);
  const Tensor yb = p.RunB(xb);
  EXPECT_EQ(p.a.proj().gelu_fusions(), 1);
  EXPECT_EQ(p.b.proj().gelu_fusions(), 0);
  ASSERT_EQ(ya.dtype(), yb.dtype());
  const std::vector<double> va = ya.ToDoubles(), vb = yb.ToDoubles();
  double max_diff = 0;
  int differ = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(va[i] - vb[i]));
    differ += va[i] != vb[i];
  }
  EXPECT_GT(differ, 0) << "the single rounding should change something";
  EXPECT_LT(max_diff, 0.05 * MaxAbs(yb));
  ya.Backward(dy);
  yb.Backward(dy);
  // dX of proj does not depend on its FP8 input: everything below it matches.
  EXPECT_EQ(xa.grad().ToDoubles(), xb.grad().ToDoubles());
  EXPECT_EQ(p.a.fc().weight().grad().ToDoubles(), p.b.fc().weight().grad().ToDoubles());
  EXPECT_EQ(p.a.fc().bias()->grad().ToDoubles(), p.b.fc().bias()->grad().ToDoubles());
  EXPECT_EQ(p.a.proj().bias()->grad().ToDoubles(), p.b.proj().bias()->grad().ToDoubles());
  EXPECT_TRUE(::octet::testing::AllClose(p.a.proj().weight().grad(), p.b.proj().weight().grad(), 0.0,
                                         0.05 * MaxAbs(p.b.proj().weight().grad())));
  // The amaxes the proj input slots recorded: of the float32 GELU of fc's
  // output (fused) and of the bfloat16 GELU (unfused), both exactly.
  Tensor h;
  {
    NoGradGuard no_grad;
    NoGeluFusion off;
    h = p.b.fc()(x);  // the same bits in both runs (fc's state is the same and was not updated)
  }
  ASSERT_EQ(h.dtype(), DType::kBFloat16);
  const float amax_f32 = Scalar(Amax(Gelu(h.To(DType::kFloat32))));
  const float amax_bf16 = Scalar(Amax(Gelu(h)));
  const amp::Fp8Slot& in_a = p.a.proj().fp8_state()->input();
  const amp::Fp8Slot& in_b = p.b.proj().fp8_state()->input();
  EXPECT_EQ(Scalar(in_a.pending_amax()), amax_f32);
  EXPECT_EQ(Scalar(in_b.pending_amax()), amax_bf16);
  EXPECT_NEAR(amax_f32, amax_bf16, 1e-2 * amax_bf16);
  // Telemetry counts clipping on the values the kernel quantized.
  ASSERT_TRUE(in_a.observation().has_clip_stats);
  EXPECT_GT(in_a.observation().saturated, 0.0);
  const amp::ClipCounts want = amp::CountFp8Clipping(Gelu(h.To(DType::kFloat32)), 1000.0f, DType::kFloat8E4M3);
  EXPECT_EQ(in_a.observation().saturated, static_cast<double>(want.saturated) / h.numel());
  // The delayed-scaling update takes the recorded amax into the history and
  // derives the next scale from it, as for the unfused slot.
  sa.Update();
  sb.Update();
  const std::vector<double> ha = in_a.amax_history().ToDoubles(), hb = in_b.amax_history().ToDoubles();
  ASSERT_EQ(ha.size(), hb.size());
  EXPECT_EQ(std::count(ha.begin(), ha.end(), static_cast<double>(amax_f32)), 1);
  EXPECT_EQ(std::count(hb.begin(), hb.end(), static_cast<double>(amax_bf16)), 1);
  EXPECT_NEAR(Scalar(in_a.scale_tensor()), Scalar(in_b.scale_tensor()), 1e-2 * Scalar(in_b.scale_tensor()));
}

TEST(GeluFusedLinear, FusesInEvalWithoutRecording) {
  MlpPair p(amp::Level::kO1);
  p.InitialiseFp8(16.0f);
  p.a.Eval();
  const Tensor x = RandomTensor({5, 64}, 31, DType::kBFloat16);
  {
    NoGradGuard no_grad;
    p.a(x);
  }
  EXPECT_EQ(p.a.proj().gelu_fusions(), 1);
  EXPECT_FALSE(p.a.proj().fp8_state()->input().recorded());
}

// The cases that stay unfused give exactly fc, GELU, proj.
TEST(GeluFusedLinear, UnfusedCasesRunTheGeluThenTheLinear) {
  const Tensor x = RandomTensor({3, 64}, 41, DType::kFloat32);
  auto same = [&](MlpPair& p, const char* what) {
    EXPECT_FALSE(p.a.proj().FusesGelu(x)) << what;
    const Tensor ya = p.a(x), yb = p.RunB(x);
    EXPECT_EQ(p.a.proj().gelu_fusions(), 0) << what;
    EXPECT_EQ(ya.ToDoubles(), yb.ToDoubles()) << what;
  };
  {
    MlpPair p(amp::Level::kO0);
    same(p, "O0");
  }
  {
    MlpPair p(amp::Level::kO2);
    same(p, "O2");
  }
  {
    MlpPair p(amp::Level::kO1);  // first step of delayed scaling: the slot is not initialised
    same(p, "uninitialised slot");
  }
  {
    MlpPair p(amp::Level::kO1, {.scaling = amp::Scaling::kCurrent});
    p.InitialiseFp8(16.0f);
    same(p, "current scaling");
  }
  {
    MlpPair p(amp::Level::kO1);
    p.InitialiseFp8(16.0f);
    NoGeluFusion off;
    same(p, "turned off for testing");
  }
}

// ---- GPT ----------------------------------------------------------------------------------

using ::octet::nn::testing::TrainLog;

TrainLog Train(amp::Level level, int steps) {
  return ::octet::nn::testing::TrainSmallGpt(level, steps, [](const Linear& l) { return l.gelu_fusions(); });
}

TEST(GptGeluFusion, O1TakesTheFusedPathAndLossesStayClose) {
  constexpr int kSteps = 10;
  const TrainLog fused = Train(amp::Level::kO1, kSteps);
  TrainLog unfused;
  {
    NoGeluFusion off;
    unfused = Train(amp::Level::kO1, kSteps);
  }
  // Two blocks, one MLP each, on every step after the first (step 0 scales
  // from the current amax: NOTE [delayed scaling order]).
  EXPECT_EQ(fused.fusions, 2 * (kSteps - 1));
  EXPECT_EQ(unfused.fusions, 0);
  EXPECT_EQ(fused.losses[0], unfused.losses[0]) << "step 0 is unfused in both";
  // The runs differ by the single vs double rounding of proj's FP8 input;
  // stated tolerance: 0.5 % of the loss at every step.
  for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(fused.losses[s], unfused.losses[s], 5e-3 * unfused.losses[s]) << s;
  EXPECT_NE(fused.losses, unfused.losses) << "the fused path should change the bits somewhere";
  EXPECT_LT(fused.losses.back(), fused.losses.front()) << "it trains";
}

TEST(GptGeluFusion, O0AndO2NeverFuseAndKeepTheirBits) {
  for (amp::Level level : {amp::Level::kO0, amp::Level::kO2}) {
    const TrainLog on = Train(level, 4);
    TrainLog off;
    {
      NoGeluFusion no;
      off = Train(level, 4);
    }
    EXPECT_EQ(on.fusions, 0) << amp::Name(level);
    EXPECT_EQ(on.losses, off.losses) << amp::Name(level);
  }
}

}  // namespace
}  // namespace octet::nn
