// The LayerNorm fused into the FP8 Linear's input at O1 (NOTE [layer norm
// fused into the fp8 linear] in nn/linear.h, NOTE [pre-quantized fp8 linear
// input] in nn/fp8_linear.h):
//  - Fp8Linear given an x already quantized with the input slot's scale has
//    the bits of Fp8Linear quantizing x itself (y, dx, dw, db, the recorded
//    amax), with and without the transposed copies of TN-only GPUs;
//  - Linear::ForwardLayerNorm fuses exactly when the NOTE says, gives the
//    unfused path's gradients of x and of the LayerNorm bit for bit (they do
//    not depend on the FP8 input) and an output within one FP8 rounding;
//  - a small GPT at O1 takes the fused path and its losses stay close to the
//    unfused run; O0 and O2 never fuse and keep their bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/core/scaling.h>
#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/nn/layer_norm.h>
#include <octet/nn/linear.h>
#include <octet/nn/linear_testing.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul_testing.h>
#include <octet/ops/norm.h>
#include <octet/optim/adamw.h>
#include "tests/nn/fused_linear_gpt.h"
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::RandomTensor;

struct ForcedTransposedCopies {
  explicit ForcedTransposedCopies(bool v) { SetFp8TransposedCopiesForTesting(v); }
  ~ForcedTransposedCopies() { SetFp8TransposedCopiesForTesting(std::nullopt); }
};

struct NoFusion {
  NoFusion() { SetLayerNormFusionForTesting(false); }
  ~NoFusion() { SetLayerNormFusionForTesting(std::nullopt); }
};

// Delayed scaling as after a first update: the input and output-gradient
// slots are initialised with the given scales.
void Initialise(amp::Fp8LinearState& s, float input_scale, float grad_scale) {
  s.input().SetInitialized(true);
  Tensor in = s.input().scale_tensor();
  in.Fill_(input_scale);
  s.grad_output().SetInitialized(true);
  Tensor g = s.grad_output().scale_tensor();
  g.Fill_(grad_scale);
}

float Scalar(const Tensor& t) { return static_cast<float>(t.ToDoubles().at(0)); }

TEST(Fp8LinearPrequantized, SameBitsAsQuantizingInside) {
  for (bool tn : {false, true}) {
    ForcedTransposedCopies forced(tn);
    Linear a({.in = 48, .out = 40}), b({.in = 48, .out = 40});
    b.LoadStateDict(a.StateDict());
    const amp::Recipe recipe;  // delayed scaling, E4M3 forward, E5M2 backward
    auto sa = std::make_shared<amp::Fp8LinearState>(a, "t_", "a", recipe);
    auto sb = std::make_shared<amp::Fp8LinearState>(b, "t_", "b", recipe);
    Initialise(*sa, 24.0f, 2048.0f);
    Initialise(*sb, 24.0f, 2048.0f);
    const Tensor x = RandomTensor({3, 37, 48}, 1, DType::kBFloat16, -3, 3);
    const Tensor dy = RandomTensor({3, 37, 40}, 2, DType::kBFloat16, -1, 1);
    const Tensor xa = x.detach().requires_grad_(), xb = x.detach().requires_grad_();
    const Tensor ya = amp::Fp8Linear(xa, a.weight(), *a.bias(), sa, /*record=*/true);
    const Tensor q = Quantize(xb, DType::kFloat8E4M3, sb->input().scale_tensor());
    const Tensor yb = amp::Fp8Linear(q, b.weight(), *b.bias(), sb, /*record=*/true);
    ASSERT_EQ(yb.dtype(), DType::kBFloat16);
    EXPECT_EQ(ya.ToDoubles(), yb.ToDoubles()) << "tn " << tn;
    ya.Backward(dy);
    yb.Backward(dy);
    ASSERT_TRUE(xb.grad().defined());
    EXPECT_EQ(xb.grad().dtype(), DType::kBFloat16);
    EXPECT_EQ(xa.grad().ToDoubles(), xb.grad().ToDoubles()) << "tn " << tn;
    EXPECT_EQ(a.weight().grad().ToDoubles(), b.weight().grad().ToDoubles()) << "tn " << tn;
    EXPECT_EQ(a.bias()->grad().ToDoubles(), b.bias()->grad().ToDoubles()) << "tn " << tn;
    // The input slot recorded and observed the amax that came with q.
    EXPECT_EQ(Scalar(sa->input().pending_amax()), Scalar(sb->input().pending_amax()));
    EXPECT_EQ(sb->input().observation().count, 1);
    EXPECT_EQ(sb->input().observation().amax, sa->input().observation().amax);
    EXPECT_EQ(sb->input().observation().scale, 24.0f);
  }
}

TEST(Fp8LinearPrequantized, RejectsAnFp8InputItCannotUse) {
  Linear a({.in = 16, .out = 8});
  auto s = std::make_shared<amp::Fp8LinearState>(a, "t_", "a", amp::Recipe{});
  const Tensor x = RandomTensor({4, 16}, 3, DType::kFloat32);
  const Tensor e5 = Quantize(x, DType::kFloat8E5M2, 1.0f);
  EXPECT_NE(::octet::testing::ErrorOf([&] { amp::Fp8Linear(e5, a.weight(), *a.bias(), s, false); })
                .find("slot quantizes to fp8_e4m3"),
            std::string::npos);
}

// One LayerNorm + Linear pair, fused (a) and unfused (b), same parameters and
// the same initialised FP8 state.
struct Pair {
  LayerNorm ln_a{{.dim = 64}}, ln_b{{.dim = 64}};
  Linear lin_a{{.in = 64, .out = 96}}, lin_b{{.in = 64, .out = 96}};
  explicit Pair(amp::Level level, const amp::Recipe& recipe = {}) {
    {  // A non-trivial LayerNorm affine part.
      NoGradGuard no_grad;
      ln_a.weight()->CopyFrom_(RandomTensor({64}, 11, DType::kFloat32, 0.5, 1.5));
      ln_a.bias()->CopyFrom_(RandomTensor({64}, 12, DType::kFloat32, -0.3, 0.3));
    }
    ln_b.LoadStateDict(ln_a.StateDict());
    lin_b.LoadStateDict(lin_a.StateDict());
    for (Module* m : std::vector<Module*>{&ln_a, &ln_b, &lin_a, &lin_b}) m->SetAmp(level, recipe);
  }
  void InitialiseFp8(float input_scale) {
    Initialise(*lin_a.fp8_state(), input_scale, 4096.0f);
    Initialise(*lin_b.fp8_state(), input_scale, 4096.0f);
  }
};

TEST(LayerNormFusedLinear, InputAndLayerNormGradientsEqualTheUnfusedPath) {
  for (bool tn : {false, true}) {
    ForcedTransposedCopies forced(tn);
    Pair p(amp::Level::kO1);
    // 200 maps the largest normalised values (|y| up to about 3) past E4M3's
    // 448: saturation is counted.
    p.InitialiseFp8(200.0f);
    p.lin_a.fp8_state()->set_telemetry(true);
    p.lin_b.fp8_state()->set_telemetry(true);
    const Tensor x = RandomTensor({2, 40, 64}, 21, DType::kFloat32, -2, 4);
    const Tensor dy = RandomTensor({2, 40, 96}, 22, DType::kBFloat16, -1, 1);
    const Tensor xa = x.detach().requires_grad_(), xb = x.detach().requires_grad_();
    ASSERT_TRUE(p.lin_a.FusesLayerNorm(p.ln_a, xa));
    const Tensor ya = p.lin_a.ForwardLayerNorm(p.ln_a, xa);
    const Tensor yb = p.lin_b(p.ln_b(xb));
    EXPECT_EQ(p.lin_a.layer_norm_fusions(), 1);
    EXPECT_EQ(p.lin_b.layer_norm_fusions(), 0);
    ASSERT_EQ(ya.dtype(), yb.dtype());
    // y: the FP8 inputs differ only where bfloat16 rounding crossed an E4M3
    // boundary (one E4M3 step, 1/8 relative, of a few inputs).
    const std::vector<double> va = ya.ToDoubles(), vb = yb.ToDoubles();
    double max_y = 0, max_diff = 0;
    int differ = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      max_y = std::max(max_y, std::abs(vb[i]));
      max_diff = std::max(max_diff, std::abs(va[i] - vb[i]));
      differ += va[i] != vb[i];
    }
    EXPECT_GT(differ, 0) << "the single rounding should change something";
    EXPECT_LT(max_diff, 0.05 * max_y);
    ya.Backward(dy);
    yb.Backward(dy);
    // dX of the Linear does not depend on its FP8 input, so all of these match.
    EXPECT_EQ(xa.grad().ToDoubles(), xb.grad().ToDoubles()) << "tn " << tn;
    EXPECT_EQ(p.ln_a.weight()->grad().ToDoubles(), p.ln_b.weight()->grad().ToDoubles()) << "tn " << tn;
    EXPECT_EQ(p.ln_a.bias()->grad().ToDoubles(), p.ln_b.bias()->grad().ToDoubles()) << "tn " << tn;
    EXPECT_EQ(p.lin_a.bias()->grad().ToDoubles(), p.lin_b.bias()->grad().ToDoubles()) << "tn " << tn;
    double max_dw = 0;
    for (double v : p.lin_b.weight().grad().ToDoubles()) max_dw = std::max(max_dw, std::abs(v));
    EXPECT_TRUE(::octet::testing::AllClose(p.lin_a.weight().grad(), p.lin_b.weight().grad(), 0.0, 0.05 * max_dw));
    // The slot recorded the fused kernel's amax (of the float32 values; the
    // unfused one saw them rounded to bfloat16).
    const amp::Fp8Slot& in_a = p.lin_a.fp8_state()->input();
    const amp::Fp8Slot& in_b = p.lin_b.fp8_state()->input();
    EXPECT_NEAR(Scalar(in_a.pending_amax()), Scalar(in_b.pending_amax()), 1e-2 * Scalar(in_b.pending_amax()));
    // Telemetry counts clipping on the values the kernel quantized.
    ASSERT_TRUE(in_a.observation().has_clip_stats);
    EXPECT_GT(in_a.observation().saturated, 0.0);
    const DType bf16 = DType::kBFloat16, f32 = DType::kFloat32;
    const Tensor quantized = octet::LayerNorm(x.To(bf16).To(f32), p.ln_a.weight()->To(bf16).To(f32),
                                              p.ln_a.bias()->To(bf16).To(f32));
    const amp::ClipCounts want = amp::CountFp8Clipping(quantized, 200.0f, DType::kFloat8E4M3);
    EXPECT_EQ(in_a.observation().saturated, static_cast<double>(want.saturated) / x.numel());
    EXPECT_EQ(in_a.observation().underflow, static_cast<double>(want.underflow) / x.numel());
    EXPECT_NEAR(in_a.observation().saturated, in_b.observation().saturated, 1e-3);
  }
}

TEST(LayerNormFusedLinear, FusesInEvalWithoutRecording) {
  Pair p(amp::Level::kO1);
  p.InitialiseFp8(16.0f);
  p.lin_a.Eval();
  p.ln_a.Eval();
  const Tensor x = RandomTensor({5, 64}, 31, DType::kBFloat16);
  {
    NoGradGuard no_grad;
    p.lin_a.ForwardLayerNorm(p.ln_a, x);
  }
  EXPECT_EQ(p.lin_a.layer_norm_fusions(), 1);
  EXPECT_FALSE(p.lin_a.fp8_state()->input().recorded());
}

// NOTE [layer norm fused into the fp8 linear]: the cases that stay unfused,
// and give exactly ln(x) followed by the Linear.
TEST(LayerNormFusedLinear, UnfusedCasesRunTheLayerNormThenTheLinear) {
  const Tensor x = RandomTensor({3, 64}, 41, DType::kFloat32);
  auto same = [&](Pair& p, const char* what) {
    EXPECT_FALSE(p.lin_a.FusesLayerNorm(p.ln_a, x)) << what;
    const Tensor ya = p.lin_a.ForwardLayerNorm(p.ln_a, x), yb = p.lin_b(p.ln_b(x));
    EXPECT_EQ(p.lin_a.layer_norm_fusions(), 0) << what;
    EXPECT_EQ(ya.ToDoubles(), yb.ToDoubles()) << what;
  };
  {
    Pair p(amp::Level::kO0);
    same(p, "O0");
  }
  {
    Pair p(amp::Level::kO2);
    same(p, "O2");
  }
  {
    Pair p(amp::Level::kO1);  // first step of delayed scaling: the slot is not initialised
    same(p, "uninitialised slot");
  }
  {
    Pair p(amp::Level::kO1, {.scaling = amp::Scaling::kCurrent});
    p.InitialiseFp8(16.0f);
    same(p, "current scaling");
  }
  {
    Pair p(amp::Level::kO1);
    p.InitialiseFp8(16.0f);
    p.ln_a.SetAmp(amp::Level::kO0);  // the LayerNorm opted out
    p.ln_b.SetAmp(amp::Level::kO0);
    same(p, "LayerNorm at O0");
  }
  {
    Pair p(amp::Level::kO1);
    p.InitialiseFp8(16.0f);
    NoFusion off;
    same(p, "turned off for testing");
  }
}

// ---- GPT ----------------------------------------------------------------------------------

using ::octet::nn::testing::TrainLog;

TrainLog Train(amp::Level level, int steps) {
  return ::octet::nn::testing::TrainSmallGpt(level, steps, [](const Linear& l) { return l.layer_norm_fusions(); });
}

TEST(GptLayerNormFusion, O1TakesTheFusedPathAndLossesStayClose) {
  constexpr int kSteps = 10;
  const TrainLog fused = Train(amp::Level::kO1, kSteps);
  TrainLog unfused;
  {
    NoFusion off;
    unfused = Train(amp::Level::kO1, kSteps);
  }
  // Two blocks x (ln_1 -> qkv, ln_2 -> fc) on every step after the first
  // (step 0 scales from the current amax: NOTE [delayed scaling order]).
  EXPECT_EQ(fused.fusions, 4 * (kSteps - 1));
  EXPECT_EQ(unfused.fusions, 0);
  EXPECT_EQ(fused.losses[0], unfused.losses[0]) << "step 0 is unfused in both";
  // The two runs differ by the single vs double rounding of the FP8 inputs of
  // qkv and fc; stated tolerance: 0.5 % of the loss at every step (measured
  // on this CPU: at most 0.05 %).
  for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(fused.losses[s], unfused.losses[s], 5e-3 * unfused.losses[s]) << s;
  EXPECT_NE(fused.losses, unfused.losses) << "the fused path should change the bits somewhere";
  EXPECT_LT(fused.losses.back(), fused.losses.front()) << "it trains";
}

TEST(GptLayerNormFusion, O0AndO2NeverFuseAndKeepTheirBits) {
  for (amp::Level level : {amp::Level::kO0, amp::Level::kO2}) {
    const TrainLog on = Train(level, 4);
    TrainLog off;
    {
      NoFusion no;
      off = Train(level, 4);
    }
    EXPECT_EQ(on.fusions, 0) << amp::Name(level);
    EXPECT_EQ(on.losses, off.losses) << amp::Name(level);
  }
}

}  // namespace
}  // namespace octet::nn
