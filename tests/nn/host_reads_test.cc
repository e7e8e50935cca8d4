// NOTE [host reads] (core/host_reads.h): a whole training step of a small
// GPT — forward, backward over two micro-batches, clipping, AdamW and the FP8
// scaling update — reads nothing back to the host at O0, O1 and O2, on the
// CPU where every API read is counted; and the step that keeps its loss and
// gradient norm on the device ends in the same bits as the step that reads
// them at once (Item, ClipGradNorm).
#include <gtest/gtest.h>

#include <vector>

#include <octet/core/host_reads.h>
#include <octet/nn/amp.h>
#include <octet/nn/gpt.h>
#include <octet/ops/index_check.h>
#include <octet/ops/pointwise.h>
#include <octet/optim/adamw.h>
#include <octet/optim/clip.h>

namespace octet::nn {
namespace {

constexpr int kSteps = 3, kAccum = 2;

struct RunLog {
  std::vector<double> losses, grad_norms;
  NamedTensors params;
  int64_t reads_in_steps = 0;
};

Tensor Batch(int step, int micro, int offset) {
  std::vector<int64_t> ids(2 * 8);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + step * 5 + micro * 3 + offset) % 23);
  return FromVector(ids, {2, 8});
}

// deferred: the train_gpt way (deferred index checks, device loss sum,
// ClipGradNormTensor, reads only after the steps); otherwise immediate index
// checks, a read per micro-batch and ClipGradNorm.
RunLog Train(amp::Level level, bool deferred) {
  SetDeferredIndexChecks(deferred);  // NOTE [deferred index checks]
  GPT model({.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = 23, .seed = 11});
  model.SetAmp(level);
  amp::Fp8State fp8(model);
  optim::AdamW opt(model.NamedParameters(), {.lr = 1e-2});
  model.Train();
  RunLog run;
  std::vector<Tensor> loss_sums, norms;
  for (int s = 0; s < kSteps; ++s) {
    const int64_t before = HostReadCount();
    model.ZeroGrad();
    Tensor loss_sum;
    double host_sum = 0.0;
    for (int m = 0; m < kAccum; ++m) {
      Tensor loss = model.Loss(Batch(s, m, 0), Batch(s, m, 1));
      if (deferred) {
        const Tensor l64 = loss.detach().To(DType::kFloat64);
        loss_sum = m == 0 ? l64 : Add(loss_sum, l64);
      } else {
        host_sum += loss.Item();
      }
      MulScalar(loss, 1.0 / kAccum).Backward();
    }
    if (deferred) {
      norms.push_back(optim::ClipGradNormTensor(model.NamedParameters(), 0.5));
      loss_sums.push_back(loss_sum);
    } else {
      run.grad_norms.push_back(optim::ClipGradNorm(model.NamedParameters(), 0.5));
      run.losses.push_back(host_sum / kAccum);
    }
    opt.Step();
    fp8.Update();
    run.reads_in_steps += HostReadCount() - before;
  }
  // The log point.
  ThrowIfDeferredIndexCheckFailed();
  SetDeferredIndexChecks(false);
  for (size_t i = 0; i < loss_sums.size(); ++i) {
    run.losses.push_back(loss_sums[i].Item() / kAccum);
    run.grad_norms.push_back(norms[i].Item());
  }
  run.params = model.NamedParameters();
  return run;
}

TEST(HostReads, ATrainingStepReadsNothingAtEveryAmpLevel) {
  for (amp::Level level : {amp::Level::kO0, amp::Level::kO1, amp::Level::kO2}) {
    const RunLog deferred = Train(level, /*deferred=*/true);
    const RunLog eager = Train(level, /*deferred=*/false);
    EXPECT_EQ(deferred.reads_in_steps, 0) << amp::Name(level);
    // The counter sees the eager run's reads (one per micro-batch, at least).
    EXPECT_GE(eager.reads_in_steps, kSteps * kAccum) << amp::Name(level);
    ASSERT_EQ(deferred.losses.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(deferred.losses, eager.losses) << amp::Name(level);
    EXPECT_EQ(deferred.grad_norms, eager.grad_norms) << amp::Name(level);
    EXPECT_GT(deferred.grad_norms[0], 0.5) << "the test should clip";
    for (size_t i = 0; i < deferred.params.size(); ++i)
      EXPECT_EQ(deferred.params[i].second.ToDoubles(), eager.params[i].second.ToDoubles())
          << amp::Name(level) << " " << deferred.params[i].first;
  }
}

TEST(HostReads, TheCounterCountsApiReads) {
  const Tensor t = Full({3}, 2.0);
  const int64_t before = HostReadCount();
  (void)t.ToDoubles();
  (void)t.Narrow(0, 0, 1).Item();
  (void)t.ToFloats();
  EXPECT_EQ(HostReadCount() - before, 3);
}

}  // namespace
}  // namespace octet::nn
