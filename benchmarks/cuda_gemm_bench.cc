// GEMM throughput on cuda:0 through octet's public Matmul / ScaledMatmul, at
// the shapes of shared/gpu/H100-2026-11-23.md (the GEMMs of a GPT-2-size
// Linear at 8192 tokens, and two squares). Without a CUDA device every
// benchmark skips (SkipWithError).
//
//   octet_cuda_gemm_bench --benchmark_counters_tabular=true
//
// (M, N, K): (8192,768,768) attn.proj, (8192,2304,768) qkv, (8192,3072,768)
// mlp.fc, (8192,768,3072) mlp.proj, (4096,4096,4096), (8192,8192,8192).
// Kinds (benchmark name CudaGemm/<kind>/M/N/K):
//   f32            Matmul, a (M,K) and b (K,N) row-major float32 (no TF32)
//   bf16           Matmul, the same in bfloat16 (bf16 out, f32 accumulation)
//   fp8_tn         ScaledMatmul E4M3 x E4M3 -> bf16, role kFprop: a (M,K)
//                  row-major, b = Wᵀ with W (N,K) row-major, i.e. both
//                  operands K-contiguous (the "TN" layout FP8 tensor cores
//                  read; a Linear's forward GEMM)
//   fp8_brow       ScaledMatmul E4M3 x E4M3 -> bf16 with b (K,N) row-major:
//                  octet transposes b first (counted, GemmTransposeCopyCount)
//   fp8_e5m2_tn    ScaledMatmul E5M2 x E4M3 -> float32, role kWgrad, TN: the
//                  dtypes, output and accumulation of a Linear's gradient GEMMs
// Timing: every sample runs `reps` GEMMs back to back (reps chosen so that a
// sample lasts about 2 ms at the H100's expected rate), timed on the host clock
// up to octet::Synchronize(cuda:0); 3 untimed samples first (cuBLASLt
// heuristics, allocator pools). Counters: TFLOP/s (2·M·N·K over the median
// sample), TFLOP/s_max (best sample), reps, transpose_copies and fallbacks
// (per GEMM). OCTET_BENCH_SAMPLES=N changes the number of samples;
// OCTET_BENCH_DEVICE=cpu runs the same code on the CPU (one GEMM a sample),
// to check it on a machine without a GPU, e.g.
//   OCTET_BENCH_DEVICE=cpu OCTET_BENCH_SAMPLES=1 octet_cuda_gemm_bench --benchmark_filter=/8192/768/768
#include <benchmark/benchmark.h>

#include "benchmarks/cuda_bench_util.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <octet/core/device.h>
#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/ops/cast.h>
#include <octet/ops/gemm_layout.h>
#include <octet/ops/matmul.h>

namespace octet {
namespace {

using bench::EnvInt;
using bench::Median;
using bench::OnCpuForChecking;

enum class Kind { kF32 = 0, kBf16, kFp8Tn, kFp8BRowMajor, kFp8E5m2Tn };
constexpr const char* kKindNames[] = {"f32", "bf16", "fp8_tn", "fp8_brow", "fp8_e5m2_tn"};
// Rough H100 rates (FLOP/s), only to size a sample.
constexpr double kExpectedRate[] = {50e12, 700e12, 1200e12, 900e12, 1000e12};
constexpr std::array<std::array<int64_t, 3>, 6> kShapes = {{{8192, 768, 768},
                                                            {8192, 2304, 768},
                                                            {8192, 3072, 768},
                                                            {8192, 768, 3072},
                                                            {4096, 4096, 4096},
                                                            {8192, 8192, 8192}}};
constexpr int kWarmupSamples = 3;
constexpr int kSamples = 30;

void RunGemm(benchmark::State& state, Kind kind, int64_t M, int64_t N, int64_t K, Device gpu) {
  ManualSeed(7);
  // Values in [-1, 1): GEMM speed does not depend on them (the FP8 scale
  // puts them into the format's upper range, as delayed scaling would).
  const Tensor a32 = Rand({M, K}, -1.0, 1.0, {.device = gpu});
  const bool b_as_weight = kind == Kind::kFp8Tn || kind == Kind::kFp8E5m2Tn;
  const Tensor b32 = b_as_weight ? Rand({N, K}, -1.0, 1.0, {.device = gpu}) : Rand({K, N}, -1.0, 1.0, {.device = gpu});
  Tensor a, b;
  DType out = DType::kBFloat16;
  GemmRole role = GemmRole::kGeneral;
  switch (kind) {
    case Kind::kF32:
      a = a32;
      b = b32;
      break;
    case Kind::kBf16:
      a = a32.To(DType::kBFloat16);
      b = b32.To(DType::kBFloat16);
      break;
    case Kind::kFp8Tn:
      a = Quantize(a32, DType::kFloat8E4M3, 256.0f);
      b = Quantize(b32, DType::kFloat8E4M3, 256.0f).T();  // (K,N), K-contiguous
      role = GemmRole::kFprop;
      break;
    case Kind::kFp8BRowMajor:
      a = Quantize(a32, DType::kFloat8E4M3, 256.0f);
      b = Quantize(b32, DType::kFloat8E4M3, 256.0f);  // (K,N), N-contiguous
      role = GemmRole::kFprop;
      break;
    case Kind::kFp8E5m2Tn:
      a = Quantize(a32, DType::kFloat8E5M2, 32768.0f);
      b = Quantize(b32, DType::kFloat8E4M3, 256.0f).T();
      out = DType::kFloat32;
      role = GemmRole::kWgrad;
      break;
  }
  auto gemm = [&] { return IsFp8(a.dtype()) ? ScaledMatmul(a, b, out, Tensor(), role) : Matmul(a, b); };
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const int64_t reps = gpu.is_cpu() ? 1 : std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(2e-3 * kExpectedRate[static_cast<int>(kind)] / flops)), 1, 500);
  Tensor c;
  auto sample = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < reps; ++r) c = gemm();
    Synchronize(gpu);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < (gpu.is_cpu() ? 1 : kWarmupSamples); ++i) sample();
  const int64_t copies0 = GemmTransposeCopyCount(), fallbacks0 = GemmFallbackCount();
  std::vector<double> times;
  for (auto _ : state) {
    const double sec = sample();
    state.SetIterationTime(sec);
    times.push_back(sec);
  }
  const double gemms = static_cast<double>(reps) * static_cast<double>(times.size());
  state.counters["TFLOP/s"] = static_cast<double>(reps) * flops / Median(times) * 1e-12;
  state.counters["TFLOP/s_max"] = static_cast<double>(reps) * flops / *std::min_element(times.begin(), times.end()) * 1e-12;
  state.counters["reps"] = static_cast<double>(reps);
  state.counters["transpose_copies"] = static_cast<double>(GemmTransposeCopyCount() - copies0) / gemms;
  state.counters["fallbacks"] = static_cast<double>(GemmFallbackCount() - fallbacks0) / gemms;
  state.SetLabel(std::string(kKindNames[static_cast<int>(kind)]) + " -> " + Name(c.dtype()));
}

void BM_CudaGemm(benchmark::State& state, int kind, int64_t M, int64_t N, int64_t K) {
  const bool cpu = OnCpuForChecking();
  if (!cpu && DeviceCount(DeviceType::kCUDA) == 0) {
    state.SkipWithError(("no CUDA device: " + DeviceUnavailableReason(DeviceType::kCUDA)).c_str());
    return;
  }
  try {
    RunGemm(state, static_cast<Kind>(kind), M, N, K, cpu ? kCPU : CUDA(0));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

const bool kRegistered = [] {
  const int64_t samples = EnvInt("OCTET_BENCH_SAMPLES", kSamples);
  for (int kind = 0; kind < 5; ++kind) {
    for (const auto& s : kShapes) {
      const std::string name = std::string("CudaGemm/") + kKindNames[kind] + "/" + std::to_string(s[0]) + "/" +
                               std::to_string(s[1]) + "/" + std::to_string(s[2]);
      benchmark::RegisterBenchmark(name.c_str(), BM_CudaGemm, kind, s[0], s[1], s[2])
          ->Iterations(samples)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

}  // namespace
}  // namespace octet
