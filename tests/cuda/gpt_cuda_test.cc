// The GPT training step end to end on a CUDA device against the same step on
// the CPU: a small GPT (head dim 16, so cuDNN attention takes bf16) at O0,
// O1 and O2 runs forward, backward, gradient clipping (NOTE [gradient norm on
// a device]) and AdamW for a few steps from identical weights and batches;
// losses, the gradient norm and the FP8 scaling state must agree within the
// precision of each level. This is the first test to run on a new GPU: it
// touches every kernel family the example uses. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <octet/core/tensor.h>
#include <octet/nn/amp.h>
#include <octet/nn/gpt.h>
#include <octet/optim/adamw.h>
#include <octet/optim/clip.h>
#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(GptCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

struct StepLog {
  std::vector<double> loss, grad_norm;
};

StepLog Train(Device device, nn::amp::Level level, int steps, const std::vector<Tensor>& inputs,
              const std::vector<Tensor>& targets, nn::NamedTensors* scaling) {
  nn::GPT model({.n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = 32, .vocab_size = 96, .seed = 7});
  model.To(device);
  model.SetAmp(level);
  nn::amp::Fp8State fp8(model);  // one fused scaling update per step (nn/fp8_state.h)
  optim::AdamW opt(model.NamedParameters(), {.lr = 1e-3});
  model.Train();
  StepLog log;
  for (int s = 0; s < steps; ++s) {
    model.ZeroGrad();
    Tensor loss = model.Loss(inputs[s].To(device), targets[s].To(device));
    log.loss.push_back(loss.Item());
    loss.Backward();
    log.grad_norm.push_back(optim::ClipGradNorm(opt.params(), 1.0));
    opt.Step();
    fp8.Update();
  }
  if (scaling != nullptr) {
    for (auto& [name, t] : nn::amp::ScalingState(model)) scaling->emplace_back(name, t.To(kCPU));
  }
  return log;
}

TEST(GptCuda, TrainingStepsMatchTheCpuAtEveryAmpLevel) {
  OCTET_SKIP_WITHOUT_CUDA();
  constexpr int kSteps = 4;
  std::vector<Tensor> inputs, targets;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<int64_t> ids(4 * 33);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37 + s * 11 + i / 7) % 96);
    const Tensor all = FromVector(ids, {4, 33});
    inputs.push_back(all.Narrow(1, 0, 32).Contiguous());
    targets.push_back(all.Narrow(1, 1, 32).Contiguous());
  }
  for (nn::amp::Level level : {nn::amp::Level::kO0, nn::amp::Level::kO1, nn::amp::Level::kO2}) {
    nn::NamedTensors scaling_cpu, scaling_gpu;
    const StepLog cpu = Train(kCPU, level, kSteps, inputs, targets, &scaling_cpu);
    const StepLog gpu = Train(CUDA(0), level, kSteps, inputs, targets, &scaling_gpu);
    // O0 differs only in summation order; O1/O2 round activations to bf16 and
    // the GEMM libraries accumulate in different orders.
    const double tol = level == nn::amp::Level::kO0 ? 1e-4 : 2e-2;
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(gpu.loss[s], cpu.loss[s], tol * std::fabs(cpu.loss[s])) << nn::amp::Name(level) << " step " << s;
      EXPECT_NEAR(gpu.grad_norm[s], cpu.grad_norm[s], 5 * tol * cpu.grad_norm[s])
          << nn::amp::Name(level) << " step " << s;
    }
    // O1's amaxes are maxima over FP8-rounded gradients: a perturbation far
    // below one bf16 rounding moves them by several percent in 4 steps. Measured
    // on the CPU (2026-11-23): parameters scaled by 1 +- 2^-12 moved the
    // grad-output and input scales by up to 2.4 %, by 1 +- 2^-9 up to 4.9 % and
    // 6.5 %; the H100 differed from the CPU by 5-6 %. So 15 %: legitimate
    // divergence passes, a wrong amax (a factor of 2, a wrong tensor) does not.
    const double scale_tol = level == nn::amp::Level::kO1 ? 0.15 : 5e-2;
    ASSERT_EQ(scaling_gpu.size(), scaling_cpu.size());
    for (size_t i = 0; i < scaling_cpu.size(); ++i) {
      EXPECT_TRUE(::octet::testing::AllClose(scaling_gpu[i].second, scaling_cpu[i].second.ToDoubles(), scale_tol, 0))
          << scaling_cpu[i].first;
    }
  }
}

TEST(GptCuda, GradNormOfDeviceGradientsMatchesTheCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  nn::NamedTensors cpu, gpu;
  for (int i = 0; i < 3; ++i) {
    // A gradient has its parameter's dtype (set_grad checks it): one bf16 parameter.
    const DType dt = i == 1 ? DType::kBFloat16 : DType::kFloat32;
    Tensor p = Zeros({17 + i, 5}, {.dtype = dt}).requires_grad_();
    p.set_grad(::octet::testing::RandomTensor({17 + i, 5}, 90 + i, dt));
    Tensor q = p.detach().To(CUDA(0)).requires_grad_();
    q.set_grad(p.grad().To(CUDA(0)));
    cpu.emplace_back("p" + std::to_string(i), p);
    gpu.emplace_back("p" + std::to_string(i), q);
  }
  EXPECT_NEAR(optim::GradNorm(gpu), optim::GradNorm(cpu), 1e-12 * optim::GradNorm(cpu));
  const double before = optim::ClipGradNorm(gpu, 0.5);
  EXPECT_NEAR(before, optim::ClipGradNorm(cpu, 0.5), 1e-9);
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_EQ(gpu[i].second.grad().ToDoubles(), cpu[i].second.grad().ToDoubles()) << cpu[i].first;
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
