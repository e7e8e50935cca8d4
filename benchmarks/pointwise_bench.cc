// Pointwise kernels in float32 and bfloat16 side by side, at a GPT MLP
// activation size (B*T, 4C) = (4096, 3072): BF16 must never be slower than
// FP32 (half the bytes, the same f32 arithmetic).
//
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 octet_pointwise_bench \
//       --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//
// GELU and its backward also run at the GPT example's sizes, (B*T, 4C) =
// (2048, 512) for its default model and (1024, 3072) for the wide one, which
// stay in the cache (the third and fourth arguments: rows, columns).
// Ops: Add and Mul of two tensors, Add with a (4C) bias broadcast over rows,
// GELU forward, GELU backward (dy * gelu'(x), what autograd runs), MulScalar.
// bytes_per_second counts every input read once and the output written once.
// GeluToFp8: the O1 MLP's GELU feeding proj's FP8 input, bfloat16 in, E4M3
// out with a known (delayed-scaling) scale: Gelu then Quantize (two passes,
// a bfloat16 intermediate) against GeluFp8 (one pass; NOTE [gelu to fp8] in
// ops/pointwise.cc). bytes_per_second counts the bf16 read and the FP8 write.
// The CPU column is the process's CPU time (all threads): on a machine shared
// with other work it is steadier than the wall-clock Time column.
// bf16 GELU, its backward and GeluToFp8 run both ways (the `path` argument:
// 1 computed, 2 by table; NOTE [bf16 gelu tables] in ops/cpu_gelu_path.h),
// so a sitting shows whether the process's probe chose the faster one on
// this CPU; f32 cases have path 0 (always computed).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <octet/core/tensor.h>
#include <octet/ops/cast.h>
#include <octet/ops/cpu_gelu_path_testing.h>
#include <octet/ops/functors.h>
#include <octet/ops/pointwise.h>

namespace octet {
namespace {

const bool kThreadsSet = [] {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) omp_set_num_threads(2);
  return true;
}();

constexpr int64_t kRows = 4096, kCols = 3072;

Tensor Random(const Shape& shape, DType dtype, uint64_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(Numel(shape));
  for (auto& x : v) x = dist(rng);
  return FromVector(v, shape, {.dtype = dtype});
}

enum class Op { kAdd, kMul, kAddBias, kGelu, kGeluBackward, kMulScalar };

// Forces the bf16 GELU path for a benchmark's lifetime (path 1 computed, 2
// table, 0 the process's own choice).
class GeluPathScope {
 public:
  explicit GeluPathScope(int64_t path) : forced_(path != 0) {
    if (forced_) internal::SetCpuGeluPathForTesting(path == 2 ? CpuGeluPath::kTable : CpuGeluPath::kCompute);
  }
  ~GeluPathScope() {
    if (forced_) internal::SetCpuGeluPathForTesting(std::nullopt);
  }
  GeluPathScope(const GeluPathScope&) = delete;
  GeluPathScope& operator=(const GeluPathScope&) = delete;

 private:
  bool forced_;
};

const char* PathLabel(int64_t path) { return path == 0 ? "" : path == 1 ? " computed" : " table"; }

void BM_Pointwise(benchmark::State& state) {
  const Op op = static_cast<Op>(state.range(0));
  const DType dtype = state.range(1) == 0 ? DType::kFloat32 : DType::kBFloat16;
  const int64_t rows = state.range(2), cols = state.range(3);
  const GeluPathScope path(state.range(4));
  const Tensor a = Random({rows, cols}, dtype, 1), b = Random({rows, cols}, dtype, 2);
  const Tensor bias = Random({cols}, dtype, 3);
  auto run = [&]() -> Tensor {
    switch (op) {
      case Op::kAdd: return Add(a, b);
      case Op::kMul: return Mul(a, b);
      case Op::kAddBias: return Add(a, bias);
      case Op::kGelu: return Gelu(a);
      case Op::kGeluBackward: return BinaryRaw(BinaryOp::kGeluBackward, a, b);
      case Op::kMulScalar: return MulScalar(a, 0.5);
    }
    return Tensor();
  };
  benchmark::DoNotOptimize(run().raw_data());  // warm-up: the allocator's cache
  for (auto _ : state) benchmark::DoNotOptimize(run().raw_data());
  const int64_t inputs = op == Op::kAdd || op == Op::kMul || op == Op::kGeluBackward ? 2 : 1;
  state.SetBytesProcessed(state.iterations() * (inputs + 1) * a.numel() * static_cast<int64_t>(SizeOf(dtype)));
  static const char* const kNames[] = {"add", "mul", "add_bias", "gelu", "gelu_backward", "mul_scalar"};
  state.SetLabel(std::string(kNames[state.range(0)]) + " " + Name(dtype) + PathLabel(state.range(4)));
}

// A bf16 GELU case once per path, anything else once.
void AddCase(benchmark::internal::Benchmark* b, int64_t op, int64_t dt, int64_t rows, int64_t cols) {
  const bool gelu = op == static_cast<int64_t>(Op::kGelu) || op == static_cast<int64_t>(Op::kGeluBackward);
  if (gelu && dt == 1) {
    for (int64_t path : {1, 2}) b->Args({op, dt, rows, cols, path});
  } else {
    b->Args({op, dt, rows, cols, 0});
  }
}

void Grid(benchmark::internal::Benchmark* b) {
  for (int64_t op = 0; op < 6; ++op)
    for (int64_t dt = 0; dt < 2; ++dt) AddCase(b, op, dt, kRows, kCols);
  for (int64_t op : {static_cast<int64_t>(Op::kGelu), static_cast<int64_t>(Op::kGeluBackward)})
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2048, 512}, {1024, 3072}})
      for (int64_t dt = 0; dt < 2; ++dt) AddCase(b, op, dt, rows, cols);
  b->ArgNames({"op", "bf16", "rows", "cols", "path"})
      ->UseRealTime()
      ->MeasureProcessCPUTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Pointwise)->Name("Pointwise")->Apply(Grid);

void BM_GeluToFp8(benchmark::State& state) {
  const bool fused = state.range(0) != 0;
  const GeluPathScope path(state.range(1));
  const Tensor a = Random({kRows, kCols}, DType::kBFloat16, 1);
  const Tensor scale = Full({1}, 64.0, {.dtype = DType::kFloat32});
  const DType fp8 = DType::kFloat8E4M3;
  auto run = [&]() -> Tensor { return fused ? GeluFp8(a, fp8, scale) : Quantize(Gelu(a), fp8, scale); };
  benchmark::DoNotOptimize(run().raw_data());  // warm-up: the allocator's cache
  for (auto _ : state) benchmark::DoNotOptimize(run().raw_data());
  state.SetBytesProcessed(state.iterations() * a.numel() * 3);
  state.SetLabel(std::string(fused ? "gelu_fp8 bf16->e4m3" : "gelu then quantize bf16->e4m3") +
                 PathLabel(state.range(1)));
}
BENCHMARK(BM_GeluToFp8)
    ->Name("GeluToFp8")
    ->ArgNames({"fused", "path"})
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace octet
