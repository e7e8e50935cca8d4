// amp O1 (FP8 Linear): forward equals the float64 product of the dequantized
// FP8 operands, dgrad/wgrad equal the float64 products of their FP8 operands
// and stay close to the f32 Linear's gradients, delayed scaling follows the
// history, the saved activation is FP8, the weight is quantized once per
// version, the transposed copies and the fused GELU give the row-wise results.
// The scaling state itself: amp_state_test.cc.
#include <octet/nn/amp.h>

#include <octet/core/allocator.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <octet/autograd/grad_mode.h>
#include <octet/core/bfloat16.h>
#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/core/scaling_math.h>
#include <octet/nn/linear.h>
#include <octet/ops/delayed_scaling.h>
#include <octet/ops/matmul.h>
#include <octet/ops/matmul_testing.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"
#include "tests/nn/fp8_linear_ctx.h"

namespace octet::nn {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

// f64 matrix product of row-major (M,K) and (N,K)ᵀ.
std::vector<double> MatmulNT(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t N,
                             int64_t K) {
  std::vector<double> out(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[m * K + k] * b[n * K + k];
      out[m * N + n] = s;
    }
  return out;
}

std::vector<double> Transpose(const std::vector<double>& a, int64_t R, int64_t C) {
  std::vector<double> t(R * C);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t[c * R + r] = a[r * C + c];
  return t;
}

// What the grad slot's quantization does: fp8(v * scale) / scale, exactly.
std::vector<double> QuantDequantE5M2(const std::vector<double>& v, float scale) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = static_cast<double>(static_cast<float>(float8_e5m2(static_cast<float>(v[i]) * scale))) * (1.0f / scale);
  return out;
}

double RelErr(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

class AmpLinear : public ::testing::TestWithParam<amp::Scaling> {};

TEST_P(AmpLinear, ForwardEqualsFloat64ProductOfDequantizedFp8Operands) {
  Generator gen(1);
  Linear lin({.in = 32, .out = 24, .gen = &gen});
  lin.SetAmp(amp::Level::kO1, {.scaling = GetParam()});
  const Tensor x = RandomTensor({2, 8, 32}, 2, DType::kFloat32, -3, 3).requires_grad_();
  const Tensor y = lin(x);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  ASSERT_EQ(y.shape(), (Shape{2, 8, 24}));
  const autograd::Ctx& ctx = CtxOf(y);
  const Tensor xq = ctx.Saved(0), wq = ctx.Saved(1);
  EXPECT_EQ(xq.dtype(), DType::kFloat8E4M3);
  EXPECT_EQ(wq.dtype(), DType::kFloat8E4M3);
  std::vector<double> ref = MatmulNT(xq.ToDoubles(), wq.ToDoubles(), 16, 24, 32);  // dequantized (ToDoubles)
  const std::vector<double> b = lin.bias()->ToDoubles();
  for (int64_t m = 0; m < 16; ++m)
    for (int64_t n = 0; n < 24; ++n)  // NOTE [fp8 linear bias]: the bf16-rounded bias, added in f32
      ref[m * 24 + n] += static_cast<float>(bfloat16(static_cast<float>(b[n])));
  // Only the final rounding to bf16 separates the two (FP32 accumulation).
  EXPECT_TRUE(AllClose(y, ref, 1.0 / 256, 1e-5));
  // The FP8 operands are the quantized x and w (scale_inv * code).
  EXPECT_TRUE(AllClose(xq.Reshape({2, 8, 32}), x.detach(), 1.0 / 16, 1e-2));
}

TEST_P(AmpLinear, GradientsAreFp8ProductsAndCloseToTheFloat32Linear) {
  Generator gen(3);
  Linear lin({.in = 64, .out = 48, .gen = &gen});
  const Tensor x = RandomTensor({64, 64}, 4, DType::kFloat32, -2, 2);
  const Tensor dy = RandomTensor({64, 48}, 5, DType::kFloat32, -1e-3, 1e-3);  // gradient-sized values
  // f32 reference.
  const Tensor x32 = x.detach().requires_grad_();
  lin(x32).Backward(dy);
  const std::vector<double> dx32 = x32.grad().ToDoubles(), dw32 = lin.weight().grad().ToDoubles(),
                            db32 = lin.bias()->grad().ToDoubles();
  lin.ZeroGrad();
  lin.SetAmp(amp::Level::kO1, {.scaling = GetParam()});
  const Tensor x8 = x.detach().requires_grad_();
  const Tensor y = lin(x8);
  const Tensor xq = CtxOf(y).Saved(0), wq = CtxOf(y).Saved(1);
  y.Backward(dy.To(DType::kBFloat16));
  const amp::Fp8Slot& gslot = lin.fp8_state()->grad_output();
  EXPECT_EQ(gslot.dtype(), DType::kFloat8E5M2);
  const std::vector<double> dyq = QuantDequantE5M2(dy.To(DType::kBFloat16).ToDoubles(), gslot.observation().scale);
  // dgrad = dy_fp8 · w_fp8 and wgrad = dy_fp8ᵀ · x_fp8, exactly up to f32 accumulation.
  const std::vector<double> dx_ref = MatmulNT(dyq, Transpose(wq.ToDoubles(), 48, 64), 64, 64, 48);
  const std::vector<double> dw_ref = MatmulNT(Transpose(dyq, 64, 48), Transpose(xq.ToDoubles(), 64, 64), 48, 64, 64);
  EXPECT_EQ(x8.grad().dtype(), DType::kFloat32);
  EXPECT_EQ(lin.weight().grad().dtype(), DType::kFloat32);
  EXPECT_TRUE(AllClose(x8.grad(), dx_ref, 1e-5, 1e-9));
  EXPECT_TRUE(AllClose(lin.weight().grad(), dw_ref, 1e-5, 1e-9));
  // And close to the f32 Linear (E5M2 keeps 2 mantissa bits: a few percent).
  EXPECT_LT(RelErr(x8.grad().ToDoubles(), dx32), 0.08);
  EXPECT_LT(RelErr(lin.weight().grad().ToDoubles(), dw32), 0.08);
  EXPECT_LT(RelErr(lin.bias()->grad().ToDoubles(), db32), 0.01);  // bias grad is not quantized
}

INSTANTIATE_TEST_SUITE_P(Scalings, AmpLinear, ::testing::Values(amp::Scaling::kDelayed, amp::Scaling::kCurrent),
                         [](const auto& info) { return std::string(amp::Name(info.param)); });

TEST(AmpDelayedScaling, ScalesFollowTheAmaxHistory) {
  Linear lin({.in = 4, .out = 2});
  lin.SetAmp(amp::Level::kO1, {.scaling = amp::Scaling::kDelayed, .amax_history_len = 3, .margin = 1});
  amp::Fp8State fp8(lin);
  amp::Fp8Slot& in = lin.fp8_state()->input();
  EXPECT_FALSE(in.initialized());
  auto run = [&](double amax) {
    Tensor x = Full({2, 4}, amax / 2);
    x.Narrow(1, 0, 1).Fill_(-amax);
    const Tensor y = lin(x);
    fp8.Update();  // the optimizer step's update
    return ScaleInvValue(CtxOf(y).Saved(0));
  };
  const float fmax = 448.0f;
  // Step 1: nothing observed yet -> current scaling for this one.
  EXPECT_FLOAT_EQ(run(2.0), 1.0f / (fmax / 2.0f / 2.0f));
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{2, 0, 0}));
  EXPECT_FLOAT_EQ(in.scale(), fmax / 2.0f / 2.0f);
  // Step 2: uses the scale from step 1, records 8.
  EXPECT_FLOAT_EQ(run(8.0), 1.0f / (fmax / 2.0f / 2.0f));
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{8, 2, 0}));
  EXPECT_FLOAT_EQ(in.scale(), fmax / 8.0f / 2.0f);
  // Steps 3-4: the max of the history wins until 8 drops out of it.
  EXPECT_FLOAT_EQ(run(1.0), 1.0f / (fmax / 8.0f / 2.0f));
  EXPECT_FLOAT_EQ(in.scale(), fmax / 8.0f / 2.0f);
  run(1.0);
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{1, 1, 8}));
  EXPECT_FLOAT_EQ(in.scale(), fmax / 8.0f / 2.0f);
  run(0.5);
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{0.5, 1, 1}));
  EXPECT_FLOAT_EQ(in.scale(), fmax / 1.0f / 2.0f);
  // most_recent follows the newest amax; power-of-two rounds down.
  lin.SetAmp(amp::Level::kO1, {.amax_history_len = 3, .amax_algo = AmaxAlgo::kMostRecent, .margin = 1,
                               .power_of_two_scales = true});
  run(3.0);
  EXPECT_FLOAT_EQ(in.scale(), 64.0f);  // 448/3/2 = 74.67 -> 64
  // Eval mode uses the scale without recording.
  lin.Eval();
  const std::vector<double> before = in.amax_history().ToDoubles();
  EXPECT_FLOAT_EQ(run(100.0), 1.0f / 64.0f);
  EXPECT_EQ(in.amax_history().ToDoubles(), before);
}

TEST(AmpFp8Linear, SavedActivationIsFp8AndTheWeightIsQuantizedOncePerVersion) {
  Linear lin({.in = 64, .out = 32});
  lin.SetAmp(amp::Level::kO1);
  const Tensor x = RandomTensor({128, 64}, 7, DType::kBFloat16).requires_grad_();
  const Tensor y1 = lin(x);
  const Tensor saved = CtxOf(y1).Saved(0);
  EXPECT_EQ(saved.dtype(), DType::kFloat8E4M3);
  EXPECT_EQ(saved.nbytes(), 128u * 64u);  // one byte per element: half of the bf16 x, a quarter of f32
  EXPECT_EQ(saved.storage()->nbytes() <= 128u * 64u + 64u, true);
  const Tensor y2 = lin(x);  // a second micro-batch: same weight version
  EXPECT_EQ(lin.fp8_state()->weight_quantizations(), 1);
  EXPECT_TRUE(CtxOf(y1).Saved(1).is_same(CtxOf(y2).Saved(1)) ||
              CtxOf(y1).Saved(1).storage() == CtxOf(y2).Saved(1).storage());
  Sum(y1.To(DType::kFloat32)).Backward();
  Sum(y2.To(DType::kFloat32)).Backward();
  {
    NoGradGuard ng;  // an optimizer step bumps the version
    Tensor w = lin.weight();
    AddInPlace(w, Full(w.shape(), 1e-3), -1.0);
  }
  lin(x);
  EXPECT_EQ(lin.fp8_state()->weight_quantizations(), 2);
}

// NOTE [fp8 weight copy lifetime]: a backward that computes the weight's
// gradient releases the cached FP8 copy (its bytes go back to the cache),
// unless the copies are kept for further micro-batches; a frozen weight's
// copy stays.
TEST(AmpFp8Linear, WeightCopyIsReleasedByTheBackwardThatMakesItsGradient) {
  if (!GetCpuMemoryStats().caching_enabled) GTEST_SKIP() << "OCTET_CPU_CACHING=0: the cache's bytes are what it reads";
  constexpr int64_t kIn = 512, kOut = 512;  // a 256 KiB FP8 copy: a cached CPU block
  const Tensor x0 = RandomTensor({64, kIn}, 9, DType::kBFloat16, -1, 1);
  // Two forward + backward steps with the same weights. Returns the cached
  // CPU bytes still allocated after step 1 (its outputs and gradients gone)
  // over those before it, and the weight quantizations of both steps.
  auto two_steps = [&](Linear& lin, bool keep, bool frozen) {
    amp::KeepFp8WeightCopies(lin, keep);
    if (frozen) lin.weight().requires_grad_(false);
    const size_t before = GetCpuMemoryStats().cached_allocated_bytes;
    int64_t held = -1;
    for (int step = 0; step < 2; ++step) {
      {
        const Tensor x = x0.detach().requires_grad_();
        Sum(lin(x).To(DType::kFloat32)).Backward();
      }
      lin.ZeroGrad();
      if (step == 0) held = static_cast<int64_t>(GetCpuMemoryStats().cached_allocated_bytes - before);
    }
    return std::pair{held, lin.fp8_state()->weight_quantizations()};
  };
  Linear released({.in = kIn, .out = kOut, .bias = false}), kept({.in = kIn, .out = kOut, .bias = false}),
      frozen({.in = kIn, .out = kOut, .bias = false});
  for (Linear* l : {&released, &kept, &frozen}) l->SetAmp(amp::Level::kO1);
  const auto [released_held, released_q] = two_steps(released, false, false);
  const auto [kept_held, kept_q] = two_steps(kept, true, false);
  const auto [frozen_held, frozen_q] = two_steps(frozen, false, true);
  EXPECT_EQ(released_held, 0);
  EXPECT_EQ(kept_held, kIn * kOut);  // one byte per weight, nothing else left behind
  // (plus dgrad's converted dY, kept for a wgrad that never comes: NOTE
  // [converted A reuse] in ops/cpu/matmul_operands.h)
  EXPECT_GE(frozen_held, kIn * kOut);
  EXPECT_EQ(released_q, 2);  // the second forward quantizes again
  EXPECT_EQ(kept_q, 1);
  EXPECT_EQ(frozen_q, 1);
  EXPECT_FALSE(released.fp8_state()->keep_weight_after_backward());
  EXPECT_TRUE(kept.fp8_state()->keep_weight_after_backward());
}

// NOTE [fp8 linear bias]: the FP32 master bias reaches the GEMM as bfloat16,
// rounded once per bias version; micro-batches share the cast copy.
TEST(AmpFp8Linear, BiasIsCastToBf16OncePerVersion) {
  Generator gen(11);
  Linear lin({.in = 32, .out = 16, .gen = &gen});
  lin.SetAmp(amp::Level::kO1);
  amp::Fp8LinearState& st = *lin.fp8_state();
  const Tensor b = *lin.bias();
  const Tensor b1 = st.BiasForGemm(b, DType::kBFloat16);
  EXPECT_EQ(b1.dtype(), DType::kBFloat16);
  const std::vector<double> bd = b.ToDoubles(), b1d = b1.ToDoubles();
  for (size_t i = 0; i < bd.size(); ++i) EXPECT_EQ(b1d[i], static_cast<float>(bfloat16(static_cast<float>(bd[i]))));
  const Tensor x = RandomTensor({8, 32}, 12, DType::kBFloat16);
  lin(x);
  lin(x);
  EXPECT_EQ(st.bias_casts(), 1);
  EXPECT_EQ(st.BiasForGemm(b, DType::kBFloat16).storage(), b1.storage());
  // A float32 output takes the float32 bias as it is.
  EXPECT_TRUE(st.BiasForGemm(b, DType::kFloat32).is_same(b));
  {
    NoGradGuard ng;  // an optimizer step bumps the version
    Tensor bb = *lin.bias();
    AddInPlace(bb, Full(bb.shape(), 0.25), 1.0);
  }
  const Tensor b2 = st.BiasForGemm(*lin.bias(), DType::kBFloat16);
  EXPECT_EQ(st.bias_casts(), 2);
  const std::vector<double> b2d = b2.ToDoubles();
  for (size_t i = 0; i < bd.size(); ++i)
    EXPECT_EQ(b2d[i], static_cast<float>(bfloat16(static_cast<float>(bd[i]) + 0.25f)));
}

// The layouts a TN-only GPU GEMM gets (NOTE [fp8 linear layouts]), forced
// on the CPU: the same FP8 operands and the same scaling state, so the same
// results up to the GEMM's f32 summation order; the saved activation is X
// stored column-wise (the Xᵀ bytes) and the weight carries Wᵀ.
TEST(AmpFp8Linear, TransposedCopiesGiveTheRowWiseResults) {
  struct Forced {
    explicit Forced(bool v) { SetFp8TransposedCopiesForTesting(v); }
    ~Forced() { SetFp8TransposedCopiesForTesting(std::nullopt); }
  };
  EXPECT_FALSE(Fp8GemmWantsTransposedCopies(kCPU));
  Linear rows({.in = 48, .out = 40}), tn({.in = 48, .out = 40});
  ASSERT_NO_THROW(tn.LoadStateDict(rows.StateDict()));
  rows.SetAmp(amp::Level::kO1, {.amax_history_len = 4});
  tn.SetAmp(amp::Level::kO1, {.amax_history_len = 4});
  amp::Fp8State fp8_rows(rows), fp8_tn(tn);
  // The weights never change here: kept through backward, W and Wᵀ are
  // quantized once for all three steps (NOTE [fp8 weight copy lifetime]),
  // and both record the weight's amax once.
  amp::KeepFp8WeightCopies(rows, true);
  amp::KeepFp8WeightCopies(tn, true);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = RandomTensor({2, 24, 48}, 30 + step, DType::kBFloat16, -3, 3);
    const Tensor dy = RandomTensor({2, 24, 40}, 40 + step, DType::kBFloat16, -1e-2, 1e-2);
    const Tensor xr = x.detach().requires_grad_(), xt = x.detach().requires_grad_();
    const Tensor yr = rows(xr);
    Tensor yt;
    {
      Forced on(true);
      yt = tn(xt);
      const Tensor saved = CtxOf(yt).Saved(0);  // X (M,K), stored as Xᵀ
      EXPECT_EQ(saved.shape(), (Shape{48, 48}));
      EXPECT_EQ(saved.stride(0), 1);
      EXPECT_EQ(saved.dtype(), DType::kFloat8E4M3);
      EXPECT_EQ(saved.ToDoubles(), CtxOf(yr).Saved(0).ToDoubles());
      EXPECT_EQ(CtxOf(yr).Saved(0).stride(1), 1);  // the row-wise path keeps X as it is
      const Tensor w8 = CtxOf(yt).Saved(1);  // W (N,K) with Wᵀ (K,N) attached
      EXPECT_EQ(w8.shape(), (Shape{40, 48}));
      ASSERT_TRUE(w8.scale_meta()->columnwise.defined());
      EXPECT_EQ(w8.scale_meta()->columnwise.shape(), (Shape{48, 40}));
      EXPECT_EQ(w8.scale_meta()->columnwise.ToDoubles(), w8.T().Contiguous().ToDoubles());
      EXPECT_FALSE(CtxOf(yr).Saved(1).scale_meta()->columnwise.defined());
      yt.Backward(dy);
    }
    yr.Backward(dy);
    fp8_rows.Update();
    fp8_tn.Update();
    EXPECT_TRUE(AllClose(yt, yr.ToDoubles(), 1e-2, 1e-6));  // bf16 outputs: one rounding apart at most
    EXPECT_TRUE(AllClose(xt.grad(), xr.grad().ToDoubles(), 1e-5, 1e-9));
    EXPECT_TRUE(AllClose(tn.weight().grad(), rows.weight().grad().ToDoubles(), 1e-5, 1e-9));
    EXPECT_TRUE(AllClose(tn.bias()->grad(), rows.bias()->grad().ToDoubles(), 1e-6, 1e-9));
    const NamedTensors sr = amp::ScalingState(rows), st = amp::ScalingState(tn);
    for (size_t i = 0; i < sr.size(); ++i) EXPECT_EQ(st[i].second.ToDoubles(), sr[i].second.ToDoubles()) << sr[i].first;
    rows.ZeroGrad();
    tn.ZeroGrad();
  }
  EXPECT_EQ(tn.fp8_state()->weight_quantizations(), 1);  // Wᵀ is cached with W
}

// The GELU fused into the FP8 fprop GEMM (Fp8Linear(..., gelu = true)) gives
// the same output, gradients and scaling state as GELU after the FP8 Linear
// (on the CPU both round the pre-activation to bf16 once, and dpre = dy *
// gelu'(pre) is quantized in both); ForwardGelu at every level equals GELU
// after Forward.
TEST(AmpFp8Linear, FusedGeluEqualsGeluAfterTheFp8Linear) {
  Linear owner_a({.in = 32, .out = 64}), owner_b({.in = 32, .out = 64});
  auto sa = std::make_shared<amp::Fp8LinearState>(owner_a, "", "", amp::Recipe{});
  auto sb = std::make_shared<amp::Fp8LinearState>(owner_b, "", "", amp::Recipe{});
  const Tensor w = RandomTensor({64, 32}, 70, DType::kFloat32), b = RandomTensor({64}, 71, DType::kFloat32);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = RandomTensor({16, 32}, 72 + step, DType::kFloat32, -2, 2);
    const Tensor xa = x.detach().requires_grad_(), xb = x.detach().requires_grad_();
    const Tensor wa = w.detach().requires_grad_(), wb = w.detach().requires_grad_();
    const Tensor ya = Gelu(amp::Fp8Linear(xa, wa, b, sa, true));
    const Tensor yb = amp::Fp8Linear(xb, wb, b, sb, true, DType::kBFloat16, /*gelu=*/true);
    EXPECT_EQ(yb.ToDoubles(), ya.ToDoubles());
    const Tensor dy = RandomTensor({16, 64}, 80 + step, DType::kBFloat16, -1e-2, 1e-2);
    ya.Backward(dy);
    yb.Backward(dy);
    EXPECT_EQ(xb.grad().ToDoubles(), xa.grad().ToDoubles());
    EXPECT_EQ(wb.grad().ToDoubles(), wa.grad().ToDoubles());
  }
  for (int i = 0; i < 3; ++i) {
    const amp::Fp8Slot &a = *sa->slots()[i], &b = *sb->slots()[i];
    EXPECT_TRUE(a.recorded()) << a.name();
    EXPECT_EQ(b.pending_amax().ToDoubles(), a.pending_amax().ToDoubles()) << a.name();
    EXPECT_EQ(b.amax_history().ToDoubles(), a.amax_history().ToDoubles()) << a.name();
    EXPECT_EQ(b.scale(), a.scale()) << a.name();
  }
}

TEST(AmpFp8Linear, ForwardGeluEqualsGeluAfterForward) {
  Linear a({.in = 32, .out = 64}), b({.in = 32, .out = 64});
  ASSERT_NO_THROW(b.LoadStateDict(a.StateDict()));
  amp::Fp8State fp8_a(a), fp8_b(b);
  for (amp::Level level : {amp::Level::kO0, amp::Level::kO1, amp::Level::kO2}) {
    a.SetAmp(level);
    b.SetAmp(level);
    for (int step = 0; step < 2; ++step) {
      const Tensor x = RandomTensor({16, 32}, 50 + step, DType::kFloat32, -2, 2);
      const Tensor xa = x.detach().requires_grad_(), xb = x.detach().requires_grad_();
      const Tensor ya = Gelu(a(xa)), yb = b.ForwardGelu(xb);
      ASSERT_EQ(ya.dtype(), yb.dtype());
      EXPECT_EQ(yb.ToDoubles(), ya.ToDoubles()) << amp::Name(level);
      const Tensor dy = RandomTensor({16, 64}, 60 + step, ya.dtype(), -1e-2, 1e-2);
      ya.Backward(dy);
      yb.Backward(dy);
      EXPECT_EQ(xb.grad().ToDoubles(), xa.grad().ToDoubles()) << amp::Name(level);
      EXPECT_EQ(b.weight().grad().ToDoubles(), a.weight().grad().ToDoubles()) << amp::Name(level);
      EXPECT_EQ(b.bias()->grad().ToDoubles(), a.bias()->grad().ToDoubles()) << amp::Name(level);
      fp8_a.Update();
      fp8_b.Update();
      a.ZeroGrad();
      b.ZeroGrad();
    }
  }
  const NamedTensors sa = amp::ScalingState(a), sb = amp::ScalingState(b);
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sb[i].second.ToDoubles(), sa[i].second.ToDoubles()) << sa[i].first;
}

}  // namespace
}  // namespace octet::nn
