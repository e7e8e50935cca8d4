// CUDA kernels of the multi-tensor family (ops/multi_tensor_kernels.h): the
// global L2 norm of a list of tensors in ceil(n / 64) launches per dtype plus
// one final block, and clipping in place by that norm read on the device.
// Launches follow PlanMultiTensor (NOTE [multi-tensor chunks] in
// ops/multi_tensor_plan.h); nothing is copied to or read from the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <octet/core/dtype_traits.h>
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/multi_tensor_kernels.h>
#include <octet/ops/multi_tensor_plan.h>

namespace octet::cuda {
namespace {

constexpr int kMtThreads = 512;

// One launch's tensors, passed by value in the kernel parameters (~1.6 KB).
struct MtArgs {
  void* ptr[kMultiTensorMaxPerLaunch];
  int64_t numel[kMultiTensorMaxPerLaunch];
  int64_t chunk_begin[kMultiTensorMaxPerLaunch + 1];
  int count;
  int64_t first_chunk;
};

// The chunk of this block: tensor index, element range [begin, end).
__device__ __forceinline__ int MtChunk(const MtArgs& a, int64_t* begin, int64_t* end) {
  const int64_t c = blockIdx.x;
  const int t = MultiTensorOwner(a.chunk_begin, a.count, c);
  *begin = (c - a.chunk_begin[t]) * kMultiTensorChunk;
  const int64_t stop = *begin + kMultiTensorChunk;
  *end = a.numel[t] < stop ? a.numel[t] : stop;
  return t;
}

// Sum of squares accumulated in A (f32, f64 for f64 tensors).
template <typename T>
using MtAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// partial[first_chunk + chunk] = sum of x^2 over the block's chunk, reduced
// in a fixed order (each thread its elements in order, then a fixed tree).
template <typename T>
__global__ void __launch_bounds__(kMtThreads) MtSumSquaresKernel(const __grid_constant__ MtArgs a, double* partial) {
  using A = MtAcc<T>;
  constexpr int V = 16 / sizeof(T);
  __shared__ A shared[32];
  int64_t begin, end;
  const int t = MtChunk(a, &begin, &end);
  const T* x = static_cast<const T*>(a.ptr[t]);
  A acc = A(0);
  // Chunk starts are multiples of kMultiTensorChunk elements: a 16-byte
  // aligned tensor stays aligned at every chunk.
  int64_t i = begin;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const int64_t nvec = (end - begin) / V;
    const auto* xv = reinterpret_cast<const VecT<T, V>*>(x + begin);
    for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
      const VecT<T, V> v = xv[k];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A f = ConvertElement<A>(v.v[j]);
        acc += f * f;
      }
    }
    i = begin + nvec * V;
  }
  for (int64_t k = i + threadIdx.x; k < end; k += blockDim.x) {
    const A f = ConvertElement<A>(x[k]);
    acc += f * f;
  }
  acc = BlockAllReduce(acc, [](A p, A q) { return p + q; }, A(0), shared);
  if (threadIdx.x == 0) partial[a.first_chunk + blockIdx.x] = static_cast<double>(acc);
}

// norm[0] = sqrt(sum of partial[0, n)): thread k adds k, k + blockDim, ... in
// order, then a fixed tree. One block.
__global__ void MtFinalNormKernel(const double* partial, int64_t n, double* norm) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += partial[k];
  s = BlockAllReduce(s, [](double p, double q) { return p + q; }, 0.0, shared);
  if (threadIdx.x == 0) norm[0] = sqrt(s);
}

// x *= coef in the block's chunk when the norm asks for clipping.
template <typename T>
__global__ void __launch_bounds__(kMtThreads)
    MtClipScaleKernel(const __grid_constant__ MtArgs a, const double* norm, double max_norm, double eps) {
  const double total = *norm;
  if (!isfinite(total)) return;  // NOTE [non-finite gradient norm] in optim/clip.h
  const double coef = max_norm / (total + eps);
  if (!(coef < 1.0)) return;
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const C c = static_cast<C>(coef);
  constexpr int V = 16 / sizeof(T);
  int64_t begin, end;
  const int t = MtChunk(a, &begin, &end);
  T* x = static_cast<T*>(a.ptr[t]);
  int64_t i = begin;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const int64_t nvec = (end - begin) / V;
    auto* xv = reinterpret_cast<VecT<T, V>*>(x + begin);
    for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
      VecT<T, V> v = xv[k];
#pragma unroll
      for (int j = 0; j < V; ++j) v.v[j] = ConvertElement<T>(ConvertElement<C>(v.v[j]) * c);
      xv[k] = v;
    }
    i = begin + nvec * V;
  }
  for (int64_t k = i + threadIdx.x; k < end; k += blockDim.x) x[k] = ConvertElement<T>(ConvertElement<C>(x[k]) * c);
}

// The plan of `xs`, grouped by dtype, after checking them.
std::vector<MultiTensorLaunch> Plan(const char* op, const TensorList& xs, Device device) {
  std::vector<int64_t> numels;
  std::vector<int> groups;
  for (const Tensor& x : xs) {
    OCTET_CHECK(x.defined() && x.device() == device && IsUnscaledFloat(x.dtype()), op,
                ": expects float32/float64/bfloat16/float16 tensors on ", device, ", got ",
                x.defined() ? Describe(x) : "an undefined tensor");
    OCTET_CHECK(x.is_contiguous(), op, ": ", Describe(x), " must be contiguous");
    numels.push_back(x.numel());
    groups.push_back(static_cast<int>(x.dtype()));
  }
  return PlanMultiTensor(numels, groups);
}

MtArgs Args(const MultiTensorLaunch& l, const TensorList& xs) {
  MtArgs a{};
  a.count = static_cast<int>(l.tensors.size());
  a.first_chunk = l.first_chunk;
  for (int k = 0; k < a.count; ++k) {
    const Tensor& x = xs[l.tensors[k]];
    a.ptr[k] = x.raw_data();
    a.numel[k] = x.numel();
  }
  for (size_t k = 0; k < l.chunk_begin.size(); ++k) a.chunk_begin[k] = l.chunk_begin[k];
  return a;
}

double* NormPtr(const char* op, const Tensor& norm, Device device) {
  OCTET_CHECK(norm.defined() && norm.dtype() == DType::kFloat64 && norm.numel() == 1 && norm.device() == device, op,
              ": norm must be a float64 tensor with one element on ", device, ", got ",
              norm.defined() ? Describe(norm) : "none");
  return norm.data<double>();
}

void L2NormCuda(const TensorList& xs, const Tensor& norm) {
  constexpr const char* op = "multi_tensor_l2_norm (CUDA)";
  const Device device = norm.device();
  OCTET_CHECK(device.is_cuda(), op, ": norm ", Describe(norm), " is not on a CUDA device");
  double* norm_p = NormPtr(op, norm, device);
  const std::vector<MultiTensorLaunch> plan = Plan(op, xs, device);
  KernelContext ctx(device);
  const int64_t chunks = MultiTensorChunks(plan);
  const Tensor partial = Empty({std::max<int64_t>(chunks, 1)}, {.dtype = DType::kFloat64, .device = device});
  double* partial_p = partial.data<double>();
  for (const MultiTensorLaunch& l : plan) {
    const MtArgs a = Args(l, xs);
    Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16>(
        xs[l.tensors[0]].dtype(), op, [&]<typename T>() {
          MtSumSquaresKernel<T><<<static_cast<unsigned>(l.chunks()), kMtThreads, 0, ctx.stream()>>>(a, partial_p);
          OCTET_CUDA_LAUNCH_CHECK("MtSumSquaresKernel");
        });
  }
  MtFinalNormKernel<<<1, 1024, 0, ctx.stream()>>>(partial_p, chunks, norm_p);
  OCTET_CUDA_LAUNCH_CHECK("MtFinalNormKernel");
}

void ClipScaleCuda(const TensorList& xs, const Tensor& norm, double max_norm, double eps) {
  constexpr const char* op = "multi_tensor_clip_scale (CUDA)";
  const Device device = norm.device();
  OCTET_CHECK(device.is_cuda(), op, ": norm ", Describe(norm), " is not on a CUDA device");
  const double* norm_p = NormPtr(op, norm, device);
  const std::vector<MultiTensorLaunch> plan = Plan(op, xs, device);
  KernelContext ctx(device);
  for (const MultiTensorLaunch& l : plan) {
    const MtArgs a = Args(l, xs);
    Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16>(
        xs[l.tensors[0]].dtype(), op, [&]<typename T>() {
          MtClipScaleKernel<T>
              <<<static_cast<unsigned>(l.chunks()), kMtThreads, 0, ctx.stream()>>>(a, norm_p, max_norm, eps);
          OCTET_CUDA_LAUNCH_CHECK("MtClipScaleKernel");
        });
  }
}

}  // namespace

OCTET_REGISTER_KERNEL(multi_tensor_l2_norm, DeviceType::kCUDA, &L2NormCuda);
OCTET_REGISTER_KERNEL(multi_tensor_clip_scale, DeviceType::kCUDA, &ClipScaleCuda);

}  // namespace octet::cuda
