// CUDA kernels of the embedding family.
//
// Forward: every index is checked on the device first (one host
// synchronisation to return the verdict), then a block per looked-up position
// copies its row, 16 bytes at a time when the row allows it.
//
// Backward keeps NOTE [embedding backward] (ops/cpu/embedding_cpu.cc) on the
// GPU, asynchronously: a stable radix sort of (index, position) pairs (CUB)
// groups the positions of each row in increasing order; run-length encoding
// gives each distinct row's positions; then the sums follow NOTE [embedding
// backward order] (ops/embedding_kernels.h): a block per chunk of 32
// positions, then a block per distinct row adds its chunk sums in order and
// writes the dweight row once. No atomics, the CPU's summation order (so
// float32 results match the CPU bit for bit), rows never looked up are zeroed
// first, and a frequent row is spread over many blocks.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <octet/core/host_reads.h>
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/embedding_kernels.h>

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

// NOTE [embedding backward order] on the GPU, two passes. Chunk q of run r
// covers sorted positions [offsets[r] + K q, min(offsets[r] + K (q + 1),
// offsets[r] + counts[r])), K = kEmbeddingBwdChunk; the chunks of all runs are
// numbered consecutively (chunk_offsets[r] = first chunk of run r).

// chunk_counts[r] = ceil(counts[r] / K) for r < *num_runs, 0 past it.
__global__ void ChunkCountsKernel(const int64_t* __restrict__ counts, const int64_t* __restrict__ num_runs, int64_t n,
                                  int64_t* __restrict__ chunk_counts) {
  const int64_t runs = *num_runs;
  for (int64_t r = GlobalThreadId(); r < n; r += GridStride())
    chunk_counts[r] = r < runs ? (counts[r] + kEmbeddingBwdChunk - 1) / kEmbeddingBwdChunk : 0;
}

// Pass 1, one block per chunk: partials[q] = sum of its dout rows, in order,
// from zero, in the compute type A.
template <typename T, typename A>
__global__ void ChunkSumsKernel(const T* __restrict__ dout, const int64_t* __restrict__ pos,
                                const int64_t* __restrict__ offsets, const int64_t* __restrict__ counts,
                                const int64_t* __restrict__ chunk_offsets, const int64_t* __restrict__ chunk_counts,
                                const int64_t* __restrict__ num_runs, int64_t c, A* __restrict__ partials) {
  const int64_t runs = *num_runs;
  if (runs == 0) return;
  const int64_t total = chunk_offsets[runs - 1] + chunk_counts[runs - 1];
  for (int64_t q = blockIdx.x; q < total; q += gridDim.x) {
    // The run of chunk q: the last r with chunk_offsets[r] <= q (every run has >= 1 chunk).
    int64_t lo = 0, hi = runs - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (chunk_offsets[mid] <= q) lo = mid; else hi = mid - 1;
    }
    const int64_t end = offsets[lo] + counts[lo];
    const int64_t p0 = offsets[lo] + (q - chunk_offsets[lo]) * kEmbeddingBwdChunk;
    const int64_t p1 = p0 + kEmbeddingBwdChunk < end ? p0 + kEmbeddingBwdChunk : end;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      A part = A(0);
      for (int64_t p = p0; p < p1; ++p) part += ConvertElement<A>(dout[pos[p] * c + j]);
      partials[q * c + j] = part;
    }
  }
}

// Pass 2, one block per run: dweight[rows[r]] = its chunk sums added in order.
template <typename T, typename A, typename I>
__global__ void AddChunkSumsKernel(const A* __restrict__ partials, const I* __restrict__ rows,
                                   const int64_t* __restrict__ chunk_offsets,
                                   const int64_t* __restrict__ chunk_counts, const int64_t* __restrict__ num_runs,
                                   int64_t v, int64_t c, T* __restrict__ dweight) {
  const int64_t runs = *num_runs;
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const int64_t row = static_cast<int64_t>(rows[r]);
    if (row < 0 || row >= v) continue;  // validated by the forward; never write out of bounds
    const int64_t q0 = chunk_offsets[r], q1 = q0 + chunk_counts[r];
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      A acc = A(0);
      for (int64_t q = q0; q < q1; ++q) acc += partials[q * c + j];
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
  // NOTE [embedding backward order]: number the chunks of every run, sum each
  // chunk in its own block, then add each run's chunk sums in order. The runs
  // are at most min(V, N) and each has ceil(count / K) <= count chunks, so
  // there are at most min(V, N) + N / K chunks; the host never learns the
  // exact numbers (no synchronisation): the kernels read them on the device.
  using A = AccType<T>;
  const Tensor chunk_counts = Empty({n}, i64);   // (runs) then zeros
  const Tensor chunk_offsets = Empty({n}, i64);  // (runs)
  ChunkCountsKernel<<<ctx.Grid(n), kElementwiseThreads, 0, stream>>>(
      run_counts.data<int64_t>(), num_runs.data<int64_t>(), n, chunk_counts.data<int64_t>());
  OCTET_CUDA_LAUNCH_CHECK("embedding backward (chunk counts)");
  bytes = 0;
  OCTET_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, chunk_counts.data<int64_t>(),
                                                 chunk_offsets.data<int64_t>(), n, stream));
  {
    const Tensor tmp = Scratch(bytes, dev);
    OCTET_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp.raw_data(), bytes, chunk_counts.data<int64_t>(),
                                                   chunk_offsets.data<int64_t>(), n, stream));
  }
  const int64_t max_chunks = std::min(v, n) + (n + kEmbeddingBwdChunk - 1) / kEmbeddingBwdChunk;
  const Tensor partials = Scratch(static_cast<size_t>(max_chunks * c) * sizeof(A), dev);  // (chunks, C) in A
  A* part = static_cast<A*>(partials.raw_data());
  ChunkSumsKernel<T, A><<<RowGrid(max_chunks), RowThreads(c), 0, stream>>>(
      dout.data<T>(), pos_out, run_offsets.data<int64_t>(), run_counts.data<int64_t>(), chunk_offsets.data<int64_t>(),
      chunk_counts.data<int64_t>(), num_runs.data<int64_t>(), c, part);
  OCTET_CUDA_LAUNCH_CHECK("embedding backward (chunk sums)");
  AddChunkSumsKernel<T, A, I><<<RowGrid(std::min(v, n)), RowThreads(c), 0, stream>>>(
      part, run_rows.data<I>(), chunk_offsets.data<int64_t>(), chunk_counts.data<int64_t>(), num_runs.data<int64_t>(),
      v, c, dweight.data<T>());
  OCTET_CUDA_LAUNCH_CHECK("embedding backward (rows)");
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
