// octet::Graph on a GPU (core/graph.h, NOTE [captured steps]; NOTE [graph
// pools] in core/caching_allocator.h):
//  - a captured sequence of ops with temporaries replays on new input values
//    (checked against the same ops run eagerly), its allocations come from
//    the graph's pool, and eager work between replays does not disturb it;
//  - a call a graph cannot hold (a host read) inside Capture throws, leaves
//    the stream usable and the graph empty;
//  - a small GPT trained at O0/O1/O2 (two micro-batches, clipping, AdamW with
//    a changing learning rate, the FP8 update) with steps 2.. replayed from a
//    graph ends in the same bits as eager training (losses, gradient norms,
//    weights, the optimizer's step count, and an eager evaluation after the
//    replays, which sees the updated FP8 weight casts) when two eager runs
//    agree bit for bit, and within a few times their spread when a library
//    kernel is not deterministic.
// Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/core/device_control.h>
#include <octet/core/graph.h>
#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/ops/index_check.h>
#include <octet/ops/pointwise.h>
#include <octet/optim/adamw.h>
#include <octet/optim/clip.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(GraphCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

const Device kGpu = CUDA(0);

Tensor Chain(const Tensor& x) {
  // Temporaries freed inside the capture and reused by later ops.
  const Tensor a = MulScalar(x, 2.0);
  const Tensor b = Add(a, x);
  return Mul(b, Add(x, a));
}

TEST(GraphCuda, ReplaysOnNewInputs) {
  OCTET_SKIP_WITHOUT_CUDA();
  Tensor x = Zeros({1000}, {.device = kGpu});
  x.CopyFrom_(Randn({1000}));
  (void)Chain(x);  // warm-up
  Graph g;
  Tensor y;
  g.Capture(kGpu, [&] { y = Chain(x); });
  EXPECT_TRUE(g.captured());
  for (int i = 0; i < 3; ++i) {
    const Tensor host = Randn({1000});
    x.CopyFrom_(host);
    g.Replay();
    // Eager work between replays allocates normally and cannot touch y.
    const Tensor eager = Chain(host.To(kGpu));
    EXPECT_EQ(y.ToDoubles(), eager.ToDoubles()) << "replay " << i;
  }
  EXPECT_EQ(g.replays(), 3);
}

TEST(GraphCuda, AHostReadInsideCaptureThrowsAndLeavesTheStreamUsable) {
  OCTET_SKIP_WITHOUT_CUDA();
  Tensor x = Full({4}, 1.0, {.device = kGpu});
  Graph g;
  const std::string msg = testing::ErrorOf([&] { g.Capture(kGpu, [&] { (void)Add(x, x).Narrow(0, 0, 1).Item(); }); });
  EXPECT_NE(msg.find("inside a captured graph"), std::string::npos) << msg;
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(IsCapturing());
  EXPECT_EQ(Add(x, x).ToDoubles(), (std::vector<double>{2, 2, 2, 2}));
  // The graph can still capture.
  Tensor y;
  g.Capture(kGpu, [&] { y = Add(x, x); });
  g.Replay();
  EXPECT_EQ(y.ToDoubles(), (std::vector<double>{2, 2, 2, 2}));
}

Tensor Ids(int step, int micro, int offset) {
  std::vector<int64_t> ids(4 * 16);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>((i * 7 + step * 5 + micro * 3 + offset) % 61);
  return FromVector(ids, {4, 16});
}

struct RunLog {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<double>> params;
  int64_t opt_steps = 0;
  double eval_loss = 0.0;
};

RunLog Train(nn::amp::Level level, bool graph) {
  constexpr int kSteps = 5, kAccum = 2;
  SetDeferredIndexChecks(true);
  nn::GPT model({.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 16, .vocab_size = 61, .seed = 5});
  model.To(kGpu);
  model.SetAmp(level);
  nn::amp::Fp8State fp8(model);
  optim::AdamW opt(model.NamedParameters(), {.lr = 3e-3});
  model.Train();
  Tensor x = Zeros({kAccum, 4, 16}, {.dtype = DType::kInt64, .device = kGpu});
  Tensor y = Zeros({kAccum, 4, 16}, {.dtype = DType::kInt64, .device = kGpu});
  Tensor loss_sum, norm;
  auto step = [&] {
    model.ZeroGrad();
    for (int m = 0; m < kAccum; ++m) {
      Tensor loss = model.Loss(x.Select(0, m), y.Select(0, m));
      const Tensor l64 = loss.detach().To(DType::kFloat64);
      loss_sum = m == 0 ? l64 : Add(loss_sum, l64);
      MulScalar(loss, 1.0 / kAccum).Backward();
    }
    norm = optim::ClipGradNormTensor(model.NamedParameters(), 0.5);
    opt.Step();
    fp8.Update();
  };
  Graph g;
  std::vector<Tensor> sums, norms;
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < kAccum; ++m) {
      x.Select(0, m).CopyFrom_(Ids(s, m, 0));
      y.Select(0, m).CopyFrom_(Ids(s, m, 1));
    }
    opt.set_lr(3e-3 * (1.0 + 0.25 * s));
    if (!graph || s == 0) {
      step();
    } else {
      if (!g.captured()) g.Capture(kGpu, step);
      g.Replay();
    }
    sums.push_back(loss_sum.Clone());
    norms.push_back(norm.Clone());
  }
  ThrowIfDeferredIndexCheckFailed();
  SetDeferredIndexChecks(false);
  RunLog run;
  for (size_t i = 0; i < sums.size(); ++i) {
    run.losses.push_back(sums[i].Item());
    run.grad_norms.push_back(norms[i].Item());
  }
  for (const auto& [name, p] : model.NamedParameters()) run.params.push_back(p.ToDoubles());
  run.opt_steps = opt.step_count();
  NoGradGuard no_grad;
  model.Eval();
  run.eval_loss = model.Loss(Ids(9, 0, 0).To(kGpu), Ids(9, 0, 1).To(kGpu)).Item();
  return run;
}

// The largest |a[i] - b[i]| over two runs' values.
double MaxDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(GraphCuda, ReplayedGptStepsMatchEagerOnes) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (nn::amp::Level level : {nn::amp::Level::kO0, nn::amp::Level::kO1, nn::amp::Level::kO2}) {
    SCOPED_TRACE(nn::amp::Name(level));
    const RunLog eager = Train(level, /*graph=*/false);
    const RunLog again = Train(level, /*graph=*/false);
    const RunLog graph = Train(level, /*graph=*/true);
    EXPECT_EQ(graph.opt_steps, eager.opt_steps);
    EXPECT_NE(eager.losses.back(), eager.losses.front()) << "the test should train";
    if (again.losses == eager.losses && again.params == eager.params) {
      // Deterministic kernels: a replay runs the very same ones on the same data.
      EXPECT_EQ(graph.losses, eager.losses);
      EXPECT_EQ(graph.grad_norms, eager.grad_norms);
      EXPECT_EQ(graph.params, eager.params);
      EXPECT_EQ(graph.eval_loss, eager.eval_loss);
    } else {
      // Some library kernel (e.g. a cuDNN attention backward with atomics) is
      // not run-to-run deterministic here: the replay must stay within a few
      // times the spread of two eager runs.
      const double spread = MaxDiff(again.losses, eager.losses);
      std::printf("note: two eager %s runs differ by up to %.3g in the loss\n", nn::amp::Name(level), spread);
      EXPECT_LE(MaxDiff(graph.losses, eager.losses), 4 * spread + 1e-6);
      EXPECT_LE(MaxDiff(graph.grad_norms, eager.grad_norms), 4 * MaxDiff(again.grad_norms, eager.grad_norms) + 1e-6);
      EXPECT_NEAR(graph.eval_loss, eager.eval_loss, 4 * std::abs(again.eval_loss - eager.eval_loss) + 1e-6);
    }
  }
}

#endif

}  // namespace
}  // namespace octet
