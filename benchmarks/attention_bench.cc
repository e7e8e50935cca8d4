// Fused causal attention on the CPU, forward and forward+backward, at GPT-2
// small head shapes: (B,H,T,D) = (4,12,256,64) and (1,12,1024,64), and in
// bf16 also those of the GPT example's default model (16,4,128,32) and
// train_step_bench's small one (8,4,128,64).
//
// The FLOP/s counter counts the causal half of the two T x T x D products of
// the forward, 2*B*H*T^2*D*2/2, and 2.5x that for the backward (five
// products: S, dP, dV, dK, dQ), so fwd+bwd counts 3.5x the forward. The
// last argument selects the instruction set (NOTE [attention isa dispatch]):
// 0 generic, 1 AVX2, 2 AVX-512, 3 AVX-512 BF16 (bf16 on BF16 dot products,
// NOTE [bf16 attention tiles]; clamped to what the CPU has; the label says
// which ran).
//
// BM_UnfusedAttention* run the CUDA backend's fallback (ops/attention_unfused.h)
// on the CPU ops: batched GEMMs and pointwise/reduction passes over the
// materialised T x T scores. They count the same FLOPs, so the FLOP/s ratio
// is the speed-up of fusion.
//
// BM_CudaAttentionF32ForwardBackward: float32 forward + backward on the first
// CUDA device at GPT-2 size (B8 H12 T1024 D64), the flash kernels
// (ops/cuda/attention_flash_cuda.h, flash=1) against the unfused path the
// CUDA backend used for float32 before (flash=0). Each iteration ends with a
// 256-byte copy of dq to the host (the copy waits for the stream). Skipped
// without a device.
//   octet_attention_bench --benchmark_filter=Forward
//   octet_attention_bench --benchmark_filter=Cuda
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/core/tensor.h>
#include <octet/ops/attention.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/attention_unfused.h>
#include <octet/ops/cast.h>
#if OCTET_WITH_CUDA
#include <octet/ops/cuda/attention_flash_cuda.h>
#endif

namespace octet {
namespace {

Tensor RandomInput(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<float> values(Numel(shape));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : values) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(s >> 40) % 2001 - 1000) / 1000.0f;
  }
  return FromVector(values, shape, {.dtype = dtype});
}

class IsaScope {
 public:
  explicit IsaScope(benchmark::State& state) {
    internal::SetAttentionIsaForTesting(static_cast<internal::AttentionIsa>(state.range(5)));
    state.SetLabel(internal::Name(internal::ActiveAttentionIsa()));
  }
  ~IsaScope() { internal::SetAttentionIsaForTesting(std::nullopt); }
};

Shape ShapeOf(const benchmark::State& state) {
  return {state.range(0), state.range(1), state.range(2), state.range(3)};
}
// bf16: 0 f32, 1 bf16, 2 (BM_CausalAttentionQkvForwardBackward only) FP8 qkv with bf16 compute.
DType DtypeOf(const benchmark::State& state) { return state.range(4) == 0 ? DType::kFloat32 : DType::kBFloat16; }

double ForwardFlops(const Shape& s) { return 2.0 * s[0] * s[1] * s[2] * s[2] * s[3] * 2.0 / 2.0; }

void BM_CausalAttentionForward(benchmark::State& state) {
  IsaScope isa(state);
  const Shape shape = ShapeOf(state);
  const DType dtype = DtypeOf(state);
  const Tensor q = RandomInput(shape, dtype, 1), k = RandomInput(shape, dtype, 2), v = RandomInput(shape, dtype, 3);
  NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(CausalAttention(q, k, v).raw_data());
  state.counters["FLOP/s"] =
      benchmark::Counter(ForwardFlops(shape) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_CausalAttentionForwardBackward(benchmark::State& state) {
  IsaScope isa(state);
  const Shape shape = ShapeOf(state);
  const DType dtype = DtypeOf(state);
  Tensor q = RandomInput(shape, dtype, 1).requires_grad_(), k = RandomInput(shape, dtype, 2).requires_grad_(),
         v = RandomInput(shape, dtype, 3).requires_grad_();
  const Tensor dout = RandomInput(shape, dtype, 4);
  for (auto _ : state) {
    CausalAttention(q, k, v).Backward(dout);
    benchmark::DoNotOptimize(q.grad().raw_data());
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(3.5 * ForwardFlops(shape) * state.iterations(), benchmark::Counter::kIsRate);
}

// The unfused fallback of the CUDA backend (NOTE [unfused attention]),
// here on the CPU ops: the same kernel contract, T x T scores materialised.
void BM_UnfusedAttentionForward(benchmark::State& state) {
  const Shape shape = ShapeOf(state);
  const DType dtype = DtypeOf(state);
  const Tensor q = RandomInput(shape, dtype, 1), k = RandomInput(shape, dtype, 2), v = RandomInput(shape, dtype, 3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape[3]));
  Tensor out = Empty(shape, {.dtype = dtype});
  Tensor lse = Empty({shape[0], shape[1], shape[2]}, {.dtype = AttentionLseDtype(dtype)});
  for (auto _ : state) {
    CausalAttentionFwdUnfused(q, k, v, scale, out, lse);
    benchmark::DoNotOptimize(out.raw_data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(ForwardFlops(shape) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_UnfusedAttentionForwardBackward(benchmark::State& state) {
  const Shape shape = ShapeOf(state);
  const DType dtype = DtypeOf(state);
  const Tensor q = RandomInput(shape, dtype, 1), k = RandomInput(shape, dtype, 2), v = RandomInput(shape, dtype, 3);
  const Tensor dout = RandomInput(shape, dtype, 4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape[3]));
  Tensor out = Empty(shape, {.dtype = dtype});
  Tensor lse = Empty({shape[0], shape[1], shape[2]}, {.dtype = AttentionLseDtype(dtype)});
  Tensor dq = Empty(shape, {.dtype = dtype}), dk = Empty(shape, {.dtype = dtype}), dv = Empty(shape, {.dtype = dtype});
  for (auto _ : state) {
    CausalAttentionFwdUnfused(q, k, v, scale, out, lse);
    CausalAttentionBwdUnfused(q, k, v, out, dout, lse, scale, dq, dk, dv);
    benchmark::DoNotOptimize(dq.raw_data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(3.5 * ForwardFlops(shape) * state.iterations(), benchmark::Counter::kIsRate);
}

void UnfusedArgs(benchmark::internal::Benchmark* b) {
  for (int dtype : {0, 1}) {
    b->Args({4, 12, 256, 64, dtype});
    b->Args({1, 12, 1024, 64, dtype});
  }
  b->ArgNames({"B", "H", "T", "D", "bf16"});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

BENCHMARK(BM_UnfusedAttentionForward)->Apply(UnfusedArgs);
BENCHMARK(BM_UnfusedAttentionForwardBackward)->Apply(UnfusedArgs);

// B, H, T, D, dtype (0 f32, 1 bf16), isa.
void Args(benchmark::internal::Benchmark* b) {
  for (int isa : {4, 3, 2, 1, 0}) {
    for (int dtype : {0, 1}) {
      // bf16 under AVX-512 (f32 tiles), AVX-512 BF16 (dot products) and AMX
      // (clamped to what the CPU has: the label names what ran); f32 under
      // every ISA but the BF16 ones (it runs the AVX-512 tiles there).
      if (dtype == 1 ? isa < 2 : isa >= 3) continue;
      b->Args({4, 12, 256, 64, dtype, isa});
      b->Args({1, 12, 1024, 64, dtype, isa});
      // The GPT example's default model and train_step_bench's small one
      // (f32 on the AVX-512 tiles too: the example's O0).
      if (dtype == 1 || isa == 2) {
        b->Args({16, 4, 128, 32, dtype, isa});
        b->Args({8, 4, 128, 64, dtype, isa});
      }
    }
  }
  b->ArgNames({"B", "H", "T", "D", "bf16", "isa"});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

BENCHMARK(BM_CausalAttentionForward)->Apply(Args);
BENCHMARK(BM_CausalAttentionForwardBackward)->Apply(Args);

// As a GPT block calls it: q, k, v read from one (B,T,3C) projection, the
// output (B,T,C) and the gradient (B,T,3C) written in that layout (NOTE
// [attention in the qkv layout]). Same FLOP count as above. cold:1 writes
// 64 MiB elsewhere before each iteration (not timed), so q, k, v and dO
// come from memory as they do in a training step, not from the caches.
void BM_CausalAttentionQkvForwardBackward(benchmark::State& state) {
  IsaScope isa(state);
  const Shape shape = ShapeOf(state);
  const DType dtype = DtypeOf(state);
  const bool cold = state.range(6) == 1;
  const int64_t B = shape[0], H = shape[1], T = shape[2], C = shape[1] * shape[3];
  Tensor qkv = RandomInput({B, T, 3 * C}, dtype, 1).requires_grad_();
  const Tensor dout = RandomInput({B, T, C}, dtype, 4);
  // bf16:2, amp O1's attention: the bf16 qkv quantized to E4M3 (its values
  // are in [-1, 1]: scale 256 keeps them normal) and read as FP8 codes.
  const bool fp8 = state.range(4) == 2;
  std::vector<float> evict(cold ? (size_t{64} << 20) / sizeof(float) : 0);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      for (float& x : evict) x += 1.0f;
      benchmark::DoNotOptimize(evict.data());
      state.ResumeTiming();
    }
    if (fp8)
      CausalAttentionQkvFp8(Quantize(qkv, DType::kFloat8E4M3, 256.0f), H, dtype).Backward(dout);
    else
      CausalAttentionQkv(qkv, H).Backward(dout);
    benchmark::DoNotOptimize(qkv.grad().raw_data());
    qkv.zero_grad();
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(3.5 * ForwardFlops(shape) * state.iterations(), benchmark::Counter::kIsRate);
}
void QkvArgs(benchmark::internal::Benchmark* b) {
  for (int cold : {0, 1}) {
    b->Args({16, 4, 128, 32, 0, 2, cold});
    b->Args({16, 4, 128, 32, 1, 3, cold});
    b->Args({8, 4, 128, 64, 0, 2, cold});
    b->Args({8, 4, 128, 64, 1, 3, cold});
    b->Args({8, 4, 128, 64, 1, 2, cold});  // bf16 on FP32 tiles: the FP32-FMA path's attention
    b->Args({8, 4, 128, 64, 2, 2, cold});  // FP8 qkv, bf16 compute, FP32 tiles: amp O1's attention
    b->Args({4, 12, 256, 64, 1, 2, cold});  // train_step_bench's wide model
    b->Args({4, 12, 256, 64, 2, 2, cold});
  }
  b->ArgNames({"B", "H", "T", "D", "bf16", "isa", "cold"});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}
BENCHMARK(BM_CausalAttentionQkvForwardBackward)->Apply(QkvArgs);

// float32 on CUDA: flash kernels (range 4 == 1) or the unfused path (0).
void BM_CudaAttentionF32ForwardBackward(benchmark::State& state) {
#if OCTET_WITH_CUDA
  if (DeviceCount(DeviceType::kCUDA) == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const Device gpu = CUDA(0);
  const Shape shape = ShapeOf(state);
  const bool flash = state.range(4) == 1;
  const DType dtype = DType::kFloat32;
  const Tensor q = RandomInput(shape, dtype, 1).To(gpu), k = RandomInput(shape, dtype, 2).To(gpu),
               v = RandomInput(shape, dtype, 3).To(gpu), dout = RandomInput(shape, dtype, 4).To(gpu);
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape[3]));
  const TensorOptions io{.dtype = dtype, .device = gpu};
  Tensor out = Empty(shape, io), dq = Empty(shape, io), dk = Empty(shape, io), dv = Empty(shape, io);
  Tensor lse = Empty({shape[0], shape[1], shape[2]}, io);
  const Tensor probe = dq.Select(0, 0).Select(0, 0).Select(0, 0);  // (D,)
  for (auto _ : state) {
    if (flash) {
      cuda::CausalAttentionFwdFlash(q, k, v, scale, out, lse);
      cuda::CausalAttentionBwdFlash(q, k, v, out, dout, lse, scale, dq, dk, dv);
    } else {
      CausalAttentionFwdUnfused(q, k, v, scale, out, lse);
      CausalAttentionBwdUnfused(q, k, v, out, dout, lse, scale, dq, dk, dv);
    }
    benchmark::DoNotOptimize(probe.To(kCPU).raw_data());
  }
  state.SetLabel(flash ? "flash" : "unfused");
  state.counters["FLOP/s"] =
      benchmark::Counter(3.5 * ForwardFlops(shape) * state.iterations(), benchmark::Counter::kIsRate);
#else
  state.SkipWithError("octet was built without the CUDA backend");
#endif
}

BENCHMARK(BM_CudaAttentionF32ForwardBackward)
    ->Args({8, 12, 1024, 64, 1})
    ->Args({8, 12, 1024, 64, 0})
    ->ArgNames({"B", "H", "T", "D", "flash"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace octet
