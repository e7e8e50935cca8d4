// One GPT training step (forward, loss, backward, AdamW) at O0 / O1 / O2.
//
//   OMP_NUM_THREADS=2 octet_train_step_bench --benchmark_counters_tabular=true \
//       --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
//
// The step: ZeroGrad, Loss, Backward, AdamW Step, and at O1 the FP8 state's
// delayed-scaling update (nn/fp8_state.h), as examples/gpt's training loop.
// Configs (vocab 256, the byte tokenizer of examples/gpt):
//   small  4 layers, width 256, 4 heads,  T=128, B=8
//   wide   2 layers, width 768, 12 heads, T=256, B=4
// AdamW state (the `state` argument): 0 = f32 m and v, at every level; 2 =
// fp8_e4m3 m + f16 v with per-tensor scales (NOTE [adamw state dtype]), run
// at O1 only: the memory-saving configuration, 3 bytes of state per
// parameter instead of 8.
// Counters:
//   ms_per_step    wall-clock per step (the benchmark's own time is the same)
//   cpu_ms_per_step  CPU time of all threads per step: steadier than wall
//                  time on a machine shared with other work (with
//                  OMP_WAIT_POLICY=passive, so that waiting threads do not spin)
//   faults_per_step  minor page faults per step (fresh pages touched)
//   tokens/s       B·T per step over the step time
//   GFLOP/s        GPT::TrainingFlopsPerToken (6·N + 6·L·T·C) per second
//   frac_of_peak   GFLOP/s over the measured peak of the instructions the
//                  GEMMs use: FP32 FMA at O0, the CPU GEMM path's (NOTE [CPU
//                  GEMM path]) at O1/O2 (benchmarks/cpu_peak.h)
//   cpu_frac_of_peak  flops per CPU-second of all threads over the single-thread
//                  peak of the same instructions: steady on a shared machine
//   gemm_ms_per_step  time inside the CPU GEMM kernel calls (NOTE [cpu gemm
//                  timing] in ops/cpu_gemm_path.h): conversions, B packing,
//                  oneDNN's primitives; gemm_share is its fraction of the step
//   gemm_pack_ms_per_step  the B packing (and fused conversion) inside it
//   gemm_frac_of_peak  the GEMMs' own flops over their call time, over the
//                  peak above; gemm_exec_frac_of_peak the same over the
//                  primitives' time alone: what oneDNN reaches on its own
//   peak_rss_MiB   the process's peak resident set during this benchmark:
//                  reset (/proc/self/clear_refs, 5) after releasing octet's
//                  and malloc's caches at its start, read from VmHWM at its
//                  end. Memory still held by earlier benchmarks counts, so
//                  for O0-vs-O1 memory run one config per process
//                  (--benchmark_filter=.../wide/O1).
//   base_rss_MiB   the resident set at that start (libraries, earlier state)
//   peak_alloc_MiB octet's CPU caching allocator's high-water mark of large
//                  blocks in use during this benchmark (reset at its start
//                  with the RSS: ResetCpuPeakMemoryStats).
//   committed_MiB  large blocks the caching allocator holds at the end with
//                  their pages (in use or cached for reuse): resident, so
//                  part of the RSS (its address space, 1 GiB arenas, is not:
//                  NOTE [arena segments] in core/caching_allocator.h)
//   malloc_MiB     bytes malloc has handed out at the end (mallinfo2: heap
//                  chunks in use plus mmap'd blocks): octet's small tensors
//                  and the per-thread GEMM workspaces, oneDNN's buffers.
// Timings on a shared machine are noisy: compare levels only within one run
// (random interleaving and repetitions help) and read ratios.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/resource.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/cpu_peak.h"
#include <octet/core/allocator.h>
#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/optim/adamw.h>

namespace octet {
namespace {

const bool kThreadsSet = [] {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) omp_set_num_threads(2);
  return true;
}();

struct StepConfig {
  const char* name;
  int64_t n_layer, n_embd, n_head, T, B;
};
constexpr StepConfig kConfigs[] = {{"small", 4, 256, 4, 128, 8}, {"wide", 2, 768, 12, 256, 4}};
constexpr int64_t kVocab = 256;

// A value of /proc/self/status in KiB ("VmHWM", "VmRSS"), 0 if unreadable.
double StatusKiB(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::strtod(line.c_str() + key.size() + 1, nullptr);
  return 0.0;
}

// Minor page faults of the process so far (first touches of fresh pages).
long MinorFaults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

void ResetPeaks() {
  EmptyCpuCache();
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  ResetCpuPeakMemoryStats();
}

Tensor RandomTokens(int64_t B, int64_t T, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  uint64_t s = seed;
  for (int64_t& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<int64_t>((s >> 33) % kVocab);
  }
  return FromVector(v, {B, T});
}

void BM_TrainStep(benchmark::State& state) {
  const StepConfig& c = kConfigs[state.range(0)];
  const auto level = static_cast<nn::amp::Level>(state.range(1));
  const auto state_dtype = static_cast<optim::StateDType>(state.range(2));
  const bench::PeakKind kind =
      level == nn::amp::Level::kO0 ? bench::PeakKind::kFp32Fma : bench::LowPrecisionPeakKind();
  const double peak = bench::BestPeak(kind);
  ResetPeaks();
  const double base_rss = StatusKiB("VmRSS") / 1024.0;
  {
    nn::GPT model({.n_layer = c.n_layer,
                   .n_head = c.n_head,
                   .n_embd = c.n_embd,
                   .block_size = c.T,
                   .vocab_size = kVocab,
                   .seed = 1});
    model.SetAmp(level);
    model.Train();
    optim::AdamW opt(model.NamedParameters(), {.lr = 1e-4, .state_dtype = state_dtype});
    // The O1 step as examples/gpt runs it and nn/fp8_state.h prescribes: one
    // delayed-scaling update after each optimizer step. (Without it every
    // quantization falls back to current scaling, an extra amax pass each,
    // and the LayerNorm / GELU -> FP8 fusions, which need a delayed scale,
    // stay off.) A no-op at O0 and O2, which have no FP8 slots.
    nn::amp::Fp8State fp8(model);
    const Tensor x = RandomTokens(c.B, c.T, 1), y = RandomTokens(c.B, c.T, 2);
    auto step = [&] {
      model.ZeroGrad();
      Tensor loss = model.Loss(x, y);
      loss.Backward();
      opt.Step();
      fp8.Update();
      return loss;
    };
    for (int i = 0; i < 2; ++i) benchmark::DoNotOptimize(step().Item());  // primitives, caches, FP8 scales
    SetCpuGemmTiming(true);  // NOTE [cpu gemm timing]: up to six clock reads per GEMM
    ResetCpuGemmTimes();
    int64_t steps = 0;
    const long faults0 = MinorFaults();
    const double cpu0 = bench::ProcessCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
      benchmark::DoNotOptimize(step().raw_data());
      ++steps;
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_sec = bench::ProcessCpuSeconds() - cpu0;
    const CpuGemmTimes gemm = GetCpuGemmTimes();
    SetCpuGemmTiming(false);
    const long faults = MinorFaults() - faults0;
    const double tokens = static_cast<double>(c.B * c.T);
    const double flops = static_cast<double>(model.TrainingFlopsPerToken(c.T)) * tokens;
    const double per_step = sec / static_cast<double>(steps);
    state.counters["ms_per_step"] = 1e3 * per_step;
    state.counters["cpu_ms_per_step"] = 1e3 * cpu_sec / static_cast<double>(steps);
    state.counters["faults_per_step"] = static_cast<double>(faults) / static_cast<double>(steps);
    state.counters["tokens/s"] = tokens / per_step;
    state.counters["GFLOP/s"] = flops / per_step * 1e-9;
    state.counters["frac_of_peak"] = flops / per_step / peak;
    state.counters["cpu_frac_of_peak"] = flops * static_cast<double>(steps) / cpu_sec / bench::ThreadPeak(kind);
    state.counters["gemm_ms_per_step"] = 1e3 * gemm.seconds / static_cast<double>(steps);
    state.counters["gemm_share"] = gemm.seconds / sec;
    state.counters["gemm_pack_ms_per_step"] = 1e3 * gemm.pack_seconds / static_cast<double>(steps);
    state.counters["gemm_frac_of_peak"] = gemm.seconds > 0 ? gemm.flops / gemm.seconds / peak : 0.0;
    state.counters["gemm_exec_frac_of_peak"] =
        gemm.execute_seconds > 0 ? gemm.flops / gemm.execute_seconds / peak : 0.0;
  }
  state.counters["peak_rss_MiB"] = StatusKiB("VmHWM") / 1024.0;
  state.counters["base_rss_MiB"] = base_rss;
  const CpuMemoryStats mem = GetCpuMemoryStats();
  state.counters["peak_alloc_MiB"] = static_cast<double>(mem.peak_cached_allocated_bytes) / (1 << 20);
  state.counters["committed_MiB"] = static_cast<double>(mem.cached_committed_bytes) / (1 << 20);
  const struct mallinfo2 mi = mallinfo2();
  state.counters["malloc_MiB"] = static_cast<double>(mi.uordblks + mi.hblkhd) / (1 << 20);
  state.SetLabel(std::string(c.name) + " " + nn::amp::Name(level) +
                 (level == nn::amp::Level::kO0 ? "" : std::string(" gemm=") + Name(ActiveCpuGemmPath())) +
                 " state=" + optim::Name(state_dtype));
}

void Configs(benchmark::internal::Benchmark* b) {
  constexpr auto kFp32 = static_cast<int64_t>(optim::StateDType::kFloat32);
  constexpr auto kFp8 = static_cast<int64_t>(optim::StateDType::kFp8Fp16);
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t level = 0; level < 3; ++level) b->Args({c, level, kFp32});
    b->Args({c, 1, kFp8});  // O1 with MS-AMP-style optimizer state
  }
  b->ArgNames({"config", "amp", "state"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
}
BENCHMARK(BM_TrainStep)->Name("TrainStep")->Apply(Configs);

}  // namespace
}  // namespace octet
