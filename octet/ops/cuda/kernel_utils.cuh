// Device-side helpers shared by the CUDA kernels in ops/cuda/*.cu: the launch
// context (device guard, stream, SM count), 16-byte vector types, strided
// offset calculation, warp/block reductions. The host-side decisions live in
// ops/cuda/launch_math.h (unit-tested on the CPU).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <limits>

#include <octet/core/dtype_traits.h>
#include <octet/core/tensor.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/cuda/launch_math.h>

// After every kernel launch: launch-configuration errors (and sticky errors of
// earlier kernels) become an octet::Error naming the kernel.
#define OCTET_CUDA_LAUNCH_CHECK(kernel_name)                                                               \
  do {                                                                                                     \
    const cudaError_t octet_launch_err_ = cudaGetLastError();                                              \
    OCTET_CHECK(octet_launch_err_ == cudaSuccess, "CUDA kernel ", kernel_name, " failed to launch: ",      \
                cudaGetErrorName(octet_launch_err_), " (", cudaGetErrorString(octet_launch_err_), ")");    \
    OCTET_CUDA_SYNC_CHECK_AFTER(kernel_name);                                                              \
  } while (0)

namespace octet::cuda {

// The device, stream and SM count a host launcher needs; sets the current
// device for its lifetime.
class KernelContext {
 public:
  explicit KernelContext(Device device)
      : device_(device.index), guard_(device.index), stream_(CurrentStream(device.index)),
        sm_count_(Props(device.index).sm_count) {}
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }
  // Blocks for a grid-stride loop over `work_items` (see GridSize).
  unsigned Grid(int64_t work_items, int threads = kElementwiseThreads) const {
    return static_cast<unsigned>(GridSize(work_items, threads, sm_count_));
  }

 private:
  int device_;
  DeviceGuard guard_;
  cudaStream_t stream_;
  int sm_count_;
};

inline uintptr_t Addr(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); }

// V elements of T in one aligned access (V * sizeof(T) <= 16).
template <typename T, int V>
struct alignas(sizeof(T) * V) VecT {
  T v[V];
};

// Elements per 16-byte access of the widest of the types.
template <typename... Ts>
inline constexpr int kVecWidth = 16 / std::max({static_cast<int>(sizeof(Ts))...});

// Offsets (in elements) of N operands at a linear index of the iteration
// shape; built on the host from a coalesced StridedLayout.
template <int N>
struct OffsetCalc {
  StridedLayout<N> l;
  bool use32;

  __device__ __forceinline__ void Get(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (use32) {
      uint32_t idx = static_cast<uint32_t>(linear);
      int32_t o[N] = {};
#pragma unroll
      for (int d = kMaxDims - 1; d >= 0; --d) {
        if (d >= l.rank) continue;
        const uint32_t size = static_cast<uint32_t>(l.sizes[d]);
        const uint32_t c = idx % size;
        idx /= size;
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] += static_cast<int32_t>(c) * static_cast<int32_t>(l.strides[k][d]);
      }
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = o[k];
    } else {
      int64_t idx = linear;
#pragma unroll
      for (int d = kMaxDims - 1; d >= 0; --d) {
        if (d >= l.rank) continue;
        const int64_t c = idx % l.sizes[d];
        idx /= l.sizes[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += c * l.strides[k][d];
      }
    }
  }
};

// The offset calculator of `ops` (operand 0 is usually the output) over `shape`.
template <int N>
OffsetCalc<N> MakeOffsetCalc(const Shape& shape, const std::array<const Tensor*, N>& ops, const char* op) {
  std::array<const std::vector<int64_t>*, N> strides;
  for (int k = 0; k < N; ++k) strides[k] = &ops[k]->strides();
  OffsetCalc<N> c;
  OCTET_CHECK(Coalesce<N>(shape, strides, &c.l), op, ": CUDA kernels take at most ", kMaxDims,
              " dims after merging contiguous ones; got shape ", ShapeStr(shape));
  c.use32 = FitsInt32(c.l);
  return c;
}

__device__ __forceinline__ int64_t GlobalThreadId() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---- reductions ----------------------------------------------------------------

inline constexpr unsigned kFullMask = 0xffffffffu;

// Warp shuffles of a value; a kernel file overloads these (found by ADL) for
// its own aggregate types (e.g. a pair of sums).
template <typename T>
__device__ __forceinline__ T ShflDown(T v, int offset) {
  return __shfl_down_sync(kFullMask, v, offset);
}
template <typename T>
__device__ __forceinline__ T ShflXor(T v, int mask) {
  return __shfl_xor_sync(kFullMask, v, mask);
}

// Reduces v over the warp with `merge`; the result is valid in lane 0.
template <typename T, typename Merge>
__device__ __forceinline__ T WarpReduce(T v, Merge merge) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = merge(v, ShflDown(v, o));
  return v;
}

// Reduces v over the warp; every lane gets the result.
template <typename T, typename Merge>
__device__ __forceinline__ T WarpAllReduce(T v, Merge merge) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = merge(v, ShflXor(v, o));
  return v;
}

// Reduces v over a 1-D block (blockDim.x a multiple of 32, <= 1024); every
// thread gets the result. `shared` holds 32 T. Contains __syncthreads: call
// from every thread of the block.
template <typename T, typename Merge>
__device__ __forceinline__ T BlockAllReduce(T v, Merge merge, T identity, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpReduce(v, merge);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  v = lane < nwarps ? shared[lane] : identity;
  v = WarpAllReduce(v, merge);
  __syncthreads();  // `shared` may be reused after return
  return v;
}

}  // namespace octet::cuda
