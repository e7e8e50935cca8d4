// CUDA kernel of the deferred index check (ops/index_check.h, NOTE [deferred
// index checks]): one grid-stride pass sanitizes, counts and finds the lowest
// bad position; a one-thread kernel then fills the device's error record if
// it is still empty. Everything is stream-ordered; nothing is read back.
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/index_check_kernels.h>

namespace octet::cuda {
namespace {

template <typename I>
__global__ void CheckIndicesKernel(const I* __restrict__ in, I* __restrict__ out, int64_t n, int64_t bound,
                                   bool has_ignore, int64_t ignore, int64_t replacement,
                                   unsigned long long* __restrict__ count, unsigned long long* __restrict__ first_bad) {
  unsigned long long valid = 0;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    const int64_t x = static_cast<int64_t>(in[i]);
    const bool ignored = has_ignore && x == ignore;
    const bool ok = ignored || (x >= 0 && x < bound);
    out[i] = ok ? in[i] : static_cast<I>(replacement);
    if (ok && !ignored) ++valid;
    if (!ok) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
  if (valid > 0) atomicAdd(count, valid);
}

template <typename I>
__global__ void FillRecordKernel(const I* __restrict__ in, const unsigned long long* __restrict__ first_bad,
                                 int64_t op, int64_t bound, int64_t* __restrict__ record) {
  const unsigned long long pos = *first_bad;
  if (pos == ~0ull || record[0] != 0) return;
  record[0] = op;
  record[1] = static_cast<int64_t>(pos);
  record[2] = static_cast<int64_t>(in[pos]);
  record[3] = bound;
}

void IndexCheckCuda(const Tensor& idx, int64_t bound, bool has_ignore, int64_t ignore, int64_t replacement,
                    int64_t op, const Tensor& sanitized, const Tensor& count, const Tensor& record) {
  KernelContext ctx(idx.device());
  const int64_t n = idx.numel();
  auto* cnt = static_cast<unsigned long long*>(count.raw_data());
  OCTET_CUDA_CHECK(cudaMemsetAsync(cnt, 0, sizeof(unsigned long long), ctx.stream()));
  if (n == 0) return;
  const Tensor scratch = Empty({1}, {.dtype = DType::kInt64, .device = idx.device()});
  auto* first_bad = static_cast<unsigned long long*>(scratch.raw_data());
  OCTET_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xFF, sizeof(unsigned long long), ctx.stream()));
  Dispatch<DType::kInt64, DType::kInt32>(idx.dtype(), "index_check", [&]<typename I>() {
    CheckIndicesKernel<I><<<ctx.Grid(n), kElementwiseThreads, 0, ctx.stream()>>>(
        idx.data<I>(), sanitized.data<I>(), n, bound, has_ignore, ignore, replacement, cnt, first_bad);
    OCTET_CUDA_LAUNCH_CHECK("index_check");
    FillRecordKernel<I><<<1, 1, 0, ctx.stream()>>>(idx.data<I>(), first_bad, op, bound, record.data<int64_t>());
    OCTET_CUDA_LAUNCH_CHECK("index_check (record)");
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(index_check_deferred, DeviceType::kCUDA, &IndexCheckCuda);

}  // namespace octet::cuda
