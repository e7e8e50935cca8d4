// CPU kernels of the embedding family: a row gather (memcpy per position)
// and the deterministic scatter-add of NOTE [embedding backward].
#include <algorithm>
#include <cstring>
#include <vector>

#include <octet/core/dtype_traits.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/embedding_kernels.h>

namespace octet::cpu {
namespace {

template <typename T, typename I>
EmbeddingFwdResult EmbeddingFwdTyped(const Tensor& weight,   // (V,C)
                                     const Tensor& indices,  // (N)
                                     const Tensor& out) {    // (N,C)
  const int64_t v = weight.shape()[0], c = weight.shape()[1], n = indices.numel();
  const I* ip = indices.data<I>();
  EmbeddingFwdResult r;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = static_cast<int64_t>(ip[i]);
    if (k < 0 || k >= v) {
      r.bad_position = i;
      r.bad_value = k;
      return r;
    }
  }
  // A (V, 0) weight has no storage (null data): nothing to copy, and memcpy
  // must not see the null pointer even for zero bytes.
  if (c == 0) return r;
  const T* w = weight.data<T>();
  T* o = out.data<T>();
  ParallelFor(n, RowGrain(c), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      std::memcpy(o + i * c, w + static_cast<int64_t>(ip[i]) * c, static_cast<size_t>(c) * sizeof(T));
  });
  return r;
}

// NOTE [embedding backward]: dweight is a scatter-add of N rows of dout into V
// rows, where the same row may be hit many times (frequent tokens). Instead of
// atomics or per-thread (V, C) copies, a stable counting sort groups the
// positions by index (O(N + V), serial, a few microseconds at GPT sizes); then
// each dweight row is owned by exactly one thread, which adds its positions in
// the order of NOTE [embedding backward order] (ops/embedding_kernels.h) in
// the compute type and writes the row once. The result never depends on the
// thread count and equals the CUDA kernel's bit for bit; rows never looked up
// come out as zeros in the same pass.
template <typename T, typename I>
void EmbeddingBwdTyped(const Tensor& dout,       // (N,C)
                       const Tensor& indices,    // (N)
                       const Tensor& dweight) {  // (V,C)
  using A = AccType<T>;
  const int64_t v = dweight.shape()[0], c = dweight.shape()[1], n = indices.numel();
  if (c == 0) return;  // a (V, 0) dweight has no elements to write
  const I* ip = indices.data<I>();
  std::vector<int64_t> start(v + 1, 0);  // positions of row k: order[start[k], start[k+1])
  for (int64_t i = 0; i < n; ++i) ++start[static_cast<int64_t>(ip[i]) + 1];
  for (int64_t k = 0; k < v; ++k) start[k + 1] += start[k];
  std::vector<int64_t> order(n), next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[next[static_cast<int64_t>(ip[i])]++] = i;

  const T* g = dout.data<T>();
  T* dw = dweight.data<T>();
  ParallelFor(v, RowGrain(c), [&](int64_t k0, int64_t k1) {
    std::vector<A> acc(c), gbuf(c), part(c);
    for (int64_t k = k0; k < k1; ++k) {
      A* a = RowOut(dw + k * c, acc.data());
      for (int64_t j = 0; j < c; ++j) a[j] = 0;
      // NOTE [embedding backward order]: chunk sums, added in order.
      for (int64_t p0 = start[k]; p0 < start[k + 1]; p0 += kEmbeddingBwdChunk) {
        const int64_t p1 = std::min(p0 + kEmbeddingBwdChunk, start[k + 1]);
        for (int64_t j = 0; j < c; ++j) part[j] = 0;
        for (int64_t p = p0; p < p1; ++p) {
          const A* gr = LoadRow(g + order[p] * c, c, gbuf.data());
          for (int64_t j = 0; j < c; ++j) part[j] += gr[j];
        }
        for (int64_t j = 0; j < c; ++j) a[j] += part[j];
      }
      StoreRow(a, dw + k * c, c);
    }
  });
}

EmbeddingFwdResult EmbeddingFwdCpu(const Tensor& weight, const Tensor& indices, const Tensor& out,
                                   bool /*prechecked: the host check is free*/) {
  EmbeddingFwdResult result;
  DispatchFloat(weight.dtype(), "embedding", [&]<typename T>() {
    Dispatch<DType::kInt64, DType::kInt32>(indices.dtype(), "embedding", [&]<typename I>() {
      result = EmbeddingFwdTyped<T, I>(weight, indices, out);
    });
  });
  return result;
}

void EmbeddingBwdCpu(const Tensor& dout, const Tensor& indices, const Tensor& dweight) {
  DispatchFloat(dweight.dtype(), "embedding backward", [&]<typename T>() {
    Dispatch<DType::kInt64, DType::kInt32>(indices.dtype(), "embedding backward", [&]<typename I>() {
      EmbeddingBwdTyped<T, I>(dout, indices, dweight);
    });
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(embedding_fwd, DeviceType::kCPU, &EmbeddingFwdCpu);
OCTET_REGISTER_KERNEL(embedding_bwd, DeviceType::kCPU, &EmbeddingBwdCpu);

}  // namespace octet::cpu
