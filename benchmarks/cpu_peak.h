// The machine's measured arithmetic peaks, for the benchmarks' frac_of_peak
// counters (header-only; benchmarks/*_bench.cc include it).
//
//   Fp32FmaRate  AVX-512 _mm512_fmadd_ps on 16 independent accumulators per
//                thread: 32 flop per instruction.
//   Bf16DotRate  AVX-512 BF16 _mm512_dpbf16_ps (VDPBF16PS) on 16 independent
//                accumulators: 64 flop per instruction.
// Both run on every OpenMP thread at once. The machine is shared, so
// BestPeak re-measures briefly each time and returns the highest rate seen so
// far: a fraction of peak is never flattered by a peak measured in a noisy
// moment.
#pragma once

#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>

#include "ops/cpu_gemm_path.h"

namespace octet::bench {

inline constexpr int kPeakAccumulators = 16;

// flop/s of `iters` rounds of 16 independent FMAs on every thread.
__attribute__((target("avx512f"))) inline double Fp32FmaRate(int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  float sink = 0.0f;
  int threads = 1;
#pragma omp parallel reduction(+ : sink)
  {
#pragma omp single
    threads = omp_get_num_threads();
    __m512 acc[kPeakAccumulators];
    for (int i = 0; i < kPeakAccumulators; ++i) acc[i] = _mm512_set1_ps(1e-3f * (i + omp_get_thread_num()));
    const __m512 mul = _mm512_set1_ps(0.9999f), add = _mm512_set1_ps(1e-4f);
    for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
      for (int i = 0; i < kPeakAccumulators; ++i) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
    }
    __m512 s = acc[0];
    for (int i = 1; i < kPeakAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
    sink += _mm512_reduce_add_ps(s);
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(sink);
  return threads * static_cast<double>(iters) * kPeakAccumulators * 32.0 / sec;
}

// flop/s of `iters` rounds of 16 independent VDPBF16PS on every thread
// (16 lanes x 2 products x 2 flop).
__attribute__((target("avx512f,avx512bf16"))) inline double Bf16DotRate(int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  float sink = 0.0f;
  int threads = 1;
#pragma omp parallel reduction(+ : sink)
  {
#pragma omp single
    threads = omp_get_num_threads();
    __m512 acc[kPeakAccumulators];
    for (int i = 0; i < kPeakAccumulators; ++i) acc[i] = _mm512_set1_ps(1e-3f * (i + omp_get_thread_num()));
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80);  // 1.0
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3A80);  // ~1e-3
    for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
      for (int i = 0; i < kPeakAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    __m512 s = acc[0];
    for (int i = 1; i < kPeakAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
    sink += _mm512_reduce_add_ps(s);
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(sink);
  return threads * static_cast<double>(iters) * kPeakAccumulators * 64.0 / sec;
}

enum class PeakKind { kFp32Fma = 0, kBf16Dot = 1 };

inline double MeasurePeak(PeakKind kind, int64_t iters) {
  return kind == PeakKind::kFp32Fma ? Fp32FmaRate(iters) : Bf16DotRate(iters);
}

// Highest peak measured so far (flop/s), refreshed with a short measurement.
inline double BestPeak(PeakKind kind) {
  static double best[2] = {0.0, 0.0};
  double& b = best[static_cast<int>(kind)];
  for (int r = 0; r < 3; ++r) b = std::max(b, MeasurePeak(kind, 2'000'000));  // ~20 ms each
  return b;
}

// The peak of the instructions a BF16/FP8 GEMM uses on this machine now
// (NOTE [CPU GEMM path] in ops/cpu_gemm_path.h).
// CPU time of every thread of the process, in seconds (with OMP_WAIT_POLICY=passive
// idle OpenMP threads sleep instead of spinning, so this is the work done).
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The single-thread peak (flop/s) the CPU GEMM path was chosen from
// (ops/cpu_gemm_path.h: measured on one thread for well under a millisecond,
// best of 5, so rarely disturbed by other work on the machine).
inline double ThreadPeak(PeakKind kind) {
  const CpuGemmPathInfo info = GetCpuGemmPath();
  return 1e9 * (kind == PeakKind::kFp32Fma ? info.fp32_fma_gflops : info.bf16_dot_gflops);
}

inline PeakKind LowPrecisionPeakKind() {
  return ActiveCpuGemmPath() == CpuGemmPath::kBf16Dot ? PeakKind::kBf16Dot : PeakKind::kFp32Fma;
}

}  // namespace octet::bench
