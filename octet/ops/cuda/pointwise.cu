// CUDA kernels of the pointwise family. The math is the functors of
// ops/functors.h (shared with the CPU kernels), run in the compute type
// (AccType). Contiguous operands take the 16-byte vector path when every
// pointer is aligned (PickVectorWidth); everything else (broadcast, strided,
// misaligned) goes through the coalesced strided path.
#include <algorithm>

#include <octet/ops/cuda/cast_device.cuh>
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/pointwise_kernels.h>

namespace octet::cuda {
namespace {

// ---- kernels -------------------------------------------------------------------

template <typename T, int V, typename F>
__global__ void UnaryContigKernel(const T* __restrict__ x, T* __restrict__ out, int64_t n, F f,
                                  AccType<T> alpha) {
  using A = AccType<T>;
  const int64_t tid = GlobalThreadId(), stride = GridStride();
  const int64_t nvec = n / V;
  const auto* xv = reinterpret_cast<const VecT<T, V>*>(x);
  auto* ov = reinterpret_cast<VecT<T, V>*>(out);
  for (int64_t i = tid; i < nvec; i += stride) {
    const VecT<T, V> a = xv[i];
    VecT<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = ConvertElement<T>(f(ConvertElement<A>(a.v[k]), alpha));
    ov[i] = o;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride) out[i] = ConvertElement<T>(f(ConvertElement<A>(x[i]), alpha));
}

template <typename T, typename F>
__global__ void UnaryStridedKernel(const T* x, T* out, int64_t n, OffsetCalc<2> calc, F f, AccType<T> alpha) {
  using A = AccType<T>;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    int64_t off[2];
    calc.Get(i, off);
    out[off[0]] = ConvertElement<T>(f(ConvertElement<A>(x[off[1]]), alpha));
  }
}

template <typename T, int V, typename F>
__global__ void BinaryContigKernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                   int64_t n, F f, AccType<T> alpha) {
  using A = AccType<T>;
  const int64_t tid = GlobalThreadId(), stride = GridStride();
  const int64_t nvec = n / V;
  const auto* av = reinterpret_cast<const VecT<T, V>*>(a);
  const auto* bv = reinterpret_cast<const VecT<T, V>*>(b);
  auto* ov = reinterpret_cast<VecT<T, V>*>(out);
  for (int64_t i = tid; i < nvec; i += stride) {
    const VecT<T, V> x = av[i], y = bv[i];
    VecT<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k)
      o.v[k] = ConvertElement<T>(f(ConvertElement<A>(x.v[k]), ConvertElement<A>(y.v[k]), alpha));
    ov[i] = o;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride)
    out[i] = ConvertElement<T>(f(ConvertElement<A>(a[i]), ConvertElement<A>(b[i]), alpha));
}

template <typename T, typename F>
__global__ void BinaryStridedKernel(const T* a, const T* b, T* out, int64_t n, OffsetCalc<3> calc, F f,
                                    AccType<T> alpha) {
  using A = AccType<T>;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    int64_t off[3];
    calc.Get(i, off);
    out[off[0]] = ConvertElement<T>(f(ConvertElement<A>(a[off[1]]), ConvertElement<A>(b[off[2]]), alpha));
  }
}

template <typename T>
__global__ void CompareKernel(CompareOp op, const T* a, const T* b, bool* out, int64_t n, OffsetCalc<3> calc) {
  using A = AccType<T>;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    int64_t off[3];
    calc.Get(i, off);
    out[off[0]] = functors::Compare(op, ConvertElement<A>(a[off[1]]), ConvertElement<A>(b[off[2]]));
  }
}

template <typename T>
__global__ void WhereKernel(const bool* cond, const T* a, const T* b, T* out, int64_t n, OffsetCalc<4> calc) {
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    int64_t off[4];
    calc.Get(i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// ---- host launchers ----------------------------------------------------------------

template <typename T>
bool VectorPathApplies(std::initializer_list<const Tensor*> ops) {
  uintptr_t addrs[4];
  int sizes[4];
  int n = 0;
  for (const Tensor* t : ops) {
    if (!t->is_contiguous()) return false;
    addrs[n] = Addr(*t);
    sizes[n] = static_cast<int>(sizeof(T));
    ++n;
  }
  return PickVectorWidth(addrs, sizes, n) == kVecWidth<T>;
}

template <typename T, typename F>
void LaunchUnary(const KernelContext& ctx, const Tensor& x, const Tensor& out, F f, double alpha_d) {
  using A = AccType<T>;
  const int64_t n = out.numel();
  if (n == 0) return;
  const A alpha = static_cast<A>(alpha_d);
  if (VectorPathApplies<T>({&x, &out})) {
    constexpr int V = kVecWidth<T>;
    UnaryContigKernel<T, V><<<ctx.Grid((n + V - 1) / V), kElementwiseThreads, 0, ctx.stream()>>>(
        x.data<T>(), out.data<T>(), n, f, alpha);
    OCTET_CUDA_LAUNCH_CHECK("unary (contiguous)");
    return;
  }
  const auto calc = MakeOffsetCalc<2>(out.shape(), {&out, &x}, "unary");
  UnaryStridedKernel<T><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(x.data<T>(), out.data<T>(), n,
                                                                                calc, f, alpha);
  OCTET_CUDA_LAUNCH_CHECK("unary (strided)");
}

template <typename T, typename F>
void LaunchBinary(const KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, F f,
                  double alpha_d) {
  using A = AccType<T>;
  const int64_t n = out.numel();
  if (n == 0) return;
  const A alpha = static_cast<A>(alpha_d);
  if (VectorPathApplies<T>({&a, &b, &out})) {
    constexpr int V = kVecWidth<T>;
    BinaryContigKernel<T, V><<<ctx.Grid((n + V - 1) / V), kElementwiseThreads, 0, ctx.stream()>>>(
        a.data<T>(), b.data<T>(), out.data<T>(), n, f, alpha);
    OCTET_CUDA_LAUNCH_CHECK("binary (contiguous)");
    return;
  }
  const auto calc = MakeOffsetCalc<3>(out.shape(), {&out, &a, &b}, "binary");
  BinaryStridedKernel<T><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(a.data<T>(), b.data<T>(),
                                                                                 out.data<T>(), n, calc, f, alpha);
  OCTET_CUDA_LAUNCH_CHECK("binary (strided)");
}

template <typename T>
void UnaryTyped(const KernelContext& ctx, UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  using functors::UnaryFn;
  switch (op) {
#define OCTET_UNARY_CASE(OP) \
  case UnaryOp::OP:          \
    return LaunchUnary<T>(ctx, x, out, UnaryFn<UnaryOp::OP>{}, alpha);
    OCTET_FOR_EACH_UNARY_OP(OCTET_UNARY_CASE)
#undef OCTET_UNARY_CASE
    default: OCTET_FAIL("unary kernel (cuda): unknown op ", static_cast<int>(op));
  }
}

// GeluFp8 (NOTE [gelu to fp8] in ops/pointwise.cc): Quantize's kernel
// (QuantizeMappedKernel, ops/cuda/cast_device.cuh) with Gelu's functor as its
// map. g = gelu(x) in AccType<T> rounded to f32 once (f64 x computes in f64,
// as the CPU kernel), |g| into the block's amax (one atomic per block, NOTE
// [amax on the device]; zeroed first), q = fp8(g * scale) with the pair
// conversion for kSatFinite (NOTE [hardware fp8 conversion]).
//   x (n) contiguous T; q (n) FP8; scale, scale_inv, amax: [1] f32.
template <typename T>
struct GeluToFloat {
  __device__ __forceinline__ float operator()(T v) const {
    using A = AccType<T>;
    return static_cast<float>(functors::UnaryFn<UnaryOp::kGelu>{}(ConvertElement<A>(v), A(0)));
  }
};

void GeluFp8Cuda(const Tensor& x, const Tensor& scale, Fp8Saturation sat, const Tensor& q, const Tensor& scale_inv,
                 const Tensor& amax) {
  KernelContext ctx(x.device());
  const int64_t n = x.numel();
  ZeroAmax(amax.data<float>(), ctx.stream());
  DispatchFloat(x.dtype(), "gelu_fp8", [&]<typename T>() {
    DispatchFp8(q.dtype(), "gelu_fp8", [&]<typename F8>() {
      LaunchQuantizeMapped(ctx, x.data<T>(), q.data<F8>(), n, scale.data<float>(), sat, scale_inv.data<float>(),
                           amax.data<float>(), GeluToFloat<T>{}, "gelu_fp8");
    });
  });
}

template <typename T>
void BinaryTyped(const KernelContext& ctx, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                 double alpha) {
  using functors::BinaryFn;
  switch (op) {
#define OCTET_BINARY_CASE(OP) \
  case BinaryOp::OP:          \
    return LaunchBinary<T>(ctx, a, b, out, BinaryFn<BinaryOp::OP>{}, alpha);
    OCTET_FOR_EACH_BINARY_OP(OCTET_BINARY_CASE)
#undef OCTET_BINARY_CASE
    default: OCTET_FAIL("binary kernel (cuda): unknown op ", static_cast<int>(op));
  }
}

void UnaryCuda(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  KernelContext ctx(out.device());
  DispatchFloat(out.dtype(), Name(op), [&]<typename T>() { UnaryTyped<T>(ctx, op, x, out, alpha); });
}

void BinaryCuda(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  KernelContext ctx(out.device());
  DispatchFloat(out.dtype(), Name(op), [&]<typename T>() { BinaryTyped<T>(ctx, op, a, b, out, alpha); });
}

void CompareCuda(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  KernelContext ctx(out.device());
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64,
           DType::kUInt8, DType::kBool>(a.dtype(), Name(op), [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    const auto calc = MakeOffsetCalc<3>(out.shape(), {&out, &a, &b}, Name(op));
    CompareKernel<T><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(op, a.data<T>(), b.data<T>(),
                                                                             out.data<bool>(), n, calc);
    OCTET_CUDA_LAUNCH_CHECK("compare");
  });
}

void WhereCuda(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  KernelContext ctx(out.device());
  DispatchFloat(out.dtype(), "where", [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    const auto calc = MakeOffsetCalc<4>(out.shape(), {&out, &cond, &a, &b}, "where");
    WhereKernel<T><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(cond.data<bool>(), a.data<T>(),
                                                                           b.data<T>(), out.data<T>(), n, calc);
    OCTET_CUDA_LAUNCH_CHECK("where");
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(unary_kernel, DeviceType::kCUDA, &UnaryCuda);
OCTET_REGISTER_KERNEL(binary_kernel, DeviceType::kCUDA, &BinaryCuda);
OCTET_REGISTER_KERNEL(compare_kernel, DeviceType::kCUDA, &CompareCuda);
OCTET_REGISTER_KERNEL(where_kernel, DeviceType::kCUDA, &WhereCuda);
OCTET_REGISTER_KERNEL(gelu_fp8_kernel, DeviceType::kCUDA, &GeluFp8Cuda);

}  // namespace octet::cuda
