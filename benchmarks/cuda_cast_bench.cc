// CUDA cast-transpose and multi-tensor gradient-norm benchmarks.
//
//   build/benchmarks/octet_cuda_cast_bench [--benchmark_filter=CastTranspose]
//
// Cast-transpose (x (R, C) -> y (R, C) + yt (C, R) FP8 + amax, optionally
// dbias) at the GEMM shapes of shared/gpu/H100-2026-11-23.md. Device time
// comes from cudaEvents recorded on octet's own stream (octet's streams are
// non-blocking, so the legacy default stream would time nothing). GB/s counts
// bytes read + written; "of_d2d" is that rate over the bandwidth of a
// device-to-device cudaMemcpyAsync measured in the same run (read + write,
// 1 GiB), the practical HBM ceiling.
//
// Gradient norm: multi_tensor_l2_norm over GPT-2 small's 148 parameter
// shapes (float32), against the per-tensor float64 path clip.cc used before
// (one cast + square + reduction per tensor), and the clipping scale.
// Without a CUDA device every case reports an error and is skipped.
#include <benchmark/benchmark.h>

#include <vector>

#include <octet/core/device.h>
#include <octet/core/tensor.h>
#include <octet/ops/cast_kernels.h>
#include <octet/ops/multi_tensor_kernels.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>

#if OCTET_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace octet {
namespace {

#if OCTET_WITH_CUDA

bool HaveCuda() { return DeviceCount(DeviceType::kCUDA) > 0; }
cudaStream_t Stream() { return static_cast<cudaStream_t>(NativeStream(CUDA(0))); }

bool Check(benchmark::State& st, cudaError_t err) {
  if (err == cudaSuccess) return true;
  st.SkipWithError(cudaGetErrorString(err));
  return false;
}

// Device milliseconds per call of fn, averaged over `reps` calls between two events.
template <typename F>
double DeviceMs(benchmark::State& st, F&& fn, int reps) {
  cudaEvent_t a = nullptr, b = nullptr;
  if (!Check(st, cudaEventCreate(&a)) || !Check(st, cudaEventCreate(&b))) return -1.0;
  float ms = -1.0f;
  if (Check(st, cudaEventRecord(a, Stream()))) {
    for (int i = 0; i < reps; ++i) fn();
    if (Check(st, cudaEventRecord(b, Stream())) && Check(st, cudaEventSynchronize(b)))
      Check(st, cudaEventElapsedTime(&ms, a, b));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

// Device-to-device copy bandwidth (GB/s, read + write), measured once.
double CopyGBps(benchmark::State& st) {
  static double gbps = 0.0;
  if (gbps > 0.0) return gbps;
  constexpr int64_t kBytes = int64_t{1} << 30;
  const Tensor src = Zeros({kBytes}, {.dtype = DType::kUInt8, .device = CUDA(0)});
  const Tensor dst = Empty({kBytes}, {.dtype = DType::kUInt8, .device = CUDA(0)});
  auto copy = [&] { cudaMemcpyAsync(dst.raw_data(), src.raw_data(), kBytes, cudaMemcpyDeviceToDevice, Stream()); };
  copy();
  const double ms = DeviceMs(st, copy, 10);
  if (ms > 0.0) gbps = 2.0 * static_cast<double>(kBytes) / (ms * 1e-3) / 1e9;
  return gbps;
}

void BM_CastTranspose(benchmark::State& st, DType xdt, DType fp8, bool with_y, bool with_dbias) {
  if (!HaveCuda()) {
    st.SkipWithError("no CUDA device");
    return;
  }
  const int64_t R = st.range(0), C = st.range(1);
  const Device gpu = CUDA(0);
  const double d2d = CopyGBps(st);
  const Tensor x = Full({R, C}, 1.25, {.dtype = xdt, .device = gpu});
  const Tensor scale = Full({1}, 0.5, {.dtype = DType::kFloat32, .device = gpu});
  const Tensor y = with_y ? Empty({R, C}, {.dtype = fp8, .device = gpu}) : Tensor();
  const Tensor yt = Empty({C, R}, {.dtype = fp8, .device = gpu});
  const Tensor si = Empty({1}, {.device = gpu}), am = Empty({1}, {.device = gpu});
  const Tensor db = with_dbias ? Empty({C}, {.device = gpu}) : Tensor();
  auto run = [&] { quantize_kernel(gpu)(x, scale, Fp8Saturation::kSatFinite, y, yt, si, am, db); };
  run();
  double ms = 0.0;
  for (auto _ : st) {
    ms = DeviceMs(st, run, 20);
    st.SetIterationTime(ms * 1e-3);
  }
  const double bytes = static_cast<double>(R * C) * (static_cast<double>(SizeOf(xdt)) + (with_y ? 2.0 : 1.0)) +
                       (with_dbias ? 4.0 * static_cast<double>(C) : 0.0);
  st.counters["us"] = ms * 1e3;
  st.counters["GB/s"] = bytes / (ms * 1e-3) / 1e9;
  st.counters["d2d_GB/s"] = d2d;
  st.counters["of_d2d"] = d2d > 0.0 ? bytes / (ms * 1e-3) / 1e9 / d2d : 0.0;
}

// GPT-2 small (12 layers, width 768, vocabulary 50257, context 1024).
std::vector<Shape> Gpt2Shapes() {
  std::vector<Shape> s = {{50257, 768}, {1024, 768}, {768}, {768}};
  for (int l = 0; l < 12; ++l)
    for (const Shape& t : std::vector<Shape>{{768}, {768}, {2304, 768}, {2304}, {768, 768}, {768}, {768}, {768},
                                             {3072, 768}, {3072}, {768, 3072}, {768}})
      s.push_back(t);
  return s;
}

enum class NormPath { kMultiTensor, kPerTensorF64, kClipScale };

void BM_GradNorm(benchmark::State& st, NormPath path) {
  if (!HaveCuda()) {
    st.SkipWithError("no CUDA device");
    return;
  }
  const Device gpu = CUDA(0);
  TensorList grads;
  int64_t elems = 0;
  for (const Shape& s : Gpt2Shapes()) {
    grads.push_back(Full(s, 1e-3, {.dtype = DType::kFloat32, .device = gpu}));
    elems += grads.back().numel();
  }
  const Tensor norm = Empty({}, {.dtype = DType::kFloat64, .device = gpu});
  const Tensor big = Full({}, 1e9, {.dtype = DType::kFloat64, .device = gpu});  // coef < 1: every gradient is written
  auto run = [&] {
    switch (path) {
      case NormPath::kMultiTensor: multi_tensor_l2_norm(gpu)(grads, norm); break;
      case NormPath::kPerTensorF64: {
        Tensor total;
        for (const Tensor& g : grads) {
          const Tensor g64 = g.To(DType::kFloat64);
          const Tensor s = Sum(Mul(g64, g64));
          total = total.defined() ? Add(total, s) : s;
        }
        (void)Sqrt(total);
        break;
      }
      case NormPath::kClipScale: multi_tensor_clip_scale(gpu)(grads, big, 1.0, 1e-6); break;
    }
  };
  run();
  double ms = 0.0;
  for (auto _ : st) {
    ms = DeviceMs(st, run, 10);
    st.SetIterationTime(ms * 1e-3);
  }
  const double bytes = 4.0 * static_cast<double>(elems) * (path == NormPath::kClipScale ? 2.0 : 1.0);
  st.counters["us"] = ms * 1e3;
  st.counters["GB/s"] = bytes / (ms * 1e-3) / 1e9;
  st.counters["tensors"] = static_cast<double>(grads.size());
}

#else

void BM_CastTranspose(benchmark::State& st, DType, DType, bool, bool) {
  st.SkipWithError("octet was built without the CUDA backend");
}
enum class NormPath { kMultiTensor, kPerTensorF64, kClipScale };
void BM_GradNorm(benchmark::State& st, NormPath) { st.SkipWithError("octet was built without the CUDA backend"); }

#endif

void Shapes(benchmark::internal::Benchmark* b) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{8192, 768}, {8192, 2304}, {8192, 3072}, {4096, 4096}}) b->Args({r, c});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_CastTranspose, bf16_e4m3, DType::kBFloat16, DType::kFloat8E4M3, true, false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_CastTranspose, f32_e5m2, DType::kFloat32, DType::kFloat8E5M2, true, false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_CastTranspose, bf16_e5m2_dbias, DType::kBFloat16, DType::kFloat8E5M2, true, true)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_CastTranspose, bf16_e5m2_yt_only_dbias, DType::kBFloat16, DType::kFloat8E5M2, false, true)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(BM_GradNorm, multi_tensor, NormPath::kMultiTensor)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GradNorm, per_tensor_f64, NormPath::kPerTensorF64)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GradNorm, clip_scale, NormPath::kClipScale)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace octet
