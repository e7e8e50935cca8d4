// The machine's measured arithmetic peaks, for the benchmarks' frac_of_peak
// counters (header-only; benchmarks/*_bench.cc include it).
//
//   Fp32FmaRate  FP32 FMAs on 16 independent accumulators per thread
//   Bf16DotRate  VDPBF16PS on 16 independent accumulators per thread
// the library's own micro-benchmarks (ops/cpu_gemm_path.h), run on every
// OpenMP thread at once and summed. The machine is shared, so
// BestPeak re-measures briefly each time and returns the highest rate seen so
// far: a fraction of peak is never flattered by a peak measured in a noisy
// moment.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <ctime>

#include <octet/ops/cpu_gemm_path.h>

namespace octet::bench {

// Sum over the OpenMP threads of `rate(iters)`, every thread at once (flop/s).
inline double OnEveryThread(double (*rate)(int64_t), int64_t iters) {
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  total += rate(iters);
  return total;
}
inline double Fp32FmaRate(int64_t iters) { return OnEveryThread(&internal::Fp32FmaRate, iters); }
inline double Bf16DotRate(int64_t iters) { return OnEveryThread(&internal::Bf16DotRate, iters); }

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
