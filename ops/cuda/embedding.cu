// CUDA kernels of the embedding family.
//
// Forward: every index is checked on the device first (one host
// synchronisation to return the verdict), then a block per looked-up position
// copies its row, 16 bytes at a time when the row allows it.
//
// Backward keeps NOTE [embedding backward] (ops/cpu/embedding_cpu.cc) on the
// GPU, asynchronously: a stable radix sort of (index, position) pairs (CUB)
// groups the positions of each row in increasing order; run-length encoding
// gives each distinct row's positions; one block per distinct row adds its
// rows of dout in that order in the compute type and writes the dweight row
// once. No atomics, the CPU's summation order (so float32 results match the
// CPU bit for bit), rows never looked up are zeroed first.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include "core/host_reads.h"
#include "ops/cuda/kernel_utils.cuh"
#include "ops/embedding_kernels.h"

namespace octet::cuda {
namespace {

// status[0]: smallest position of an index outside [0, V) (ULLONG_MAX: none).
template <typename I>
__global__ void ValidateIndicesKernel(const I* __restrict__ idx, int64_t n, int64_t v,
                                      unsigned long long* status) {
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    const int64_t k = static_cast<int64_t>(idx[i]);
    if (k < 0 || k >= v) atomicMin(status, static_cast<unsigned long long>(i));
  }
}

// out[i] = weight[idx[i]]; rows of `c` elements, moved as W-element words.
template <typename W, typename I>
__global__ void GatherRowsKernel(const W* __restrict__ weight, const I* __restrict__ idx, W* __restrict__ out,
                                 int64_t n, int64_t c_words) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const W* src = weight + static_cast<int64_t>(idx[i]) * c_words;
    W* dst = out + i * c_words;
    for (int64_t j = threadIdx.x; j < c_words; j += blockDim.x) dst[j] = src[j];
  }
}

// One block per distinct looked-up row r < *num_runs: dweight[rows[r]] =
// sum of dout[pos[p]] for p in [offsets[r], offsets[r] + counts[r]), in order.
template <typename T, typename I>
__global__ void AccumulateRowsKernel(const T* __restrict__ dout, const I* __restrict__ rows,
                                     const int64_t* __restrict__ pos, const int64_t* __restrict__ offsets,
                                     const int64_t* __restrict__ counts, const int64_t* __restrict__ num_runs,
                                     int64_t v, int64_t c, T* __restrict__ dweight) {
  using A = AccType<T>;
  const int64_t runs = *num_runs;
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const int64_t row = static_cast<int64_t>(rows[r]);
    if (row < 0 || row >= v) continue;  // validated by the forward; never write out of bounds
    const int64_t p0 = offsets[r], p1 = p0 + counts[r];
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      A acc = A(0);
      for (int64_t p = p0; p < p1; ++p) acc += ConvertElement<A>(dout[pos[p] * c + j]);
      dweight[row * c + j] = ConvertElement<T>(acc);
    }
  }
}

__global__ void IotaKernel(int64_t* __restrict__ out, int64_t n) {
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) out[i] = i;
}

unsigned RowGrid(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, (int64_t{1} << 31) - 1)); }

// Scratch device memory from the caching allocator (freed stream-ordered).
Tensor Scratch(size_t bytes, Device device) {
  return Empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, {.dtype = DType::kUInt8, .device = device});
}

template <typename T, typename I>
EmbeddingFwdResult EmbeddingFwdTyped(const KernelContext& ctx, const Tensor& weight, const Tensor& indices,
                                     const Tensor& out, bool prechecked) {
  const int64_t v = weight.shape()[0], c = weight.shape()[1], n = indices.numel();
  EmbeddingFwdResult r;
  if (n == 0) return r;
  const I* idx = indices.data<I>();
  if (!prechecked) {  // NOTE [deferred index checks]: otherwise no check and no host read here
    const Tensor status = Empty({1}, {.dtype = DType::kInt64, .device = weight.device()});
    auto* st = static_cast<unsigned long long*>(status.raw_data());
    OCTET_CUDA_CHECK(cudaMemsetAsync(st, 0xFF, sizeof(unsigned long long), ctx.stream()));
    ValidateIndicesKernel<I><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(idx, n, v, st);
    OCTET_CUDA_LAUNCH_CHECK("embedding (index check)");
    unsigned long long bad_pos = 0;
    internal::CountHostRead();  // NOTE [host reads]
    OCTET_CUDA_CHECK(cudaMemcpyAsync(&bad_pos, st, sizeof(bad_pos), cudaMemcpyDeviceToHost, ctx.stream()));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
    if (bad_pos != ~0ull) {
      r.bad_position = static_cast<int64_t>(bad_pos);
      I bad = 0;
      internal::CountHostRead();  // NOTE [host reads]
      OCTET_CUDA_CHECK(cudaMemcpyAsync(&bad, idx + r.bad_position, sizeof(I), cudaMemcpyDeviceToHost, ctx.stream()));
      OCTET_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
      r.bad_value = static_cast<int64_t>(bad);
      return r;
    }
  }
  if (c == 0) return r;
  const size_t row_bytes = static_cast<size_t>(c) * sizeof(T);
  const bool wide = row_bytes % 16 == 0 && Addr(weight) % 16 == 0 && Addr(out) % 16 == 0;
  if (wide) {
    const int64_t words = static_cast<int64_t>(row_bytes / 16);
    GatherRowsKernel<uint4, I><<<RowGrid(n), RowThreads(words), 0, ctx.stream()>>>(
        static_cast<const uint4*>(weight.raw_data()), idx, static_cast<uint4*>(out.raw_data()), n, words);
  } else {
    GatherRowsKernel<T, I><<<RowGrid(n), RowThreads(c), 0, ctx.stream()>>>(weight.data<T>(), idx, out.data<T>(),
                                                                           n, c);
  }
  OCTET_CUDA_LAUNCH_CHECK("embedding forward");
  return r;
}

template <typename T, typename I>
void EmbeddingBwdTyped(const KernelContext& ctx, const Tensor& dout, const Tensor& indices, const Tensor& dweight) {
  const int64_t v = dweight.shape()[0], c = dweight.shape()[1], n = indices.numel();
  const Device dev = dweight.device();
  cudaStream_t stream = ctx.stream();
  // Rows never looked up are zero (all-zero bits are 0 in every float type).
  OCTET_CUDA_CHECK(cudaMemsetAsync(dweight.raw_data(), 0, dweight.nbytes(), stream));
  if (n == 0 || c == 0) return;
  const TensorOptions i64{.dtype = DType::kInt64, .device = dev};
  const Tensor positions = Empty({n}, i64);                                            // (N) 0..N-1
  const Tensor sorted_keys = Empty({n}, {.dtype = indices.dtype(), .device = dev});    // (N)
  const Tensor sorted_pos = Empty({n}, i64);                                           // (N)
  const Tensor run_rows = Empty({n}, {.dtype = indices.dtype(), .device = dev});       // (runs)
  const Tensor run_counts = Empty({n}, i64);                                           // (runs)
  const Tensor run_offsets = Empty({n}, i64);                                          // (runs)
  const Tensor num_runs = Empty({1}, i64);
  IotaKernel<<<ctx.Grid(n), kElementwiseThreads, 0, stream>>>(positions.data<int64_t>(), n);
  OCTET_CUDA_LAUNCH_CHECK("embedding backward (positions)");

  const I* keys_in = indices.data<I>();
  I* keys_out = sorted_keys.data<I>();
  int64_t* pos_in = positions.data<int64_t>();
  int64_t* pos_out = sorted_pos.data<int64_t>();
  // Each CUB call: ask for the scratch size, then run. The radix sort is
  // stable, so equal indices keep their positions in increasing order.
  size_t bytes = 0;
  OCTET_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, pos_in, pos_out, n, 0,
                                                   static_cast<int>(sizeof(I) * 8), stream));
  {
    const Tensor tmp = Scratch(bytes, dev);
    OCTET_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp.raw_data(), bytes, keys_in, keys_out, pos_in, pos_out, n,
                                                     0, static_cast<int>(sizeof(I) * 8), stream));
  }
  bytes = 0;
  OCTET_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, bytes, keys_out, run_rows.data<I>(),
                                                      run_counts.data<int64_t>(), num_runs.data<int64_t>(), n,
                                                      stream));
  {
    const Tensor tmp = Scratch(bytes, dev);
    OCTET_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(tmp.raw_data(), bytes, keys_out, run_rows.data<I>(),
                                                        run_counts.data<int64_t>(), num_runs.data<int64_t>(), n,
                                                        stream));
  }
  // Offsets over all n slots: entries past the run count are never read.
  bytes = 0;
  OCTET_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(nullptr, bytes, run_counts.data<int64_t>(), run_offsets.data<int64_t>(), n, stream));
  {
    const Tensor tmp = Scratch(bytes, dev);
    OCTET_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp.raw_data(), bytes, run_counts.data<int64_t>(),
                                                   run_offsets.data<int64_t>(), n, stream));
  }
  AccumulateRowsKernel<T, I><<<RowGrid(n), RowThreads(c), 0, stream>>>(
      dout.data<T>(), run_rows.data<I>(), pos_out, run_offsets.data<int64_t>(), run_counts.data<int64_t>(),
      num_runs.data<int64_t>(), v, c, dweight.data<T>());
  OCTET_CUDA_LAUNCH_CHECK("embedding backward");
}

EmbeddingFwdResult EmbeddingFwdCuda(const Tensor& weight, const Tensor& indices, const Tensor& out, bool prechecked) {
  KernelContext ctx(weight.device());
  EmbeddingFwdResult result;
  DispatchFloat(weight.dtype(), "embedding", [&]<typename T>() {
    Dispatch<DType::kInt64, DType::kInt32>(indices.dtype(), "embedding", [&]<typename I>() {
      result = EmbeddingFwdTyped<T, I>(ctx, weight, indices, out, prechecked);
    });
  });
  return result;
}

void EmbeddingBwdCuda(const Tensor& dout, const Tensor& indices, const Tensor& dweight) {
  KernelContext ctx(dweight.device());
  DispatchFloat(dweight.dtype(), "embedding backward", [&]<typename T>() {
    Dispatch<DType::kInt64, DType::kInt32>(indices.dtype(), "embedding backward", [&]<typename I>() {
      EmbeddingBwdTyped<T, I>(ctx, dout, indices, dweight);
    });
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(embedding_fwd, DeviceType::kCUDA, &EmbeddingFwdCuda);
OCTET_REGISTER_KERNEL(embedding_bwd, DeviceType::kCUDA, &EmbeddingBwdCuda);

}  // namespace octet::cuda
