// CPU GEMM throughput next to the machine's measured peak, in one run.
//
//   OMP_NUM_THREADS=2 octet_matmul_bench --benchmark_counters_tabular=true
//
// Peak microbenchmarks (both threads, via OpenMP):
//   Peak/fp32_fma   AVX-512 _mm512_fmadd_ps on 16 independent accumulators per
//                   thread: 32 flop per instruction.
//   Peak/bf16_dot   AVX-512 BF16 _mm512_dpbf16_ps (VDPBF16PS) on 16
//                   independent accumulators: 64 flop per instruction.
// GEMMs, (M, N, K) = (1024,768,768), (1024,3072,768), (1024,768,3072),
// (2048,2048,2048), a (M,K) · b (K,N), both row-major:
//   Matmul/f32      Matmul on float32 (oneDNN)
//   Matmul/bf16     Matmul on bfloat16 (oneDNN, f32 accumulation, bf16 out)
//   Matmul/fp8      ScaledMatmul E4M3 x E4M3 -> bf16, conversion FP8 -> BF16
//                   included in every iteration
//   Linear/bf16, Linear/fp8   the same with b = Wᵀ, a column-major view of a
//                   weight W (N, K): the layout of a Linear layer's forward GEMM
// cpu_frac_of_peak: flops per CPU-second of all threads over the single-thread
// peak (steady on a shared machine; run with OMP_WAIT_POLICY=passive).
// Counters: GFLOP/s (2·M·N·K per GEMM, wall-clock) and frac_of_peak, the
// GEMM rate over the relevant peak (FP32 FMA for f32; for bf16 and fp8 the
// peak of the path in use, NOTE [CPU GEMM path]). */fp32fma and */bf16dot
// force a path. The machine is shared, so the peak is re-measured briefly before
// every GEMM benchmark and the highest peak seen so far is used: the
// fraction is never flattered by a peak measured in a noisy moment.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/cpu_peak.h"
#include <octet/core/tensor.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul.h>
#include <octet/ops/cpu/gemm_pack.h>

namespace octet {
namespace {

using bench::BestPeak;
using bench::MeasurePeak;
using bench::PeakKind;

// Two threads unless the caller chose otherwise with OMP_NUM_THREADS.
const bool kThreadsSet = [] {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) omp_set_num_threads(2);
  return true;
}();

void BM_Peak(benchmark::State& state) {
  const PeakKind kind = static_cast<PeakKind>(state.range(0));
  double rate = 0.0;
  for (auto _ : state) rate = std::max(rate, MeasurePeak(kind, 10'000'000));
  state.counters["GFLOP/s"] = std::max(rate, BestPeak(kind)) * 1e-9;
  state.counters["threads"] = omp_get_max_threads();
  state.SetLabel(bench::Name(kind));
}
BENCHMARK(BM_Peak)->Name("Peak/fp32_fma")->Arg(0)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Peak)->Name("Peak/bf16_dot")->Arg(1)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Peak)->Name("Peak/amx_bf16")->Arg(2)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);

enum class GemmKind { kF32 = 0, kBf16 = 1, kFp8 = 2, kBf16Linear = 3, kFp8Linear = 4 };

void BM_Matmul(benchmark::State& state) {
  const GemmKind kind = static_cast<GemmKind>(state.range(0));
  const int64_t M = state.range(1), N = state.range(2), K = state.range(3);
  // path 0: as chosen for this CPU; 1: BF16 dot products; 2: FP32 FMAs (NOTE [CPU GEMM path]).
  const int64_t path = state.range(4);
  internal::SetCpuGemmPathForTesting(path == 0 ? std::nullopt
                                               : std::optional<CpuGemmPath>(path == 1 ? CpuGemmPath::kBf16Dot
                                                                                      : CpuGemmPath::kFp32Fma));
  const PeakKind peak_kind = kind == GemmKind::kF32 ? PeakKind::kFp32Fma : bench::LowPrecisionPeakKind();
  const double peak = BestPeak(peak_kind);
  const bool linear = kind == GemmKind::kBf16Linear || kind == GemmKind::kFp8Linear;
  const Tensor a32 = Full({M, K}, 0.0), b32 = linear ? Full({N, K}, 0.0) : Full({K, N}, 0.0);
  // Values in [-1, 1): an arbitrary but fixed pattern (GEMM speed does not depend on values).
  {
    float* pa = a32.data<float>();
    float* pb = b32.data<float>();
    for (int64_t i = 0; i < M * K; ++i) pa[i] = static_cast<float>((i * 7919 % 2001) - 1000) * 1e-3f;
    for (int64_t i = 0; i < K * N; ++i) pb[i] = static_cast<float>((i * 104729 % 2001) - 1000) * 1e-3f;
  }
  Tensor a, b;
  switch (kind) {
    case GemmKind::kF32: a = a32; b = b32; break;
    case GemmKind::kBf16:
    case GemmKind::kBf16Linear: a = a32.To(DType::kBFloat16); b = b32.To(DType::kBFloat16); break;
    case GemmKind::kFp8:
    case GemmKind::kFp8Linear:
      a = Quantize(a32, DType::kFloat8E4M3, 448.0f);
      b = Quantize(b32, DType::kFloat8E4M3, 448.0f);
      break;
  }
  if (linear) b = b.T();  // (K, N) view of a Linear weight (N, K): column-major
  auto run = [&] {
    return IsFp8(a.dtype()) ? ScaledMatmul(a, b, DType::kBFloat16) : Matmul(a, b);
  };
  benchmark::DoNotOptimize(run());  // warm-up: primitive creation, page faults
  int64_t gemms = 0;
  const double cpu0 = bench::ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Tensor c = run();
    benchmark::DoNotOptimize(c.raw_data());
    ++gemms;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_sec = bench::ProcessCpuSeconds() - cpu0;
  const double flops = 2.0 * M * N * K * gemms / sec;
  state.counters["GFLOP/s"] = flops * 1e-9;
  state.counters["peak_GFLOP/s"] = peak * 1e-9;
  state.counters["frac_of_peak"] = flops / peak;
  // The same per CPU-second of all threads, against the per-thread peak: what
  // the kernels achieve while they run, whatever else shares the machine.
  state.counters["cpu_frac_of_peak"] = 2.0 * M * N * K * gemms / cpu_sec / bench::ThreadPeak(peak_kind);
  static const char* const kLabels[] = {"f32", "bf16", "fp8_e4m3xe4m3", "bf16 b=Wt", "fp8_e4m3xe4m3 b=Wt"};
  state.SetLabel(std::string(kLabels[static_cast<int>(kind)]) +
                 (kind == GemmKind::kF32 ? "" : std::string(" path=") + Name(ActiveCpuGemmPath())));
  internal::SetCpuGemmPathForTesting(std::nullopt);
}

void GemmShapes(benchmark::internal::Benchmark* b, GemmKind kind, int64_t path = 0) {
  for (const auto& s : {std::array<int64_t, 3>{1024, 768, 768}, std::array<int64_t, 3>{1024, 3072, 768},
                        std::array<int64_t, 3>{1024, 768, 3072}, std::array<int64_t, 3>{2048, 2048, 2048}})
    b->Args({static_cast<int64_t>(kind), s[0], s[1], s[2], path});
  b->ArgNames({"dtype", "M", "N", "K", "path"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
}
BENCHMARK(BM_Matmul)->Name("Matmul/f32")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kF32); });
BENCHMARK(BM_Matmul)->Name("Matmul/bf16")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kBf16); });
BENCHMARK(BM_Matmul)->Name("Matmul/fp8")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kFp8); });
// The Linear layout (y = x·Wᵀ, W stored (N, K)): b is a column-major view.
BENCHMARK(BM_Matmul)->Name("Linear/bf16")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kBf16Linear); });
BENCHMARK(BM_Matmul)->Name("Linear/fp8")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kFp8Linear); });
// The other path forced (path 1: BF16 dot products, 2: FP32 FMAs on widened operands).
BENCHMARK(BM_Matmul)->Name("Matmul/bf16/fp32fma")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kBf16, 2); });
BENCHMARK(BM_Matmul)->Name("Matmul/fp8/fp32fma")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kFp8, 2); });
BENCHMARK(BM_Matmul)->Name("Linear/fp8/fp32fma")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kFp8Linear, 2); });
BENCHMARK(BM_Matmul)->Name("Matmul/bf16/bf16dot")->Apply([](benchmark::internal::Benchmark* b) { GemmShapes(b, GemmKind::kBf16, 1); });

}  // namespace
}  // namespace octet

namespace octet {
namespace {

// Packing alone (ops/cpu/gemm_pack.h): a 768 x 3072 B (K x N) into oneDNN's
// blocked layouts, bf16 VNNI BA16a64b2a (from bf16, fp8_e4m3 or f32) and f32
// BA16a64b, row-major (a Linear's dgrad B) or column-major (its forward B =
// W^T). Reports GB/s of the bytes read plus written. cold:1 packs a
// different copy of B each time, from a set of copies larger than any
// last-level cache: as in a training step, where B (a weight, an activation)
// was last touched long before and comes from memory; cold:0 packs the same
// B again and again, from the cache.
void BM_PackB(benchmark::State& state) {
  const int64_t K = 768, N = 3072;
  const bool col_major = state.range(0) == 1;
  const bool cold = state.range(2) == 1;
  // dtype 0: bf16 -> VNNI, 1: fp8_e4m3 -> VNNI, 2: f32 -> f32 blocked, 3: bf16 -> f32 blocked (the fp32-FMA
  // path), 4: f32 -> VNNI (an O2 master weight, NOTE [narrowed B]), 5: f32 rounded to bf16 values -> f32
  // blocked (the same on the fp32-FMA path)
  const DType dtype = state.range(1) == 0 || state.range(1) == 3 ? DType::kBFloat16
                      : state.range(1) == 1                      ? DType::kFloat8E4M3
                                                                 : DType::kFloat32;
  const bool to_f32 = state.range(1) == 2 || state.range(1) == 3 || state.range(1) == 5;
  const bool round = state.range(1) == 5;
  const int64_t esz = SizeOf(dtype), out_esz = to_f32 ? 4 : 2, kb = to_f32 ? 16 : 32;
  const size_t bytes = static_cast<size_t>(K * N * esz);
  const size_t copies = cold ? (size_t{256} << 20) / bytes + 1 : 1;
  std::vector<uint8_t> src(bytes * copies);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i % bytes * 37) % 97);  // finite values
  const cpu::PackedBLayout layout{.k_padded = K, .k_block = kb, .n_padded = N, .n_block = 64,
                                  .stride_kb = kb * 64, .stride_nb = K * 64};
  std::vector<float> dst(static_cast<size_t>(cpu::PackedElements(layout)));
  const int64_t sk = col_major ? 1 : N, sn = col_major ? K : 1;
  size_t next = 0;
  for (auto _ : state) {
    const uint8_t* b = src.data() + next * bytes;
    next = (next + 1) % copies;
    if (to_f32) {
      cpu::PackF32B(b, dtype, K, N, sk, sn, layout, dst.data(), round);
    } else {
      cpu::PackVnniB(b, dtype, K, N, sk, sn, layout, reinterpret_cast<uint16_t*>(dst.data()));
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * K * N * (esz + out_esz));
  state.SetLabel(std::string(Name(dtype)) + (round ? " rounded" : "") + (to_f32 ? " -> f32" : " -> bf16 vnni") +
                 (col_major ? " col-major" : " row-major") + (cold ? ", from memory" : ", from cache"));
}
BENCHMARK(BM_PackB)
    ->Name("PackB")
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5}, {0, 1}})
    ->ArgNames({"col_major", "dtype", "cold"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace octet
