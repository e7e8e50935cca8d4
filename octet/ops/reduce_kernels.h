// Kernel signatures of the reduce family (internal).
#pragma once

#include <octet/core/tensor.h>
#include <octet/ops/reduce.h>
#include <octet/ops/registry.h>

namespace octet {

// x: any float tensor; out: x's shape with reduced dims set to 1 (keepdim
// form), same dtype. reduced[d] says whether dim d is reduced.
using ReduceKernelFn = void(ReduceOp op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out);
// x: [outer, n, inner] viewed through dim; out: int64 with dim removed... (keepdim form).
using ArgMaxKernelFn = void(const Tensor& x, int64_t dim, const Tensor& out);

OCTET_DECLARE_KERNEL(reduce_kernel, ReduceKernelFn);
OCTET_DECLARE_KERNEL(argmax_kernel, ArgMaxKernelFn);

}  // namespace octet
