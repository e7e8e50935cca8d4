// One AdamW step over the parameters of the wide train-step GPT (2 layers,
// width 768: 14.6M f32 parameters in 28 tensors of the real shapes) for each
// optimizer state format: f32 m and v (16 bytes of state traffic per
// parameter and step), bf16, and the MS-AMP-style fp8_e4m3 m + scaled f16 v
// (NOTE [adamw state dtype] in optim/adamw.h). The update is memory-bound, so
// bytes_per_second counts what one step must move: the gradient and the
// parameter read, the parameter written, and the state read and written.
//
//   OMP_NUM_THREADS=2 octet_optim_bench --benchmark_repetitions=5
//
// The CPU column is the process's CPU time (all threads): steadier than the
// wall-clock Time column on a shared machine.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/optim/adamw.h>

namespace octet {
namespace {

const bool kThreadsSet = [] {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) omp_set_num_threads(2);
  return true;
}();

// The shapes of the wide GPT's parameters (vocab 256, T 256, C 768, 2 layers).
std::vector<Shape> WideShapes() {
  constexpr int64_t C = 768;
  std::vector<Shape> s = {{256, C}, {256, C}};
  for (int layer = 0; layer < 2; ++layer) {
    for (const Shape& x : std::vector<Shape>{{C}, {C}, {3 * C, C}, {3 * C}, {C, C}, {C}, {C}, {C}, {4 * C, C},
                                             {4 * C}, {C, 4 * C}, {C}})
      s.push_back(x);
  }
  s.push_back({C});
  s.push_back({C});
  return s;
}

void BM_AdamW(benchmark::State& state) {
  const auto state_dtype = static_cast<optim::StateDType>(state.range(0));
  optim::NamedTensors params;
  int64_t n = 0;
  for (const Shape& shape : WideShapes()) {
    Tensor p = Randn(shape, 0.0, 0.02);
    p.requires_grad_();
    p.set_grad(Randn(shape, 0.0, 1e-3));
    n += p.numel();
    params.emplace_back("p" + std::to_string(params.size()), p);
  }
  optim::AdamW opt(params, {.lr = 1e-4, .state_dtype = state_dtype});
  opt.Step();  // the first step sets the state's scales
  for (auto _ : state) opt.Step();
  const int64_t state_bytes = state_dtype == optim::StateDType::kFloat32    ? 8
                              : state_dtype == optim::StateDType::kBFloat16 ? 4
                                                                            : 3;
  // grad + param read, param written, state read and written.
  state.SetBytesProcessed(state.iterations() * n * (4 + 4 + 4 + 2 * state_bytes));
  state.counters["params_M"] = static_cast<double>(n) * 1e-6;
  state.SetLabel(optim::Name(state_dtype));
}

BENCHMARK(BM_AdamW)
    ->ArgName("state")
    ->Arg(static_cast<int>(optim::StateDType::kFloat32))
    ->Arg(static_cast<int>(optim::StateDType::kBFloat16))
    ->Arg(static_cast<int>(optim::StateDType::kFp8Fp16))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace octet
