// The machine's measured arithmetic peaks, for the benchmarks' frac_of_peak
// counters (header-only; benchmarks/*_bench.cc include it).
//
//   Fp32FmaRate  FP32 FMAs on 16 independent accumulators per thread
//   Bf16DotRate  VDPBF16PS on 16 independent accumulators per thread
//   AmxBf16Rate  TDPBF16PS on 4 independent accumulator tiles per thread
//                (0 without AMX, or where oneDNN does not use it)
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
inline double AmxRateOfThread(int64_t iters) { return internal::AmxBf16Rate(iters); }
inline double AmxBf16Rate(int64_t iters) { return OnEveryThread(&AmxRateOfThread, iters); }

enum class PeakKind { kFp32Fma = 0, kBf16Dot = 1, kAmxBf16 = 2 };

inline const char* Name(PeakKind kind) {
  return kind == PeakKind::kFp32Fma ? "fp32_fma" : kind == PeakKind::kBf16Dot ? "bf16_dot" : "amx_bf16";
}

// `iters` counts FMA-sized rounds: one round of 4 TDPBF16PS takes ~32 times
// as long as one of 16 FMAs, so AMX runs iters / 32 of them.
inline double MeasurePeak(PeakKind kind, int64_t iters) {
  switch (kind) {
    case PeakKind::kFp32Fma: return Fp32FmaRate(iters);
    case PeakKind::kBf16Dot: return Bf16DotRate(iters);
    case PeakKind::kAmxBf16: return AmxBf16Rate(iters / 32);
  }
  return 0.0;
}

// Highest peak measured so far (flop/s), refreshed with a short measurement.
inline double BestPeak(PeakKind kind) {
  static double best[3] = {0.0, 0.0, 0.0};
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
  switch (kind) {
    case PeakKind::kFp32Fma: return 1e9 * info.fp32_fma_gflops;
    case PeakKind::kBf16Dot: return 1e9 * info.bf16_dot_gflops;
    case PeakKind::kAmxBf16: return 1e9 * info.amx_bf16_gflops;
  }
  return 0.0;
}

// The instruction the BF16/FP8 GEMMs run on: FP32 FMAs, or BF16 ones (AMX
// tiles where oneDNN uses them, else VDPBF16PS).
inline PeakKind LowPrecisionPeakKind() {
  if (ActiveCpuGemmPath() == CpuGemmPath::kFp32Fma) return PeakKind::kFp32Fma;
  return GetCpuGemmPath().amx_bf16_gflops > 0.0 ? PeakKind::kAmxBf16 : PeakKind::kBf16Dot;
}

}  // namespace octet::bench
