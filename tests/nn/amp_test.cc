// amp O1 (FP8 Linear): forward equals the float64 product of the dequantized
// FP8 operands, dgrad/wgrad equal the float64 products of their FP8 operands
// and stay close to the f32 Linear's gradients, delayed scaling follows the
// history, the saved activation is FP8, the weight is quantized once per
// version, telemetry counts saturation and underflow exactly, eval does not
// touch the scaling state, scaling state round-trips.
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

namespace octet::nn {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

const autograd::Ctx& CtxOf(const Tensor& y) {
  auto* node = dynamic_cast<autograd::OpNode<amp::Fp8LinearOp>*>(y.grad_fn().get());
  OCTET_CHECK(node != nullptr, "not an fp8_linear output: ", y.grad_fn() ? y.grad_fn()->name() : "leaf");
  return node->ctx;
}

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

// NOTE [slot state on the device]: the scale math runs as tensor ops.
TEST(AmpFp8Slot, CurrentScaleFromAnAmaxTensorMatchesComputeScale) {
  Tensor history, scale;
  amp::Fp8Slot slot("probe", DType::kFloat8E4M3, &history, &scale, 2);
  const amp::Recipe current{.scaling = amp::Scaling::kCurrent, .margin = 1};
  auto scale_for = [&](float amax, const amp::Recipe& r) {
    return static_cast<float>(slot.ScaleFor(r, Full({1}, amax)).Item());
  };
  EXPECT_FLOAT_EQ(scale_for(3.0f, current), ComputeScale(3.0f, 448.0f, 1, 1.0f, false));
  EXPECT_FLOAT_EQ(scale_for(3.0f, {.scaling = amp::Scaling::kCurrent, .power_of_two_scales = true}), 128.0f);
  EXPECT_FLOAT_EQ(scale_for(0.0f, current), 1.0f);  // no information: the slot's scale
  EXPECT_FLOAT_EQ(scale_for(NAN, current), 1.0f);
  EXPECT_FLOAT_EQ(slot.scale(), 1.0f);  // ScaleFor does not touch the slot
  // Delayed, uninitialised: current scaling too.
  const amp::Recipe delayed{.amax_history_len = 2};
  EXPECT_FLOAT_EQ(scale_for(7.0f, delayed), 64.0f);
  // Record max-combines into the pending amax and leaves history and scale
  // to the model's update (NOTE [delayed scaling order]).
  EXPECT_EQ(slot.pending_amax().ToDoubles(), (std::vector<double>{kNoAmaxRecorded}));
  EXPECT_FALSE(slot.recorded());
  slot.Record(Full({1}, 7.0f));
  slot.Record(Full({1}, 3.0f));
  EXPECT_TRUE(slot.recorded());
  EXPECT_EQ(slot.pending_amax().ToDoubles(), (std::vector<double>{7}));
  EXPECT_EQ(slot.amax_history().ToDoubles(), (std::vector<double>{0, 0}));
  EXPECT_FLOAT_EQ(slot.scale(), 1.0f);
  EXPECT_FALSE(slot.initialized());
  slot.Record(Full({1}, NAN));  // a NaN amax is kept, whatever came before
  slot.Record(Full({1}, 9.0f));
  EXPECT_TRUE(std::isnan(slot.pending_amax().ToDoubles()[0]));
  slot.MarkUpdated();
  EXPECT_TRUE(slot.initialized());
  EXPECT_FALSE(slot.recorded());
  // Wrong inputs name the slot.
  EXPECT_THAT(ErrorOf([&] { slot.Record(Full({2}, 1.0f)); }),
              HasSubstr("Fp8Slot probe: amax must be a float32 [1] tensor on cpu"));
  EXPECT_THAT(ErrorOf([&] { slot.ScaleFor(current, Full({1}, 1.0, {.dtype = DType::kFloat64})); }),
              HasSubstr("Fp8Slot probe: amax must be a float32 [1] tensor"));
}

// The fused update against a closed form written out here: roll, reduce
// (max or most recent), scale = (fp8_max / reduced) / 2^margin (previous kept
// for 0 or non-finite), unrecorded slots untouched, amax reset.
TEST(AmpFp8State, FusedUpdateMatchesTheClosedFormSlotBySlot) {
  const int S = 6, H = 3;
  const std::vector<float> hist0 = {1, 2, 3, 0, 0, 0, 5, 4, 3, 0.5f, 8, 1, 2, 2, 2, 7, 7, 7};
  const std::vector<float> amax0 = {4, 6, kNoAmaxRecorded, 0.25f, 0, NAN};
  const std::vector<float> scale0 = {1, 2, 3, 4, 5, 6};
  const std::vector<float> fmax = {448, 57344, 448, 448, 57344, 448};
  std::vector<uint8_t> algo = {0, 0, 0, 1, 0, 1};
  Tensor history = FromVector(hist0, {S, H}), amax = FromVector(amax0, {S}), scale = FromVector(scale0, {S});
  Tensor scale_inv = Zeros({S}), fp8_max = FromVector(fmax, {S});
  Tensor algo_t = Empty({S}, {.dtype = DType::kUInt8});
  for (int i = 0; i < S; ++i) algo_t.data<uint8_t>()[i] = algo[i];
  UpdateDelayedScalingBuffers(history, amax, scale, scale_inv, fp8_max, algo_t, {.margin = 1});
  const std::vector<double> h = history.ToDoubles(), s = scale.ToDoubles(), a = amax.ToDoubles();
  for (int i = 0; i < S; ++i) {
    EXPECT_EQ(a[i], kNoAmaxRecorded) << i;
    if (i == 2) {  // unrecorded: untouched
      EXPECT_EQ(h[i * H], 5);
      EXPECT_EQ(s[i], 3);
      continue;
    }
    std::vector<double> want_h = {amax0[i], hist0[i * H], hist0[i * H + 1]};
    for (int j = 0; j < H; ++j) {
      if (std::isnan(want_h[j])) EXPECT_TRUE(std::isnan(h[i * H + j])) << i;
      else EXPECT_EQ(h[i * H + j], want_h[j]) << i << "," << j;
    }
    const double reduced = algo[i] == 1 ? want_h[0] : std::max({want_h[0], want_h[1], want_h[2]});
    const double want = reduced > 0 && std::isfinite(reduced) ? static_cast<float>(fmax[i] / reduced) / 2.0f : scale0[i];
    EXPECT_FLOAT_EQ(s[i], want) << i;
  }
  EXPECT_FLOAT_EQ(s[0], 448.0f / 4 / 2);     // max of {4, 1, 2}
  EXPECT_FLOAT_EQ(s[3], 448.0f / 0.25f / 2);  // most recent
  EXPECT_FLOAT_EQ(s[4], 57344.0f / 2 / 2);     // a zero amax: the max of the rest
  EXPECT_FLOAT_EQ(s[5], 6.0f);                 // NaN: previous scale kept
  EXPECT_FLOAT_EQ(static_cast<float>(scale_inv.ToDoubles()[0]), 1.0f / (448.0f / 4 / 2));
  EXPECT_THAT(ErrorOf([&] { UpdateDelayedScalingBuffers(history, amax, scale, scale_inv, fp8_max, fp8_max, {}); }),
              HasSubstr("algo must be a contiguous uint8 [6] tensor"));
}

// One manager per model: contiguous buffers that the module buffers view,
// one update per optimizer step whatever the number of micro-batches (their
// amaxes max-combined), unrecorded steps leave a slot alone, the reduce hook
// sees the amax buffer before the update.
TEST(AmpFp8State, OneUpdatePerStepOverContiguousBuffers) {
  Linear lin({.in = 4, .out = 2});
  lin.SetAmp(amp::Level::kO1, {.amax_history_len = 3});
  amp::Fp8State fp8(lin);
  amp::Fp8Slot& in = lin.fp8_state()->input();
  auto micro = [&](double amax) {
    Tensor x = Full({2, 4}, amax / 2);
    x.Narrow(1, 0, 1).Fill_(-amax);
    const Tensor y = lin(x);
    const float used = ScaleInvValue(CtxOf(y).Saved(0));
    Sum(y.To(DType::kFloat32)).Backward();
    return used;
  };
  const float fmax = 448.0f;
  // Step 1, two micro-batches: no update yet, so both use current scaling.
  EXPECT_FLOAT_EQ(micro(2.0), 2.0f / fmax);
  EXPECT_FLOAT_EQ(micro(8.0), 8.0f / fmax);
  EXPECT_FALSE(in.initialized());
  EXPECT_EQ(in.pending_amax().ToDoubles(), (std::vector<double>{8}));
  fp8.Update();
  ASSERT_EQ(fp8.num_slots(), 3);
  EXPECT_EQ(fp8.binds(), 1);
  EXPECT_TRUE(in.initialized());
  // The module buffers are rows of the manager's buffers.
  EXPECT_EQ(lin.FindBuffer("fp8_input_amax_history")->data<float>(), fp8.amax_history().data<float>());
  EXPECT_EQ(lin.FindBuffer("fp8_grad_output_scale")->data<float>(), fp8.scale().data<float>() + 2);
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{8, 0, 0}));  // one entry for the step
  EXPECT_FLOAT_EQ(in.scale(), fmax / 8.0f);
  EXPECT_EQ(fp8.amax().ToDoubles(), std::vector<double>(3, kNoAmaxRecorded));
  // Step 2: both micro-batches use the step-1 scale; the history gets max(1, 4).
  EXPECT_FLOAT_EQ(micro(1.0), 8.0f / fmax);
  EXPECT_FLOAT_EQ(micro(4.0), 8.0f / fmax);
  fp8.Update();
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{4, 8, 0}));
  EXPECT_FLOAT_EQ(in.scale(), fmax / 8.0f);
  // An update with nothing recorded leaves the histories alone.
  fp8.Update();
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{4, 8, 0}));
  // The reduce hook (NOTE [fp8 amax all-reduce]) sees this step's amaxes; a
  // larger amax from "another rank" wins.
  int calls = 0;
  fp8.SetAmaxReduceHook([&](Tensor& amax) {
    ++calls;
    EXPECT_EQ(amax.ToDoubles()[0], 1.0);
    NoGradGuard ng;
    amax.CopyFrom_(Maximum(amax, Full({3}, 16.0f)));
  });
  micro(1.0);
  fp8.Update();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(in.amax_history().ToDoubles(), (std::vector<double>{16, 4, 8}));
  EXPECT_FLOAT_EQ(in.scale(), fmax / 16.0f);
  EXPECT_EQ(fp8.updates(), 4);
  EXPECT_EQ(fp8.binds(), 1);
  // A new history length resets the slots; the next update rebinds.
  lin.SetAmp(amp::Level::kO1, {.amax_history_len = 2});
  fp8.SetAmaxReduceHook(nullptr);
  micro(3.0);
  fp8.Update();
  EXPECT_EQ(fp8.binds(), 2);
  EXPECT_EQ(fp8.amax_history().shape(), (Shape{3, 2}));
  EXPECT_EQ(lin.fp8_state()->input().amax_history().ToDoubles(), (std::vector<double>{3, 0}));
}

// Checkpoint view: ScalingState lists the views, LoadScalingState writes
// through them into the manager's buffers and decides "initialised" from the
// loaded histories (NOTE [initialised on the host]).
TEST(AmpFp8State, LoadWritesThroughTheViewsAndSetsInitialised) {
  Linear a({.in = 8, .out = 8}), b({.in = 8, .out = 8});
  a.SetAmp(amp::Level::kO1, {.amax_history_len = 2});
  b.SetAmp(amp::Level::kO1, {.amax_history_len = 2});
  amp::Fp8State fa(a), fb(b);
  const Tensor x = RandomTensor({4, 8}, 3, DType::kFloat32, -2, 2).requires_grad_();
  Sum(a(x).To(DType::kFloat32)).Backward();
  fa.Update();
  fb.Update();  // binds b's (all-zero) slots
  EXPECT_FALSE(b.fp8_state()->input().initialized());
  ASSERT_NO_THROW(amp::LoadScalingState(b, amp::ScalingState(a)));
  EXPECT_EQ(fb.amax_history().ToDoubles(), fa.amax_history().ToDoubles());
  EXPECT_EQ(fb.scale().ToDoubles(), fa.scale().ToDoubles());
  EXPECT_EQ(fb.binds(), 1);
  for (amp::Fp8Slot* s : b.fp8_state()->slots()) EXPECT_TRUE(s->initialized()) << s->name();
  // Both now quantize alike.
  const Tensor ya = a(x), yb = b(x);
  EXPECT_EQ(ScaleInvValue(CtxOf(yb).Saved(0)), ScaleInvValue(CtxOf(ya).Saved(0)));
}

TEST(AmpTelemetry, CountsSaturationAndUnderflowOnACraftedInput) {
  Linear lin({.in = 8, .out = 4});
  lin.SetAmp(amp::Level::kO1, {.amax_history_len = 2});
  // Scale 1 for the input slot (initialised history, so delayed scaling uses it).
  NoGradGuard ng;
  lin.FindBuffer("fp8_input_amax_history")->CopyFrom_(FromVector(std::vector<float>{1, 0}, {2}));
  lin.FindBuffer("fp8_input_scale")->Fill_(1.0);
  lin.fp8_state()->input().SetInitialized(true);  // as a load would (NOTE [initialised on the host])
  amp::Fp8State fp8(lin);
  amp::SetTelemetry(lin, true);
  // 2 of 16 saturate (|x| > 448), 3 underflow (0 < |x| <= 2^-10), 2 zeros count as neither.
  std::vector<float> v = {1000, -500, 1e-4f, -2e-4f, 9.765625e-4f, 0, 0, 0.5f, 1, 2, 3, 4, 448, -448, 0.1f, 0.2f};
  lin.Train();
  autograd::GradMode::SetEnabled(true);
  lin(FromVector(v, {2, 8}));
  fp8.Update();
  const std::vector<amp::SlotStats> stats = amp::Telemetry(lin);
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].slot, "input");
  EXPECT_EQ(stats[1].slot, "weight");
  EXPECT_EQ(stats[2].slot, "grad_output");
  EXPECT_TRUE(stats[0].has_clip_stats);
  EXPECT_DOUBLE_EQ(stats[0].saturated, 2.0 / 16);
  EXPECT_DOUBLE_EQ(stats[0].underflow, 3.0 / 16);
  EXPECT_FLOAT_EQ(stats[0].amax, 1000.0f);
  EXPECT_FLOAT_EQ(stats[0].scale, 1.0f);
  EXPECT_FLOAT_EQ(stats[0].next_scale, 448.0f / 1000.0f);
  EXPECT_EQ(stats[0].numel, 16);
  EXPECT_DOUBLE_EQ(amp::WorstSaturation(stats), 2.0 / 16);
  // Weight (current scaling): nothing saturates.
  EXPECT_DOUBLE_EQ(stats[1].saturated, 0.0);
  // The counting helper itself, E5M2 thresholds: max 57344, half min subnormal 2^-17.
  const amp::ClipCounts c = amp::CountFp8Clipping(FromVector(std::vector<float>{6.2e4f, 1e-6f, 1e-5f, 0}, {4}), 1.0f,
                                                  DType::kFloat8E5M2);
  EXPECT_EQ(c.saturated, 1);
  EXPECT_EQ(c.underflow, 1);
  // At the edge of the range, "saturated" means exactly what the unclamped
  // cast (kNoSat) turns into NaN/inf.
  const std::vector<float> edge = {448.0f, 450.0f, 463.99f, 464.0f, 464.01f, -470.0f, 57344.0f, 59000.0f,
                                   61439.99f, 61440.0f, -61440.0f, 70000.0f};
  for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    int64_t want = 0;
    for (float v : edge) {
      const float r = fp8 == DType::kFloat8E4M3 ? E4M3BitsToFloat(FloatToE4M3Bits(v, Fp8Saturation::kNoSat))
                                                : E5M2BitsToFloat(FloatToE5M2Bits(v, Fp8Saturation::kNoSat));
      want += !std::isfinite(r);
    }
    EXPECT_GT(want, 0);
    EXPECT_EQ(amp::CountFp8Clipping(FromVector(edge, {12}), 1.0f, fp8).saturated, want) << Name(fp8);
  }
}

TEST(AmpScalingState, RoundTripsAndReportsMismatches) {
  Linear a({.in = 8, .out = 8}), b({.in = 8, .out = 8});
  a.SetAmp(amp::Level::kO1);
  b.SetAmp(amp::Level::kO1);
  amp::Fp8State fa(a);
  for (int i = 0; i < 3; ++i) {
    const Tensor x = RandomTensor({4, 8}, 10 + i, DType::kFloat32, -i - 1.0, i + 1.0).requires_grad_();
    Sum(a(x).To(DType::kFloat32)).Backward();
    fa.Update();
  }
  const NamedTensors st = amp::ScalingState(a);
  ASSERT_EQ(st.size(), 6u);
  EXPECT_EQ(st[0].first, "fp8_input_amax_history");
  EXPECT_TRUE(a.StateDict().size() == 2u);  // FP8 state is not in the model state dict
  ASSERT_NO_THROW(amp::LoadScalingState(b, st));
  const NamedTensors sb = amp::ScalingState(b);
  for (size_t i = 0; i < st.size(); ++i) EXPECT_EQ(st[i].second.ToDoubles(), sb[i].second.ToDoubles()) << st[i].first;
  Linear c({.in = 8, .out = 8});
  c.SetAmp(amp::Level::kO1, {.amax_history_len = 4});
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(c, st); }),
              HasSubstr("fp8_input_amax_history (expected float32[4], got float32[16])"));

  // A missing entry and an unexpected one are each named, and nothing is
  // loaded: b keeps what it had.
  NamedTensors partial(st.begin() + 1, st.end());
  partial.emplace_back("h.0.fc.fp8_input_scale", Full({1}, 2.0));
  const Tensor before = amp::ScalingState(b)[1].second.Clone();
  partial[0].second = Full(partial[0].second.shape(), 0.125);
  const std::string msg = ErrorOf([&] { amp::LoadScalingState(b, partial); });
  EXPECT_THAT(msg, HasSubstr("nothing was loaded. Missing: fp8_input_amax_history. "
                             "Unexpected: h.0.fc.fp8_input_scale."));
  EXPECT_EQ(amp::ScalingState(b)[1].second.ToDoubles(), before.ToDoubles());
  // O1 state into a model without FP8 state: every entry unexpected.
  Linear plain({.in = 8, .out = 8});
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(plain, st); }), HasSubstr("Unexpected: fp8_input_amax_history, "));
  NamedTensors twice = st;
  twice.push_back(st[0]);
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(b, twice); }), HasSubstr("LoadScalingState: repeated names"));
}

TEST(AmpAutocast, ScopeTurnsOnFp8ForAModelWithoutSetAmp) {
  Linear lin({.in = 16, .out = 16});
  const Tensor x = RandomTensor({4, 16}, 1, DType::kFloat32);
  EXPECT_EQ(lin(x).dtype(), DType::kFloat32);
  {
    amp::Autocast scope(amp::Level::kO1, {.scaling = amp::Scaling::kCurrent});
    EXPECT_EQ(lin.amp_level(), amp::Level::kO1);
    EXPECT_EQ(lin(x).dtype(), DType::kBFloat16);
    ASSERT_NE(lin.fp8_state(), nullptr);
    EXPECT_EQ(lin.fp8_state()->recipe().scaling, amp::Scaling::kCurrent);
  }
  EXPECT_EQ(lin(x).dtype(), DType::kFloat32);
  lin.SetFp8OptOut();
  amp::Autocast scope(amp::Level::kO1);
  EXPECT_EQ(lin.amp_level(), amp::Level::kO2);
}

}  // namespace
}  // namespace octet::nn
