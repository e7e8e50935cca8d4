// NOTE [captured steps] (core/graph.h) on the CPU: a whole training step of a
// small GPT (two micro-batches, clipping, AdamW with a changing learning rate,
// the FP8 scaling update) run under CaptureEmulationForTesting — the host
// side of a graph capture followed by one replay — obeys the capture rules
// (no host read, no tensor from host values, no random draw) and ends in the
// same bits as the eager step at O0, O1 and O2, with the optimizer's step
// count and the FP8 weight caches kept right by the replay hooks.
#include <gtest/gtest.h>

#include <vector>

#include <octet/core/graph.h>
#include <octet/core/graph_internal.h>
#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/ops/index_check.h>
#include <octet/ops/pointwise.h>
#include <octet/optim/adamw.h>
#include <octet/optim/clip.h>

#include "tests/test_util.h"

namespace octet::nn {
namespace {

constexpr int kSteps = 4, kAccum = 2;

Tensor Ids(int step, int micro, int offset) {
  std::vector<int64_t> ids(2 * 8);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + step * 5 + micro * 3 + offset) % 23);
  return FromVector(ids, {2, 8});
}

struct RunLog {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<double>> params;
  int64_t opt_steps = 0;
  double eval_loss = 0.0;
};

// captured: every step after the first runs under the capture emulation, on
// static input buffers filled before it (as train_gpt --cuda_graph does).
RunLog Train(amp::Level level, optim::StateDType state, bool captured) {
  SetDeferredIndexChecks(true);
  GPT model({.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = 23, .seed = 11});
  model.SetAmp(level);
  amp::Fp8State fp8(model);
  optim::AdamW opt(model.NamedParameters(), {.lr = 1e-2, .state_dtype = state});
  model.Train();
  Tensor x = Zeros({kAccum, 2, 8}, {.dtype = DType::kInt64}), y = Zeros({kAccum, 2, 8}, {.dtype = DType::kInt64});
  std::vector<Tensor> loss_sums, norms;
  RunLog run;
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < kAccum; ++m) {
      x.Select(0, m).CopyFrom_(Ids(s, m, 0));
      y.Select(0, m).CopyFrom_(Ids(s, m, 1));
    }
    opt.set_lr(1e-2 * (1.0 + 0.5 * s));  // a schedule: the captured step must see each value
    auto step = [&] {
      model.ZeroGrad();
      Tensor loss_sum;
      for (int m = 0; m < kAccum; ++m) {
        Tensor loss = model.Loss(x.Select(0, m), y.Select(0, m));
        const Tensor l64 = loss.detach().To(DType::kFloat64);
        loss_sum = m == 0 ? l64 : Add(loss_sum, l64);
        MulScalar(loss, 1.0 / kAccum).Backward();
      }
      norms.push_back(optim::ClipGradNormTensor(model.NamedParameters(), 0.5));
      loss_sums.push_back(loss_sum);
      opt.Step();
      fp8.Update();
    };
    if (captured && s > 0) {
      internal::CaptureEmulationForTesting capture;
      EXPECT_TRUE(IsCapturing());
      step();
    } else {
      step();
    }
  }
  ThrowIfDeferredIndexCheckFailed();
  SetDeferredIndexChecks(false);
  for (size_t i = 0; i < loss_sums.size(); ++i) {
    run.losses.push_back(loss_sums[i].Item());
    run.grad_norms.push_back(norms[i].Item());
  }
  for (const auto& [name, p] : model.NamedParameters()) run.params.push_back(p.ToDoubles());
  run.opt_steps = opt.step_count();
  // An eager evaluation after the captured steps must see the updated weights
  // (at O1 through the FP8 weight cache, keyed on the weights' versions).
  {
    NoGradGuard no_grad;
    model.Eval();
    run.eval_loss = model.Loss(Ids(9, 0, 0), Ids(9, 0, 1)).Item();
  }
  return run;
}

TEST(CapturedStep, MatchesTheEagerStepBitForBitAtEveryAmpLevel) {
  struct Case {
    amp::Level level;
    optim::StateDType state;
  };
  for (const Case& c : {Case{amp::Level::kO0, optim::StateDType::kFloat32},
                        Case{amp::Level::kO1, optim::StateDType::kFloat32},
                        Case{amp::Level::kO1, optim::StateDType::kFp8Fp16},
                        Case{amp::Level::kO2, optim::StateDType::kBFloat16}}) {
    SCOPED_TRACE(std::string(amp::Name(c.level)) + " state " + optim::Name(c.state));
    const RunLog eager = Train(c.level, c.state, /*captured=*/false);
    const RunLog captured = Train(c.level, c.state, /*captured=*/true);
    EXPECT_EQ(captured.opt_steps, kSteps);
    EXPECT_EQ(captured.losses, eager.losses);
    EXPECT_EQ(captured.grad_norms, eager.grad_norms);
    EXPECT_EQ(captured.params, eager.params);
    EXPECT_EQ(captured.eval_loss, eager.eval_loss);
    EXPECT_GT(eager.grad_norms[0], 0.5) << "the test should clip";
    EXPECT_NE(eager.losses[kSteps - 1], eager.losses[0]) << "the test should train";
  }
}

TEST(CapturedStep, AnOptimizerWithoutParametersStillCountsItsSteps) {
  optim::AdamW opt({}, {});
  for (int i = 0; i < 2; ++i) {
    internal::CaptureEmulationForTesting capture;
    opt.Step();
    EXPECT_EQ(opt.step_count(), i) << "counted at capture";
  }
  EXPECT_EQ(opt.step_count(), 2);
}

// The error model.Loss(x, y) throws under an emulated capture, with the
// index checks deferred or immediate (immediate again afterwards).
std::string CapturedLossError(GPT& model, const Tensor& x, const Tensor& y, bool deferred_checks) {
  SetDeferredIndexChecks(deferred_checks);
  const std::string msg = testing::ErrorOf([&] {
    internal::CaptureEmulationForTesting capture;
    (void)model.Loss(x, y);
  });
  SetDeferredIndexChecks(false);
  return msg;
}

TEST(CapturedStep, AStepThatWasNeverWarmedUpIsRefused) {
  // The first forward makes the position ids from host values: it belongs
  // before the capture (NOTE [captured steps]: capture a warmed-up step).
  GPT model({.n_layer = 1, .n_head = 1, .n_embd = 8, .block_size = 8, .vocab_size = 23, .seed = 1});
  const Tensor x = Ids(0, 0, 0), y = Ids(0, 0, 1);
  const std::string msg = CapturedLossError(model, x, y, /*deferred_checks=*/true);
  EXPECT_NE(msg.find("making a tensor from host values"), std::string::npos) << msg;
  EXPECT_NE(msg.find("captured graph"), std::string::npos) << msg;
}

TEST(CapturedStep, ImmediateIndexChecksAreRefused) {
  GPT model({.n_layer = 1, .n_head = 1, .n_embd = 8, .block_size = 8, .vocab_size = 23, .seed = 1});
  const Tensor x = Ids(0, 0, 0), y = Ids(0, 0, 1);
  (void)model.Loss(x, y);  // warm-up
  const std::string msg = CapturedLossError(model, x, y, /*deferred_checks=*/false);
  EXPECT_NE(msg.find("SetDeferredIndexChecks(true)"), std::string::npos) << msg;
}

TEST(CapturedStep, DropoutIsRefused) {
  GPT model({.n_layer = 1, .n_head = 1, .n_embd = 8, .block_size = 8, .vocab_size = 23, .dropout = 0.1, .seed = 1});
  model.Train();
  const Tensor x = Ids(0, 0, 0), y = Ids(0, 0, 1);
  (void)model.Loss(x, y);
  const std::string msg = CapturedLossError(model, x, y, /*deferred_checks=*/true);
  EXPECT_NE(msg.find("dropout inside a captured graph"), std::string::npos) << msg;
}

}  // namespace
}  // namespace octet::nn
