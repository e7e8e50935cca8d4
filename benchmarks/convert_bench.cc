// Throughput of the CPU row converters (core/convert.h) on in-cache rows,
// reported as items (elements) per second. Each benchmark runs on the best
// path this CPU has ("/path:0", see NOTE [converter dispatch]) and on the
// scalar loops ("/path:1"), on AVX-512 without VBMI / BF16 ("/path:2") and on
// the AVX2 kernels ("/path:3"):
//   convert_bench --benchmark_filter=Fp8ToBf16
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>

namespace octet {
namespace {

constexpr int64_t kRowLength = 16384;  // 16K elements: 16-64 KB per buffer

// Selects the path named by the benchmark's second argument and labels it.
// Restores the default path when destroyed.
class PathScope {
 public:
  explicit PathScope(benchmark::State& state) {
    const bool scalar = state.range(1) == 1;
    internal::ForceScalarConvertersForTesting(scalar);
    if (state.range(1) == 2) {
      internal::SetConverterIsaForTesting({.avx512 = true, .vbmi = false, .bf16 = false});
    }
    if (state.range(1) == 3) internal::SetConverterIsaForTesting({.avx2 = true});
    const internal::ConverterIsa isa = internal::ActiveConverterIsa();
    if (scalar || (!isa.avx512 && !isa.avx2)) {
      state.SetLabel("scalar");
    } else if (!isa.avx512) {
      state.SetLabel("avx2");
    } else {
      state.SetLabel(std::string("avx512") + (isa.vbmi ? "+vbmi" : "") +
                     (isa.bf16 ? "+bf16" : ""));
    }
  }
  ~PathScope() { internal::ForceScalarConvertersForTesting(false); }
};

std::vector<float> RandomFloats(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 30.0f);
  std::vector<float> out(n);
  for (auto& v : out) v = dist(rng);
  return out;
}

std::vector<uint8_t> RandomCodes(int64_t n) {
  std::mt19937 rng(2);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

void BM_Fp8ToBf16Row(benchmark::State& state) {
  PathScope path(state);
  const int64_t n = state.range(0);
  const std::vector<uint8_t> src = RandomCodes(n);
  std::vector<uint16_t> dst(n);
  for (auto _ : state) {
    Fp8ToBf16Row(src.data(), DType::kFloat8E4M3, dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_DequantizeRow(benchmark::State& state) {
  PathScope path(state);
  const int64_t n = state.range(0);
  const std::vector<uint8_t> src = RandomCodes(n);
  std::vector<float> dst(n);
  for (auto _ : state) {
    DequantizeRow(src.data(), DType::kFloat8E4M3, 0.5f, dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_QuantizeRowWithAmax(benchmark::State& state) {
  PathScope path(state);
  const int64_t n = state.range(0);
  const std::vector<float> src = RandomFloats(n);
  std::vector<uint8_t> dst(n);
  for (auto _ : state) {
    const float amax = QuantizeRow(src.data(), 2.0f, DType::kFloat8E4M3,
                                   Fp8Saturation::kSatFinite, dst.data(), n);
    benchmark::DoNotOptimize(amax);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// O1's quantization of bf16 activations and gradients (QuantizeBf16Row).
void BM_QuantizeBf16RowWithAmax(benchmark::State& state) {
  PathScope path(state);
  const int64_t n = state.range(0);
  const std::vector<float> values = RandomFloats(n);
  std::vector<uint16_t> src(n);
  FloatToBf16Row(values.data(), src.data(), n);
  std::vector<uint8_t> dst(n);
  for (auto _ : state) {
    const float amax = QuantizeBf16Row(src.data(), 2.0f, DType::kFloat8E4M3, Fp8Saturation::kSatFinite, dst.data(), n);
    benchmark::DoNotOptimize(amax);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_FloatToBf16Row(benchmark::State& state) {
  PathScope path(state);
  const int64_t n = state.range(0);
  const std::vector<float> src = RandomFloats(n);
  std::vector<uint16_t> dst(n);
  for (auto _ : state) {
    FloatToBf16Row(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_FloatToF16Row(benchmark::State& state) {
  PathScope path(state);
  const int64_t n = state.range(0);
  const std::vector<float> src = RandomFloats(n);
  std::vector<uint16_t> dst(n);
  for (auto _ : state) {
    FloatToF16Row(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_AmaxRow(benchmark::State& state) {
  PathScope path(state);
  const int64_t n = state.range(0);
  const std::vector<float> src = RandomFloats(n);
  for (auto _ : state) {
    benchmark::DoNotOptimize(AmaxRow(src.data(), n));
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// Args: {row length, path}: path 0 = best available, 1 = scalar, 2 = AVX-512
// F/BW/DQ/VL only (the fallback for CPUs without VBMI and BF16), 3 = AVX2.
void RowArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "path"});
  b->Args({kRowLength, 0});
  b->Args({kRowLength, 1});
  b->Args({kRowLength, 2});
  b->Args({kRowLength, 3});
}

BENCHMARK(BM_Fp8ToBf16Row)->Apply(RowArgs);
BENCHMARK(BM_DequantizeRow)->Apply(RowArgs);
BENCHMARK(BM_QuantizeRowWithAmax)->Apply(RowArgs);
BENCHMARK(BM_QuantizeBf16RowWithAmax)->Apply(RowArgs);
BENCHMARK(BM_FloatToBf16Row)->Apply(RowArgs);
BENCHMARK(BM_FloatToF16Row)->Apply(RowArgs);
BENCHMARK(BM_AmaxRow)->Apply(RowArgs);

}  // namespace
}  // namespace octet

BENCHMARK_MAIN();
