// CUDA copy (with dtype conversion, any strides) and fill. Conversions are
// ConvertElement (core/dtype_traits.h), the same code the CPU runs, so FP8 /
// bf16 / f16 results are bit-identical across backends. Same-dtype contiguous
// copies are a cudaMemcpyAsync; other contiguous copies and fills use 16-byte
// vector accesses when the pointers allow it.
#include <octet/ops/copy_kernels.h>
#include <octet/ops/cuda/kernel_utils.cuh>

namespace octet::cuda {
namespace {

template <typename To, typename From, int V>
__global__ void CopyContigKernel(const From* __restrict__ src, To* __restrict__ dst, int64_t n) {
  const int64_t tid = GlobalThreadId(), stride = GridStride();
  const int64_t nvec = n / V;
  const auto* sv = reinterpret_cast<const VecT<From, V>*>(src);
  auto* dv = reinterpret_cast<VecT<To, V>*>(dst);
  for (int64_t i = tid; i < nvec; i += stride) {
    const VecT<From, V> a = sv[i];
    VecT<To, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = ConvertElement<To>(a.v[k]);
    dv[i] = o;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride) dst[i] = ConvertElement<To>(src[i]);
}

template <typename To, typename From>
__global__ void CopyStridedKernel(const From* src, To* dst, int64_t n, OffsetCalc<2> calc) {
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    int64_t off[2];
    calc.Get(i, off);
    dst[off[0]] = ConvertElement<To>(src[off[1]]);
  }
}

template <typename T, int V>
__global__ void FillContigKernel(T* __restrict__ dst, int64_t n, T value) {
  const int64_t tid = GlobalThreadId(), stride = GridStride();
  const int64_t nvec = n / V;
  VecT<T, V> o;
#pragma unroll
  for (int k = 0; k < V; ++k) o.v[k] = value;
  auto* dv = reinterpret_cast<VecT<T, V>*>(dst);
  for (int64_t i = tid; i < nvec; i += stride) dv[i] = o;
  for (int64_t i = nvec * V + tid; i < n; i += stride) dst[i] = value;
}

template <typename T>
__global__ void FillStridedKernel(T* dst, int64_t n, OffsetCalc<1> calc, T value) {
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    int64_t off[1];
    calc.Get(i, off);
    dst[off[0]] = value;
  }
}

template <typename To, typename From>
void CopyTyped(const KernelContext& ctx, const Tensor& src, const Tensor& dst) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const From* s = static_cast<const From*>(src.raw_data());
  To* d = static_cast<To*>(dst.raw_data());
  if (src.is_contiguous() && dst.is_contiguous()) {
    if constexpr (std::is_same_v<To, From>) {
      OCTET_CUDA_CHECK(cudaMemcpyAsync(d, s, static_cast<size_t>(n) * sizeof(To), cudaMemcpyDeviceToDevice,
                                       ctx.stream()));
      return;
    } else {
      constexpr int V = kVecWidth<To, From>;
      const uintptr_t addrs[2] = {Addr(src), Addr(dst)};
      const int sizes[2] = {static_cast<int>(sizeof(From)), static_cast<int>(sizeof(To))};
      if (PickVectorWidth(addrs, sizes, 2) == V) {
        CopyContigKernel<To, From, V><<<ctx.Grid((n + V - 1) / V), kElementwiseThreads, 0, ctx.stream()>>>(s, d, n);
        OCTET_CUDA_LAUNCH_CHECK("copy (contiguous)");
        return;
      }
    }
  }
  const auto calc = MakeOffsetCalc<2>(dst.shape(), {&dst, &src}, "copy");
  CopyStridedKernel<To, From><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(s, d, n, calc);
  OCTET_CUDA_LAUNCH_CHECK("copy (strided)");
}

void CopyCuda(const Tensor& src, const Tensor& dst) {
  OCTET_CHECK(src.device() == dst.device(), "copy (cuda): src ", Describe(src), " and dst ", Describe(dst),
              " must be on the same device");
  KernelContext ctx(dst.device());
  DispatchAll(dst.dtype(), "copy", [&]<typename To>() {
    DispatchAll(src.dtype(), "copy", [&]<typename From>() { CopyTyped<To, From>(ctx, src, dst); });
  });
}

void FillCuda(const Tensor& dst, double value) {
  KernelContext ctx(dst.device());
  DispatchAll(dst.dtype(), "fill", [&]<typename T>() {
    const int64_t n = dst.numel();
    if (n == 0) return;
    const T v = ConvertElement<T>(value);
    T* d = dst.data<T>();
    constexpr int V = kVecWidth<T>;
    const uintptr_t addr = Addr(dst);
    const int size = static_cast<int>(sizeof(T));
    if (dst.is_contiguous() && PickVectorWidth(&addr, &size, 1) == V) {
      FillContigKernel<T, V><<<ctx.Grid((n + V - 1) / V), kElementwiseThreads, 0, ctx.stream()>>>(d, n, v);
      OCTET_CUDA_LAUNCH_CHECK("fill (contiguous)");
      return;
    }
    const auto calc = MakeOffsetCalc<1>(dst.shape(), {&dst}, "fill");
    FillStridedKernel<T><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(d, n, calc, v);
    OCTET_CUDA_LAUNCH_CHECK("fill (strided)");
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(copy_kernel, DeviceType::kCUDA, &CopyCuda);
OCTET_REGISTER_KERNEL(fill_kernel, DeviceType::kCUDA, &FillCuda);

}  // namespace octet::cuda
