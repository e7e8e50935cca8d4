// Reductions along dims. `dims` empty means every dim; negative dims count
// from the end; keepdim keeps reduced dims as size 1. A rank-0 tensor accepts
// dim 0 or -1 and reduces over its one element (as PyTorch). Float inputs
// only (f32/f64/bf16/f16); bf16/f16 accumulate in f32, f64 in f64. The result
// has the input's dtype. All differentiable.
#pragma once

#include <octet/core/tensor.h>

namespace octet {

Tensor Sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor Mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Largest value along dims. Gradient: split evenly between tied maxima.
Tensor Max(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor Min(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// max |x| along dims ("amax" in FP8 terms). Gradient: sign(x) at the maxima.
Tensor AbsMax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Index of the first maximum along dim (int64; not differentiable).
Tensor ArgMax(const Tensor& x, int64_t dim, bool keepdim = false);

// Sums a broadcast gradient back to `shape` (the reverse of broadcasting
// `shape` to x.shape()).
Tensor SumToShape(const Tensor& x, const Shape& shape);

enum class ReduceOp : uint8_t { kSum, kMax, kMin, kAbsMax };

}  // namespace octet
