// Causal attention forward + backward on cuda:0 through the public op
// (CausalAttention and autograd), at the head shapes of the H100 file's
// models: bfloat16 runs cuDNN's fused SDPA graphs, float32 octet's flash
// kernels (NOTE [attention fallback] in ops/cuda/attention_cudnn.h). The
// f32 flash-vs-unfused comparison of the kernels alone is in
// octet_attention_bench --benchmark_filter=Cuda. Without a CUDA device every
// benchmark skips (SkipWithError).
//
//   octet_cuda_attention_bench --benchmark_counters_tabular=true
//
// Shapes (B,H,T,D): (8,12,1024,64) GPT-2 size, (8,16,1024,64) medium,
// (8,16,1024,128) width 2048. Names: CudaAttention/<dtype>/B/H/T/D.
// Timing: each sample is `reps` forward+backward passes (q, k, v require
// grad; the backward gets a fixed dout), host clock up to
// octet::Synchronize(cuda:0); 3 untimed samples first (cuDNN plans).
// Counters: ms (per forward+backward, median sample), TFLOP/s (causal:
// forward 2·B·H·T²·D, backward 2.5x that, as FlashAttention counts),
// fallbacks (per call: should be 0 for bf16 with D a multiple of 8, <= 256).
// PyTorch's figure for the first shape (H100 file): 0.474 ms (cuDNN), 0.457 ms
// (flash); benchmarks/compare/torch_gpt.py --sdpa measures it again.
// OCTET_BENCH_SAMPLES=N changes the number of samples; OCTET_BENCH_DEVICE=cpu
// runs the same code on the CPU (one pass a sample), to check it on a
// machine without a GPU.
#include <benchmark/benchmark.h>

#include "benchmarks/cuda_bench_util.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <octet/core/device.h>
#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/ops/attention.h>

#if OCTET_WITH_CUDA
#include <octet/ops/cuda/attention_cuda.h>
#endif

namespace octet {
namespace {

using bench::EnvInt;
using bench::Median;
using bench::OnCpuForChecking;

constexpr std::array<std::array<int64_t, 4>, 3> kShapes = {{{8, 12, 1024, 64}, {8, 16, 1024, 64}, {8, 16, 1024, 128}}};
constexpr int kWarmupSamples = 3;
constexpr int kSamples = 20;
constexpr int kReps = 10;

int64_t Fallbacks() {
#if OCTET_WITH_CUDA
  return cuda::AttentionFallbackCount();
#else
  return 0;
#endif
}

void RunAttention(benchmark::State& state, DType dtype, const std::array<int64_t, 4>& s, Device gpu) {
  const int reps = gpu.is_cpu() ? 1 : kReps;
  const Shape shape{s[0], s[1], s[2], s[3]};
  ManualSeed(11);
  auto input = [&] {
    Tensor t = Randn(shape, 0.0, 1.0, {.device = gpu}).To(dtype);
    t.requires_grad_(true);
    return t;
  };
  Tensor q = input(), k = input(), v = input();
  const Tensor dout = Randn(shape, 0.0, 1.0, {.device = gpu}).To(dtype);
  auto pass = [&] {
    q.zero_grad();  // drops the gradients: each pass writes fresh ones
    k.zero_grad();
    v.zero_grad();
    const Tensor out = CausalAttention(q, k, v);
    out.Backward(dout);
  };
  auto sample = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) pass();
    Synchronize(gpu);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < (gpu.is_cpu() ? 1 : kWarmupSamples); ++i) sample();
  const int64_t fallbacks0 = Fallbacks();
  std::vector<double> times;
  for (auto _ : state) {
    const double sec = sample();
    state.SetIterationTime(sec);
    times.push_back(sec);
  }
  const double per_pass = Median(times) / reps;
  const double fwd_flops = 2.0 * static_cast<double>(s[0] * s[1]) * static_cast<double>(s[2] * s[2]) *
                           static_cast<double>(s[3]);  // causal: half of 4·B·H·T²·D
  state.counters["ms"] = 1e3 * per_pass;
  state.counters["TFLOP/s"] = 3.5 * fwd_flops / per_pass * 1e-12;
  state.counters["fallbacks"] =
      static_cast<double>(Fallbacks() - fallbacks0) / (static_cast<double>(times.size()) * reps);
  state.SetLabel(Name(dtype));
}

void BM_CudaAttention(benchmark::State& state, DType dtype, std::array<int64_t, 4> s) {
  const bool cpu = OnCpuForChecking();
  if (!cpu && DeviceCount(DeviceType::kCUDA) == 0) {
    state.SkipWithError(("no CUDA device: " + DeviceUnavailableReason(DeviceType::kCUDA)).c_str());
    return;
  }
  try {
    RunAttention(state, dtype, s, cpu ? kCPU : CUDA(0));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

const bool kRegistered = [] {
  const int64_t samples = EnvInt("OCTET_BENCH_SAMPLES", kSamples);
  for (const DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    for (const auto& s : kShapes) {
      const std::string name = std::string("CudaAttention/") + (dtype == DType::kBFloat16 ? "bf16" : "f32") + "/" +
                               std::to_string(s[0]) + "/" + std::to_string(s[1]) + "/" + std::to_string(s[2]) + "/" +
                               std::to_string(s[3]);
      benchmark::RegisterBenchmark(name.c_str(), BM_CudaAttention, dtype, s)
          ->Iterations(samples)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

}  // namespace
}  // namespace octet
