// Embedding lookup: rows of a weight table gathered by integer indices.
// Differentiable in the weight.
#pragma once

#include <octet/core/tensor.h>

namespace octet {

// out[..., :] = weight[indices[...], :].
//   weight:  (V, C) float32/float64/bfloat16/float16, any strides.
//   indices: any shape (including rank 0), int64 or int32, each in [0, V).
//   Returns: (indices.shape..., C) in weight's dtype.
// Gradient: dweight[v] = sum of dout rows whose index is v (zero for rows
// never looked up). The sum runs over positions in increasing order for every
// row (NOTE [embedding backward] in ops/cpu/embedding_cpu.cc), so dweight is
// bitwise the same for any thread count. No gradient for indices.
// Errors (octet::Error naming the op): weight not 2-D, FP8 or non-float
// weight, indices not int64/int32, a device mismatch, an index outside
// [0, V) (the message gives the value, its position in indices and V).
Tensor Embedding(const Tensor& weight, const Tensor& indices);

}  // namespace octet
