// CUDA kernels of the softmax & loss family: softmax / log-softmax forward and
// backward over any dim, and the fused softmax-cross-entropy of NOTE [fused
// cross-entropy] (ops/cpu/cross_entropy_cpu.cc): forward writes only the
// per-row loss and logsumexp; backward recomputes softmax = exp(x - lse)
// element by element, so no (N, V) probability tensor exists.
//
// Softmax over the last dim: one block per row (RowThreads(n) threads), max
// and sum by block reductions. Over another dim: one thread per (outer, inner)
// column walking down n, so neighbouring threads read neighbouring addresses.
// The formulas are the CPU kernels' (same operation order); exponentials are
// functors::Exp (hardware expf on the device, NOTE [fast exp] on the CPU).
#include <octet/core/host_reads.h>
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/functors.h>
#include <octet/ops/softmax_kernels.h>

namespace octet::cuda {
namespace {

using functors::Exp;

struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};
// Max that skips NaN (a NaN element comes back through exp(NaN - max)).
struct MaxOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};

template <typename T>
__device__ __forceinline__ AccType<T> Load(const T* p, int64_t i) {
  return ConvertElement<AccType<T>>(p[i]);
}

template <typename A>
__device__ __forceinline__ A NegInf() {
  return -std::numeric_limits<A>::infinity();
}

// max and log(sum(exp(x - max))) of a row, on every thread of the block.
template <typename T>
__device__ __forceinline__ void RowMaxLogSum(const T* xr, int64_t n, AccType<T>* shared, AccType<T>* m_out,
                                             AccType<T>* s_out) {
  using A = AccType<T>;
  A m = NegInf<A>();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = MaxOp{}(m, Load(xr, i));
  m = BlockAllReduce(m, MaxOp{}, NegInf<A>(), shared);
  A s = A(0);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += Exp(Load(xr, i) - m);
  s = BlockAllReduce(s, SumOp{}, A(0), shared);
  *m_out = m;
  *s_out = s;
}

template <typename T>
__global__ void SoftmaxRowsKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n, bool log) {
  using A = AccType<T>;
  __shared__ A shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    A m, s;
    RowMaxLogSum(xr, n, shared, &m, &s);
    if (log) {
      // (x - m) - log(s), not x - (m + log(s)): see the CPU kernel.
      const A log_s = ::log(s);
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = ConvertElement<T>((Load(xr, i) - m) - log_s);
    } else {
      const A inv = A(1) / s;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = ConvertElement<T>(Exp(Load(xr, i) - m) * inv);
    }
  }
}

template <typename T>
__global__ void SoftmaxBwdRowsKernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                                     int64_t rows, int64_t n, bool log) {
  using A = AccType<T>;
  __shared__ A shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* dyr = dy + row * n;
    const T* yr = y + row * n;
    T* dxr = dx + row * n;
    A s = A(0);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += log ? Load(dyr, i) : Load(dyr, i) * Load(yr, i);
    s = BlockAllReduce(s, SumOp{}, A(0), shared);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const A g = Load(dyr, i), yv = Load(yr, i);
      dxr[i] = ConvertElement<T>(log ? g - Exp(yv) * s : yv * (g - s));
    }
  }
}

// (outer, n, inner), inner > 1: one thread per (outer, inner) column.
template <typename T>
__global__ void SoftmaxColsKernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                                  int64_t inner, bool log) {
  using A = AccType<T>;
  for (int64_t t = GlobalThreadId(); t < outer * inner; t += GridStride()) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    A m = Load(x, base);
    for (int64_t k = 1; k < n; ++k) m = MaxOp{}(m, Load(x, base + k * inner));
    A s = A(0);
    for (int64_t k = 0; k < n; ++k) s += Exp(Load(x, base + k * inner) - m);
    s = log ? ::log(s) : A(1) / s;
    for (int64_t k = 0; k < n; ++k) {
      const A v = Load(x, base + k * inner);
      y[base + k * inner] = ConvertElement<T>(log ? (v - m) - s : Exp(v - m) * s);
    }
  }
}

template <typename T>
__global__ void SoftmaxBwdColsKernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                                     int64_t outer, int64_t n, int64_t inner, bool log) {
  using A = AccType<T>;
  for (int64_t t = GlobalThreadId(); t < outer * inner; t += GridStride()) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    A s = A(0);
    for (int64_t k = 0; k < n; ++k) {
      const A g = Load(dy, base + k * inner);
      s += log ? g : g * Load(y, base + k * inner);
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      const A g = Load(dy, i), yv = Load(y, i);
      dx[i] = ConvertElement<T>(log ? g - Exp(yv) * s : yv * (g - s));
    }
  }
}

unsigned RowGrid(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, (int64_t{1} << 31) - 1)); }

void SoftmaxFwdCuda(const Tensor& x, bool log, const Tensor& y) {
  const int64_t outer = x.shape()[0], n = x.shape()[1], inner = x.shape()[2];
  if (outer * n * inner == 0) return;
  KernelContext ctx(x.device());
  DispatchFloat(x.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    if (inner == 1) {
      SoftmaxRowsKernel<T><<<RowGrid(outer), RowThreads(n), 0, ctx.stream()>>>(x.data<T>(), y.data<T>(), outer, n,
                                                                               log);
    } else {
      SoftmaxColsKernel<T><<<ctx.Grid(outer * inner), kElementwiseThreads, 0, ctx.stream()>>>(
          x.data<T>(), y.data<T>(), outer, n, inner, log);
    }
    OCTET_CUDA_LAUNCH_CHECK("softmax forward");
  });
}

void SoftmaxBwdCuda(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx) {
  const int64_t outer = y.shape()[0], n = y.shape()[1], inner = y.shape()[2];
  if (outer * n * inner == 0) return;
  KernelContext ctx(y.device());
  DispatchFloat(y.dtype(), log ? "log_softmax backward" : "softmax backward", [&]<typename T>() {
    if (inner == 1) {
      SoftmaxBwdRowsKernel<T><<<RowGrid(outer), RowThreads(n), 0, ctx.stream()>>>(dy.data<T>(), y.data<T>(),
                                                                                  dx.data<T>(), outer, n, log);
    } else {
      SoftmaxBwdColsKernel<T><<<ctx.Grid(outer * inner), kElementwiseThreads, 0, ctx.stream()>>>(
          dy.data<T>(), y.data<T>(), dx.data<T>(), outer, n, inner, log);
    }
    OCTET_CUDA_LAUNCH_CHECK("softmax backward");
  });
}

// ---- cross-entropy ------------------------------------------------------------------

// status[0]: smallest position of a bad target (ULLONG_MAX: none);
// status[1]: number of targets that are not ignore_index.
template <typename I>
__global__ void ValidateTargetsKernel(const I* __restrict__ t, int64_t n, int64_t v, int64_t ignore_index,
                                      unsigned long long* status) {
  unsigned long long count = 0;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    const int64_t ti = static_cast<int64_t>(t[i]);
    if (ti == ignore_index) continue;
    if (ti < 0 || ti >= v) {
      atomicMin(&status[0], static_cast<unsigned long long>(i));
    } else {
      ++count;
    }
  }
  if (count > 0) atomicAdd(&status[1], count);
}

template <typename T, typename I>
__global__ void CrossEntropyFwdKernel(const T* __restrict__ logits, const I* __restrict__ targets, int64_t n,
                                      int64_t v, int64_t ignore_index, AccType<T>* __restrict__ loss,
                                      AccType<T>* __restrict__ lse) {
  using A = AccType<T>;
  __shared__ A shared[32];
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const T* xr = logits + row * v;
    A m, s;
    RowMaxLogSum(xr, v, shared, &m, &s);
    if (threadIdx.x == 0) {
      const A log_s = ::log(s);
      const int64_t ti = static_cast<int64_t>(targets[row]);
      lse[row] = m + log_s;
      loss[row] = ti == ignore_index ? A(0) : log_s - (Load(xr, ti) - m);
    }
  }
}

template <typename T, typename I>
__global__ void CrossEntropyBwdKernel(const T* __restrict__ logits, const I* __restrict__ targets,
                                      const AccType<T>* __restrict__ lse, const AccType<T>* __restrict__ dloss,
                                      int64_t dloss_stride, double scale, int64_t ignore_index, int64_t n, int64_t v,
                                      T* __restrict__ dlogits) {
  using A = AccType<T>;
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int64_t ti = static_cast<int64_t>(targets[row]);
    T* dr = dlogits + row * v;
    if (ti == ignore_index) {
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) dr[j] = ConvertElement<T>(A(0));
      continue;
    }
    const A g = static_cast<A>(static_cast<double>(dloss[row * dloss_stride]) * scale);
    const A l = lse[row];
    const T* xr = logits + row * v;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      A d = Exp(Load(xr, j) - l) * g;
      if (j == ti) d -= g;
      dr[j] = ConvertElement<T>(d);
    }
  }
}

template <typename T, typename I>
CrossEntropyFwdResult CrossEntropyFwdTyped(const KernelContext& ctx, const Tensor& logits, const Tensor& targets,
                                           int64_t ignore_index, const Tensor& loss, const Tensor& lse,
                                           bool prechecked) {
  using A = AccType<T>;
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  CrossEntropyFwdResult r;
  if (n == 0) return r;
  const I* t = targets.data<I>();
  if (!prechecked) {  // NOTE [deferred index checks]: otherwise no check and no host read here
    // Validate every target before computing (one host synchronisation).
    const Tensor status = Empty({2}, {.dtype = DType::kInt64, .device = logits.device()});
    auto* st = static_cast<unsigned long long*>(status.raw_data());
    OCTET_CUDA_CHECK(cudaMemsetAsync(st, 0xFF, sizeof(unsigned long long), ctx.stream()));
    OCTET_CUDA_CHECK(cudaMemsetAsync(st + 1, 0, sizeof(unsigned long long), ctx.stream()));
    ValidateTargetsKernel<I><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(t, n, v, ignore_index, st);
    OCTET_CUDA_LAUNCH_CHECK("cross_entropy (target check)");
    unsigned long long host[2] = {0, 0};
    internal::CountHostRead();  // NOTE [host reads]
    OCTET_CUDA_CHECK(cudaMemcpyAsync(host, st, sizeof(host), cudaMemcpyDeviceToHost, ctx.stream()));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
    if (host[0] != ~0ull) {
      r.bad_position = static_cast<int64_t>(host[0]);
      I bad = 0;
      internal::CountHostRead();  // NOTE [host reads]
      OCTET_CUDA_CHECK(cudaMemcpyAsync(&bad, t + r.bad_position, sizeof(I), cudaMemcpyDeviceToHost, ctx.stream()));
      OCTET_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
      r.bad_value = static_cast<int64_t>(bad);
      return r;
    }
    r.count = static_cast<int64_t>(host[1]);
  }
  CrossEntropyFwdKernel<T, I><<<RowGrid(n), RowThreads(v), 0, ctx.stream()>>>(
      logits.data<T>(), t, n, v, ignore_index, loss.data<A>(), lse.data<A>());
  OCTET_CUDA_LAUNCH_CHECK("cross_entropy forward");
  return r;
}

CrossEntropyFwdResult CrossEntropyFwdCuda(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                          const Tensor& loss, const Tensor& lse, bool prechecked) {
  KernelContext ctx(logits.device());
  CrossEntropyFwdResult result;
  DispatchFloat(logits.dtype(), "cross_entropy", [&]<typename T>() {
    Dispatch<DType::kInt64, DType::kInt32>(targets.dtype(), "cross_entropy", [&]<typename I>() {
      result = CrossEntropyFwdTyped<T, I>(ctx, logits, targets, ignore_index, loss, lse, prechecked);
    });
  });
  return result;
}

void CrossEntropyBwdCuda(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                         double scale, int64_t ignore_index, const Tensor& dlogits) {
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  if (n == 0 || v == 0) return;
  KernelContext ctx(logits.device());
  DispatchFloat(logits.dtype(), "cross_entropy backward", [&]<typename T>() {
    using A = AccType<T>;
    Dispatch<DType::kInt64, DType::kInt32>(targets.dtype(), "cross_entropy backward", [&]<typename I>() {
      CrossEntropyBwdKernel<T, I><<<RowGrid(n), RowThreads(v), 0, ctx.stream()>>>(
          logits.data<T>(), targets.data<I>(), lse.data<A>(), dloss.data<A>(), dloss.stride(0), scale, ignore_index,
          n, v, dlogits.data<T>());
      OCTET_CUDA_LAUNCH_CHECK("cross_entropy backward");
    });
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(softmax_fwd, DeviceType::kCUDA, &SoftmaxFwdCuda);
OCTET_REGISTER_KERNEL(softmax_bwd, DeviceType::kCUDA, &SoftmaxBwdCuda);
OCTET_REGISTER_KERNEL(cross_entropy_fwd, DeviceType::kCUDA, &CrossEntropyFwdCuda);
OCTET_REGISTER_KERNEL(cross_entropy_bwd, DeviceType::kCUDA, &CrossEntropyBwdCuda);

}  // namespace octet::cuda
