// amp O1's scaling state (nn/amp.h): an Fp8Slot's current scale from an amax
// tensor, the fused delayed-scaling update against its closed form, one
// update per optimizer step over the model's contiguous buffers, loading
// through the views, telemetry counting saturation and underflow exactly, the
// state's round trip and mismatch reports, and the autocast scope. The FP8
// Linear's arithmetic: amp_test.cc.
#include <octet/nn/amp.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include <octet/autograd/grad_mode.h>
#include <octet/core/scaling.h>
#include <octet/core/scaling_math.h>
#include <octet/nn/linear.h>
#include <octet/ops/delayed_scaling.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"
#include "tests/nn/fp8_linear_ctx.h"

namespace octet::nn {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

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

// The values LoadTrainingState rejects are rejected here too (they used to
// make every later forward NaN), naming the entry; nothing is loaded.
TEST(AmpScalingState, RejectsNonFiniteNegativeAndZeroValues) {
  Linear a({.in = 8, .out = 8});
  a.SetAmp(amp::Level::kO1);
  a(RandomTensor({4, 8}, 1, DType::kFloat32));
  const NamedTensors good = amp::ScalingState(a);
  const auto with = [&](const std::string& name, int64_t element, double value) {
    NamedTensors st;
    for (const auto& [n, t] : good) {
      Tensor c = t.Clone();
      if (n == name) c.Flatten().Slice(0, element, element + 1).Fill_(value);
      st.emplace_back(n, c);
    }
    return st;
  };
  const Tensor history_before = good[0].second.Clone();
  const std::string e = ErrorOf([&] { amp::LoadScalingState(a, with("fp8_input_amax_history", 2, NAN)); });
  EXPECT_THAT(e, HasSubstr("LoadScalingState: entry 'fp8_input_amax_history' holds nan at element 2; "
                           "FP8 scaling state must hold finite values; nothing was loaded"));
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(a, with("fp8_input_amax_history", 1, -1.0)); }),
              HasSubstr("entry 'fp8_input_amax_history' holds -1 at element 1; an amax must be >= 0"));
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(a, with("fp8_weight_scale", 0, 0.0)); }),
              HasSubstr("entry 'fp8_weight_scale' holds 0 at element 0; a scale must be > 0"));
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(a, with("fp8_weight_scale", 0, -2.0)); }),
              HasSubstr("entry 'fp8_weight_scale' holds -2 at element 0; a scale must be > 0"));
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(a, with("fp8_grad_output_scale", 0, INFINITY)); }),
              HasSubstr("entry 'fp8_grad_output_scale' holds inf at element 0"));
  EXPECT_THAT(ErrorOf([&] { amp::LoadScalingState(a, with("fp8_weight_scale", 0, 1e-45)); }),
              HasSubstr("a scale must have a finite reciprocal"));
  EXPECT_EQ(amp::ScalingState(a)[0].second.ToDoubles(), history_before.ToDoubles());
  ASSERT_NO_THROW(amp::LoadScalingState(a, good));
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
