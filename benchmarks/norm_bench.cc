// Memory-bound row ops at GPT-2-small sizes: LayerNorm and the fused residual
// add + LayerNorm forward+backward on (B*T, C) = (4096, 768), and the fused
// softmax + cross-entropy forward+backward on (2048, V = 4096) logits
// (V = 50304 would take ~400 MB of logits per run, too big for CI), and
// LayerNorm writing FP8 (LayerNormFp8) vs LayerNorm then Quantize, and the
// output gradient's FP8 cast with its bias gradient vs the separate sum. Each
// fused op runs next to the same computation done by unfused ops through
// autograd (the "peer"), so the output reads as a ratio. bytes_per_second
// counts the compulsory traffic of the fused op (every input read once, every
// output written once) for both, so it is comparable within a pair.
// LayerNorm and the cross-entropy also run at the GPT example's own sizes,
// (B*T, C) = (2048, 128) for its default model and (1024, 768) for the wide
// one, logits (2048, 256): rows that stay in the cache, where a bf16 row
// moves fewer bytes but widens and narrows every element (the third and
// fourth arguments are the rows and the columns).
// The CPU allocator hands out fresh pages for buffers this large, so page
// faults are part of every figure (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=
// 33554432:glibc.malloc.trim_threshold=1073741824 shows the ops without them).
//   octet_norm_bench --benchmark_filter=LayerNorm
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <octet/autograd/engine.h>
#include <octet/core/tensor.h>
#include <octet/ops/cast.h>
#include <octet/ops/norm.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/ops/softmax.h>

namespace octet {
namespace {

constexpr int64_t kRows = 4096, kC = 768;         // LayerNorm: (B*T, C)
constexpr int64_t kCeRows = 2048, kVocab = 4096;  // cross-entropy: (B*T, V)

Tensor Random(const Shape& shape, DType dtype, uint64_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(Numel(shape));
  for (auto& x : v) x = dist(rng);
  return FromVector(v, shape, {.dtype = dtype});
}

DType DTypeArg(const benchmark::State& state) { return state.range(0) == 0 ? DType::kFloat32 : DType::kBFloat16; }

// The (rows, columns) of a benchmark with shape arguments (ShapedDTypes).
int64_t RowsArg(const benchmark::State& state) { return state.range(1); }
int64_t ColsArg(const benchmark::State& state) { return state.range(2); }

// Reads x, dy; writes y, dx (dweight, dbias are O(C)).
void SetLayerNormBytes(benchmark::State& state, DType d, int64_t rows, int64_t c) {
  state.SetBytesProcessed(state.iterations() * 4 * rows * c * SizeOf(d));
  state.SetLabel(Name(d));
}

void BM_LayerNormFwdBwd(benchmark::State& state) {
  const DType d = DTypeArg(state);
  const int64_t rows = RowsArg(state), c = ColsArg(state);
  Tensor x = Random({rows, c}, d, 1).requires_grad_();
  Tensor w = Random({c}, d, 2).requires_grad_(), b = Random({c}, d, 3).requires_grad_();
  const Tensor dy = Random({rows, c}, d, 4);
  for (auto _ : state) {
    LayerNorm(x, w, b).Backward(dy);
    x.zero_grad();
    w.zero_grad();
    b.zero_grad();
  }
  SetLayerNormBytes(state, d, rows, c);
}

void BM_LayerNormFwdBwdComposite(benchmark::State& state) {
  const DType d = DTypeArg(state);
  Tensor x = Random({kRows, kC}, d, 1).requires_grad_();
  Tensor w = Random({kC}, d, 2).requires_grad_(), b = Random({kC}, d, 3).requires_grad_();
  const Tensor dy = Random({kRows, kC}, d, 4);
  for (auto _ : state) {
    const Tensor xc = x - Mean(x, {-1}, true);
    const Tensor y = xc * Rsqrt(Mean(Square(xc), {-1}, true) + 1e-5) * w + b;
    y.Backward(dy);
    x.zero_grad();
    w.zero_grad();
    b.zero_grad();
  }
  SetLayerNormBytes(state, d, kRows, kC);
}

void BM_LayerNormFwd(benchmark::State& state) {
  const DType d = DTypeArg(state);
  const int64_t rows = RowsArg(state), c = ColsArg(state);
  const Tensor x = Random({rows, c}, d, 1), w = Random({c}, d, 2), b = Random({c}, d, 3);
  for (auto _ : state) benchmark::DoNotOptimize(LayerNorm(x, w, b));
  state.SetBytesProcessed(state.iterations() * 2 * rows * c * SizeOf(d));
  state.SetLabel(Name(d));
}

// Residual add + LayerNorm, fused vs Add then LayerNorm. Reads x, residual,
// dy, dsum; writes sum, y, dx (which serves both inputs).
void AddLayerNormCase(benchmark::State& state, bool fused) {
  const DType d = DTypeArg(state);
  Tensor x = Random({kRows, kC}, d, 1).requires_grad_(), r = Random({kRows, kC}, d, 6).requires_grad_();
  Tensor w = Random({kC}, d, 2).requires_grad_(), b = Random({kC}, d, 3).requires_grad_();
  const Tensor dy = Random({kRows, kC}, d, 4), dsum = Random({kRows, kC}, d, 7);
  for (auto _ : state) {
    Tensor h, y;
    if (fused) {
      AddLayerNormResult o = AddLayerNorm(x, r, w, b);
      h = o.sum;
      y = o.out;
    } else {
      h = x + r;
      y = LayerNorm(h, w, b);
    }
    autograd::Backward({h, y}, {dsum, dy});
    for (Tensor* t : {&x, &r, &w, &b}) t->zero_grad();
  }
  state.SetBytesProcessed(state.iterations() * 7 * kRows * kC * SizeOf(d));
  state.SetLabel(Name(d));
}
void BM_AddLayerNormFwdBwd(benchmark::State& state) { AddLayerNormCase(state, true); }
void BM_AddLayerNormFwdBwdUnfused(benchmark::State& state) { AddLayerNormCase(state, false); }

void AddLayerNormFwdCase(benchmark::State& state, bool fused) {
  const DType d = DTypeArg(state);
  const Tensor x = Random({kRows, kC}, d, 1), r = Random({kRows, kC}, d, 6);
  const Tensor w = Random({kC}, d, 2), b = Random({kC}, d, 3);
  for (auto _ : state) {
    if (fused) {
      benchmark::DoNotOptimize(AddLayerNorm(x, r, w, b));
    } else {
      const Tensor h = x + r;
      benchmark::DoNotOptimize(LayerNorm(h, w, b));
    }
  }
  state.SetBytesProcessed(state.iterations() * 4 * kRows * kC * SizeOf(d));
  state.SetLabel(Name(d));
}
void BM_AddLayerNormFwd(benchmark::State& state) { AddLayerNormFwdCase(state, true); }
void BM_AddLayerNormFwdUnfused(benchmark::State& state) { AddLayerNormFwdCase(state, false); }

// LayerNorm writing the FP8 input of the next Linear (LayerNormFp8, NOTE
// [layer norm to fp8]) vs LayerNorm then Quantize, forward only (the
// backward is LayerNorm's either way). Reads x, writes the FP8 output.
void LayerNormFp8FwdCase(benchmark::State& state, bool fused) {
  const DType d = DTypeArg(state);
  const Tensor x = Random({kRows, kC}, d, 1), w = Random({kC}, d, 2), b = Random({kC}, d, 3);
  const Tensor scale = Full({1}, 64.0, {.dtype = DType::kFloat32});
  for (auto _ : state) {
    if (fused) {
      benchmark::DoNotOptimize(LayerNormFp8(x, w, b, DType::kFloat8E4M3, scale));
    } else {
      benchmark::DoNotOptimize(Quantize(LayerNorm(x, w, b), DType::kFloat8E4M3, scale));
    }
  }
  state.SetBytesProcessed(state.iterations() * kRows * kC * (SizeOf(d) + 1));
  state.SetLabel(Name(d));
}
void BM_LayerNormFp8Fwd(benchmark::State& state) { LayerNormFp8FwdCase(state, true); }
void BM_LayerNormFp8FwdUnfused(benchmark::State& state) { LayerNormFp8FwdCase(state, false); }

// A Linear's output gradient cast to FP8 with its bias gradient, where FP8
// GEMMs want no transposed copy (the CPU): QuantizeWithBiasGrad (one pass)
// vs Quantize, then Sum(dY.To(f32), {0}) (what the FP8 Linear did before).
// Reads dY, writes the FP8 copy.
void OutputGradCastCase(benchmark::State& state, bool fused) {
  const DType d = DTypeArg(state);
  const Tensor dy = Random({kRows, kC}, d, 4);
  const Tensor scale = Full({1}, 64.0, {.dtype = DType::kFloat32});
  for (auto _ : state) {
    if (fused) {
      benchmark::DoNotOptimize(QuantizeWithBiasGrad(dy, DType::kFloat8E5M2, scale));
    } else {
      benchmark::DoNotOptimize(Quantize(dy, DType::kFloat8E5M2, scale));
      benchmark::DoNotOptimize(Sum(dy.To(DType::kFloat32), {0}));
    }
  }
  state.SetBytesProcessed(state.iterations() * kRows * kC * (SizeOf(d) + 1));
  state.SetLabel(Name(d));
}
void BM_OutputGradCastBiasGrad(benchmark::State& state) { OutputGradCastCase(state, true); }
void BM_OutputGradCastBiasGradUnfused(benchmark::State& state) { OutputGradCastCase(state, false); }

// A bias gradient: the column sums of an output gradient, Sum(dY, {0}), at
// the GPT example's sizes (rows, columns): reads dY once.
void BM_BiasGrad(benchmark::State& state) {
  const DType d = DTypeArg(state);
  const int64_t rows = RowsArg(state), c = ColsArg(state);
  const Tensor dy = Random({rows, c}, d, 6);
  for (auto _ : state) benchmark::DoNotOptimize(Sum(dy, {0}));
  state.SetBytesProcessed(state.iterations() * rows * c * SizeOf(d));
  state.SetLabel(Name(d));
}

// Reads the logits twice (forward, backward), writes dlogits.
void SetCrossEntropyBytes(benchmark::State& state, DType d, int64_t rows, int64_t vocab) {
  state.SetBytesProcessed(state.iterations() * 3 * rows * vocab * SizeOf(d));
  state.SetLabel(Name(d));
}

std::vector<int64_t> TargetValues(int64_t rows, int64_t vocab) {
  std::vector<int64_t> t(rows);
  for (int64_t i = 0; i < rows; ++i) t[i] = (i * 7919) % vocab;
  return t;
}

void BM_CrossEntropyFwdBwd(benchmark::State& state) {
  const DType d = DTypeArg(state);
  const int64_t rows = RowsArg(state), vocab = ColsArg(state);
  Tensor logits = Random({rows, vocab}, d, 5).requires_grad_();
  const Tensor targets = FromVector(TargetValues(rows, vocab), {rows});
  for (auto _ : state) {
    CrossEntropy(logits, targets).Backward();
    logits.zero_grad();
  }
  SetCrossEntropyBytes(state, d, rows, vocab);
}

void BM_CrossEntropyFwdBwdComposite(benchmark::State& state) {
  const DType d = DTypeArg(state);
  Tensor logits = Random({kCeRows, kVocab}, d, 5).requires_grad_();
  const std::vector<int64_t> t = TargetValues(kCeRows, kVocab);
  std::vector<float> onehot(kCeRows * kVocab, 0.0f);
  for (int64_t i = 0; i < kCeRows; ++i) onehot[i * kVocab + t[i]] = -1.0f / kCeRows;
  const Tensor weight = FromVector(onehot, {kCeRows, kVocab}, {.dtype = d});
  for (auto _ : state) {
    Sum(LogSoftmax(logits) * weight).Backward();
    logits.zero_grad();
  }
  SetCrossEntropyBytes(state, d, kCeRows, kVocab);
}

void DTypes(benchmark::internal::Benchmark* b) { b->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime(); }

// {dtype, rows, columns}: the size above, then the GPT example's.
void LayerNormShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [rows, c] : {std::pair<int64_t, int64_t>{kRows, kC}, {2048, 128}, {1024, 256}, {1024, 768}})
    for (int64_t d : {0, 1}) b->Args({d, rows, c});
  b->ArgNames({"bf16", "rows", "cols"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
void CrossEntropyShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [rows, v] : {std::pair<int64_t, int64_t>{kCeRows, kVocab}, {2048, 256}})
    for (int64_t d : {0, 1}) b->Args({d, rows, v});
  b->ArgNames({"bf16", "rows", "cols"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BiasGradShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [rows, c] :
       {std::pair<int64_t, int64_t>{1024, 256}, {1024, 768}, {1024, 1024}, {1024, 3072}, {2048, 128}, {2048, 512}})
    for (int64_t d : {0, 1}) b->Args({d, rows, c});
  b->ArgNames({"bf16", "rows", "cols"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_LayerNormFwd)->Apply(LayerNormShapes);
BENCHMARK(BM_LayerNormFwdBwd)->Apply(LayerNormShapes);
BENCHMARK(BM_LayerNormFwdBwdComposite)->Apply(DTypes);
BENCHMARK(BM_LayerNormFp8Fwd)->Apply(DTypes);
BENCHMARK(BM_LayerNormFp8FwdUnfused)->Apply(DTypes);
BENCHMARK(BM_OutputGradCastBiasGrad)->Apply(DTypes);
BENCHMARK(BM_OutputGradCastBiasGradUnfused)->Apply(DTypes);
BENCHMARK(BM_AddLayerNormFwd)->Apply(DTypes);
BENCHMARK(BM_AddLayerNormFwdUnfused)->Apply(DTypes);
BENCHMARK(BM_AddLayerNormFwdBwd)->Apply(DTypes);
BENCHMARK(BM_AddLayerNormFwdBwdUnfused)->Apply(DTypes);
BENCHMARK(BM_CrossEntropyFwdBwd)->Apply(CrossEntropyShapes);
BENCHMARK(BM_BiasGrad)->Apply(BiasGradShapes);
BENCHMARK(BM_CrossEntropyFwdBwdComposite)->Apply(DTypes);

}  // namespace
}  // namespace octet
