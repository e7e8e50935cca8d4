// Shape ops: views (as Tensor methods, see core/tensor.h), cat and split, and
// the raw copy/fill kernels behind Contiguous/Clone/To/CopyFrom_/Fill_.
// Views share storage with their base; all are differentiable.
#pragma once

#include <octet/core/tensor.h>

namespace octet {

// Concatenates along dim; every tensor has the same dtype, device and shape
// except along dim. Rank-0 tensors are rejected (Stack them). FP8 tensors
// must also have equal scale_inv (the result keeps it); different scales
// throw: Dequantize (or requantize) them first.
Tensor Cat(const TensorList& tensors, int64_t dim);
// Splits along dim into pieces of the given sizes (must add up to the dim).
// Split and Chunk reject a rank-0 tensor.
TensorList Split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// Splits along dim into `chunks` equal pieces (dim must divide evenly).
TensorList Chunk(const Tensor& x, int64_t chunks, int64_t dim);
// Stacks along a new dim; the same requirements as Cat (FP8 scales too).
Tensor Stack(const TensorList& tensors, int64_t dim);

// The strides a view of `shape` over a tensor of (old_shape, old_strides)
// would have, or false when no such view exists (a copy is needed).
bool ComputeViewStrides(const Shape& old_shape, const Shape& old_strides, const Shape& shape, Shape* strides);
// Resolves one -1 in `shape` against numel; throws naming op on a mismatch.
Shape InferShape(const Shape& shape, int64_t numel, const char* op);

// An alias of base's storage with the given geometry (no autograd; keeps
// base's scale metadata). Checks that the view stays inside the storage.
Tensor MakeAlias(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

}  // namespace octet
