// One GPT training step on cuda:0 at O0 / O1 / O2, as examples/gpt/train_gpt.cc
// runs it: forward, loss, backward, gradient-norm clipping (1.0), AdamW
// (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D parameters) and the FP8
// state update (nn::amp::Fp8State::Update, a no-op below O1), with deferred
// index checks and no FP8 telemetry. Without a CUDA device every benchmark
// skips (SkipWithError).
//
//   octet_cuda_train_step_bench --benchmark_counters_tabular=true
//       --benchmark_out=train_step.json --benchmark_out_format=json   (one command line)
//
// Configs (vocab 256, the byte tokenizer's, tied head, pre-LN; the model
// sizes of shared/gpu/H100-2026-11-23.md):
//   small     4 layers, width 128,  4 heads, T=128,  B=16 (train_gpt's defaults)
//   gpt2      12 layers, width 768, 12 heads, T=1024, B=8 (86M parameters)
//   medium    24 layers, width 1024, 16 heads, T=1024, B=8
//   w2048     12 layers, width 2048, 16 heads, T=1024, B=8
//   gpt2_2l   2 layers, width 768, 12 heads, T=1024, B=8 (the profiled model)
// Benchmark names: CudaTrainStep/<config>/<O0|O1|O2>, and for small and gpt2
// also CudaTrainStep/<config>/<level>/graph: the step captured once into a
// CUDA graph after the warm-up and replayed (core/graph.h, NOTE [captured
// steps]; the same work, one launch instead of one per kernel).
//
// Timing: kWarmupSteps untimed steps first (cuDNN plans, cuBLASLt heuristics,
// the allocator's pools, the first FP8 scales), then a fixed number of steps,
// each timed on the host clock from its first op to octet::Synchronize(cuda:0)
// (UseManualTime). OCTET_BENCH_STEPS=N overrides the step count.
// OCTET_BENCH_DEVICE=cpu runs the same code on the CPU instead, to check it
// on a machine without a GPU, e.g.
//   OCTET_BENCH_DEVICE=cpu OCTET_BENCH_STEPS=2 octet_cuda_train_step_bench --benchmark_filter=small
// Counters:
//   ms_per_step        median step time (the benchmark's own time is the mean)
//   ms_min             fastest step
//   tokens/s           B·T over the median step
//   TFLOP/s            GPT::TrainingFlopsPerToken(T)·B·T over the median step
//   peak_alloc_MiB     octet's CUDA caching allocator: peak bytes in blocks
//                      handed out, over the warm-up and timed steps (the cache
//                      is emptied and the peak reset before the model is built)
//   peak_reserved_MiB  the same for segments held from cudaMalloc (what
//                      nvidia-smi sees, less the context)
//   gpu_used_MiB       cudaMemGetInfo's total - free after the steps: the whole
//                      device, CUDA context and library workspaces included
//   host_reads/step    octet::HostReadCount() per timed step (NOTE [host reads]:
//                      each is a device synchronisation; the goal is 0)
//   attn_fallbacks     causal-attention calls that took the unfused fallback
//                      during this benchmark (NOTE [attention fallback])
//   gemm_fallbacks     FP8 GEMMs that fell back to BF16 during this benchmark
//
// Profiling: with OCTET_PROFILE_STEPS=N every benchmark runs N timed steps
// between cudaProfilerStart and cudaProfilerStop, so that
//   OCTET_PROFILE_STEPS=2 ncu --profile-from-start off --metrics gpu__time_duration.sum
//       --print-summary per-kernel octet_cuda_train_step_bench --benchmark_filter='gpt2_2l/O1'
// (one command line) profiles exactly two steps after the warm-up
// (scripts/gpu_session.sh).
#include <benchmark/benchmark.h>

#include "benchmarks/cuda_bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <octet/core/device.h>
#include <octet/core/graph.h>
#include <octet/core/host_reads.h>
#include <octet/core/tensor.h>
#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/ops/gemm_layout.h>
#include <octet/ops/index_check.h>
#include <octet/optim/adamw.h>
#include <octet/optim/clip.h>

#if OCTET_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <octet/ops/cuda/attention_cuda.h>
#include <octet/ops/cuda/cuda_allocator.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet {
namespace {

using bench::EnvInt;
using bench::Median;
using bench::OnCpuForChecking;

struct StepConfig {
  const char* name;
  int64_t n_layer, n_embd, n_head, T, B;
  int64_t steps;  // timed steps at O1/O2 (O0 runs a third of them, at least 3)
};
constexpr StepConfig kConfigs[] = {
    {"small", 4, 128, 4, 128, 16, 200},   {"gpt2", 12, 768, 12, 1024, 8, 30},
    {"medium", 24, 1024, 16, 1024, 8, 15}, {"w2048", 12, 2048, 16, 1024, 8, 15},
    {"gpt2_2l", 2, 768, 12, 1024, 8, 30},
};
constexpr int64_t kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
constexpr int64_t kVocab = 256;
constexpr int kWarmupSteps = 3;

// Uniform byte tokens (B,T) int64 from a fixed LCG: the step's cost does not
// depend on the values.
Tensor RandomTokens(int64_t B, int64_t T, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  uint64_t s = seed;
  for (int64_t& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<int64_t>((s >> 33) % kVocab);
  }
  return FromVector(v, {B, T});
}

constexpr double kMiB = 1024.0 * 1024.0;

// The CUDA side: allocator statistics, cudaMemGetInfo, profiler range,
// attention fallbacks. No-ops on the CPU.
struct DeviceStats {
  double peak_alloc = 0, peak_reserved = 0, used = 0;
  int64_t attn_fallbacks = 0;
};
#if OCTET_WITH_CUDA
void ResetDevice(Device d) {
  if (!d.is_cuda()) return;
  Synchronize(d);
  cuda::EmptyCache();
  cuda::DeviceAllocator(d.index).ResetPeakStats();
}
int64_t AttentionFallbacks(Device d) { return d.is_cuda() ? cuda::AttentionFallbackCount() : 0; }
void ProfilerRange(Device d, bool start) {
  if (!d.is_cuda()) return;
  if (start) OCTET_CUDA_CHECK(cudaProfilerStart());
  else OCTET_CUDA_CHECK(cudaProfilerStop());
}
// cudaMemGetInfo's used bytes of the device (total - free).
double DeviceUsedBytes(Device d) {
  if (!d.is_cuda()) return 0.0;
  OCTET_CUDA_CHECK(cudaSetDevice(d.index));
  size_t free_bytes = 0, total_bytes = 0;
  OCTET_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<double>(total_bytes - free_bytes);
}
DeviceStats PeakStats(Device d) {
  DeviceStats s;
  if (!d.is_cuda()) return s;
  const CachingAllocatorStats a = cuda::MemoryStats(d.index);
  s.peak_alloc = static_cast<double>(a.peak_allocated_bytes);
  s.peak_reserved = static_cast<double>(a.peak_reserved_bytes);
  cuda::EmptyCache();
  return s;
}
#else
void ResetDevice(Device) {}
int64_t AttentionFallbacks(Device) { return 0; }
void ProfilerRange(Device, bool) {}
double DeviceUsedBytes(Device) { return 0.0; }
DeviceStats PeakStats(Device) { return {}; }
#endif

void RunTrainStep(benchmark::State& state, const StepConfig& c, nn::amp::Level level, Device dev, bool graph) {
  const bool profile = EnvInt("OCTET_PROFILE_STEPS", 0) > 0;
  ResetDevice(dev);
  SetDeferredIndexChecks(true);  // as train_gpt: index checks read at log points only
  std::vector<double> step_ms;
  double used_bytes = 0.0;
  int64_t host_reads = 0;
  const int64_t attn_fallbacks0 = AttentionFallbacks(dev), gemm_fallbacks0 = GemmFallbackCount();
  double flops_per_step = 0.0;
  {
    nn::GPT model({.n_layer = c.n_layer,
                   .n_head = c.n_head,
                   .n_embd = c.n_embd,
                   .block_size = c.T,
                   .vocab_size = kVocab,
                   .tie_weights = true,
                   .seed = 1337});
    model.To(dev);  // initialised on the CPU, then moved (as train_gpt)
    model.SetAmp(level, nn::amp::Recipe{});
    if (level == nn::amp::Level::kO1) nn::amp::SetTelemetry(model, false);
    nn::amp::Fp8State fp8_state(model);
    optim::AdamW opt(model.NamedParameters(),
                     {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    model.Train();
    const Tensor x = RandomTokens(c.B, c.T, 1).To(dev), y = RandomTokens(c.B, c.T, 2).To(dev);
    flops_per_step = static_cast<double>(model.TrainingFlopsPerToken(c.T)) * static_cast<double>(c.B * c.T);
    auto step = [&] {
      model.ZeroGrad();
      Tensor loss = model.Loss(x, y);
      const Tensor loss64 = loss.detach().To(DType::kFloat64);  // train_gpt keeps it for its log line
      loss.Backward();
      const Tensor norm = optim::ClipGradNormTensor(model.NamedParameters(), 1.0);
      opt.Step();
      fp8_state.Update();
      return loss64;
    };
    Tensor last_loss;
    for (int i = 0; i < kWarmupSteps; ++i) last_loss = step();
    Graph captured;
    if (graph) captured.Capture(dev, [&] { last_loss = step(); });
    Synchronize(dev);
    ThrowIfDeferredIndexCheckFailed();
    const int64_t reads0 = HostReadCount();
    if (profile) ProfilerRange(dev, true);
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      if (graph) {
        captured.Replay();
      } else {
        last_loss = step();
      }
      Synchronize(dev);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      state.SetIterationTime(sec);
      step_ms.push_back(1e3 * sec);
    }
    if (profile) ProfilerRange(dev, false);
    host_reads = HostReadCount() - reads0;
    used_bytes = DeviceUsedBytes(dev);
    ThrowIfDeferredIndexCheckFailed();
    state.SetLabel(std::string(c.name) + " " + nn::amp::Name(level) + (graph ? " graph " : " ") + ToString(dev) +
                   " loss " + std::to_string(last_loss.Item()));
  }
  const DeviceStats stats = PeakStats(dev);
  const double ms = Median(step_ms);
  state.counters["ms_per_step"] = ms;
  state.counters["ms_min"] = *std::min_element(step_ms.begin(), step_ms.end());
  state.counters["tokens/s"] = static_cast<double>(c.B * c.T) / (ms * 1e-3);
  state.counters["TFLOP/s"] = flops_per_step / (ms * 1e-3) * 1e-12;
  state.counters["peak_alloc_MiB"] = stats.peak_alloc / kMiB;
  state.counters["peak_reserved_MiB"] = stats.peak_reserved / kMiB;
  state.counters["gpu_used_MiB"] = used_bytes / kMiB;
  state.counters["host_reads/step"] = static_cast<double>(host_reads) / static_cast<double>(step_ms.size());
  state.counters["attn_fallbacks"] = static_cast<double>(AttentionFallbacks(dev) - attn_fallbacks0);
  state.counters["gemm_fallbacks"] = static_cast<double>(GemmFallbackCount() - gemm_fallbacks0);
}

void BM_CudaTrainStep(benchmark::State& state, int64_t config, int64_t amp_level, bool graph) {
  const bool cpu = OnCpuForChecking();
  if (graph && cpu) {
    state.SkipWithError("a CUDA graph needs a CUDA device (OCTET_BENCH_DEVICE=cpu)");
    return;
  }
  if (!cpu && DeviceCount(DeviceType::kCUDA) == 0) {
    state.SkipWithError(("no CUDA device: " + DeviceUnavailableReason(DeviceType::kCUDA)).c_str());
    return;
  }
  try {
    RunTrainStep(state, kConfigs[config], static_cast<nn::amp::Level>(amp_level), cpu ? kCPU : CUDA(0), graph);
  } catch (const std::exception& e) {  // e.g. out of memory: report it, go on with the next config
    state.SkipWithError(e.what());
  }
}

// Registered at static-initialisation time so that the step counts can come
// from the environment: one benchmark per (config, level), each a single run
// of a fixed number of steps (no iteration-count search: each run builds a
// model).
void RegisterAll() {
  const int64_t profile_steps = EnvInt("OCTET_PROFILE_STEPS", 0);
  const int64_t steps_override = EnvInt("OCTET_BENCH_STEPS", 0);
  for (int64_t c = 0; c < kNumConfigs; ++c) {
    for (int64_t level = 0; level < 3; ++level) {
      int64_t steps = level == 0 ? std::max<int64_t>(3, kConfigs[c].steps / 3) : kConfigs[c].steps;
      if (steps_override > 0) steps = steps_override;
      if (profile_steps > 0) steps = profile_steps;
      const std::string name = std::string("CudaTrainStep/") + kConfigs[c].name + "/" +
                               nn::amp::Name(static_cast<nn::amp::Level>(level));
      const std::string config = kConfigs[c].name;
      for (bool graph : {false, true}) {
        if (graph && config != "small" && config != "gpt2") continue;
        benchmark::RegisterBenchmark((graph ? name + "/graph" : name).c_str(), BM_CudaTrainStep, c, level, graph)
            ->Iterations(steps)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}
const bool kRegistered = [] {
  RegisterAll();
  return true;
}();

}  // namespace
}  // namespace octet
