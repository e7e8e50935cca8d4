// Kernel signatures of the embedding family (internal: shared by
// ops/embedding.cc and the backends). Letters: N looked-up positions (indices
// flattened), V rows of the table, C the embedding width. Every tensor
// argument is contiguous.
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// What the forward kernel found: bad_position >= 0 means indices[bad_position]
// = bad_value is outside [0, V) and nothing was written.
struct EmbeddingFwdResult {
  int64_t bad_position = -1;
  int64_t bad_value = 0;
};

// Gathers out[i] = weight[indices[i]]. Every index is checked before any row
// is copied, unless `prechecked` (NOTE [deferred index checks] in
// ops/index_check.h: the indices are known to be in range; a device kernel
// then skips its check and the host read of its result).
using EmbeddingFwdFn = EmbeddingFwdResult(const Tensor& weight,   // (V,C)
                                          const Tensor& indices,  // (N) int64/int32
                                          const Tensor& out,      // (N,C) out, weight's dtype
                                          bool prechecked);

// dweight[v] = sum over i with indices[i] == v of dout[i], in the order of
// NOTE [embedding backward order]; rows never indexed are set to 0 (the
// kernel writes all of dweight). Indices were validated by the forward kernel.
using EmbeddingBwdFn = void(const Tensor& dout,      // (N,C)
                            const Tensor& indices,   // (N) int64/int32
                            const Tensor& dweight);  // (V,C) out

// NOTE [embedding backward order]: the positions i of one row v, taken in
// increasing i, are summed in chunks of kEmbeddingBwdChunk consecutive
// positions: each chunk is summed on its own (from zero, in the compute type,
// in increasing i), then the chunk sums are added in chunk order. Every
// backend uses exactly this order, so float32 results agree bit for bit and
// never depend on the thread count; and the GPU can spread a frequent row
// (a space or an "e" appears thousands of times in a batch) over many blocks
// instead of one block adding thousands of rows in series (that kernel was
// 9 % of a small O1 step on an H100).
inline constexpr int64_t kEmbeddingBwdChunk = 32;

OCTET_DECLARE_KERNEL(embedding_fwd, EmbeddingFwdFn);
OCTET_DECLARE_KERNEL(embedding_bwd, EmbeddingBwdFn);

}  // namespace octet
