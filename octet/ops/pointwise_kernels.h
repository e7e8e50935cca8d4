// Kernel signatures of the pointwise family (internal: shared by
// ops/pointwise.cc and the backends). Operands are already broadcast to the
// output's shape (expanded views, possibly strided) and have the output's
// dtype, except `cond` (bool) and comparison outputs (bool).
#pragma once

#include <octet/core/tensor.h>
#include <octet/ops/functors.h>
#include <octet/ops/registry.h>

namespace octet {

using UnaryKernelFn = void(UnaryOp op, const Tensor& x, const Tensor& out, double alpha);
using BinaryKernelFn = void(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
using CompareKernelFn = void(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
using WhereKernelFn = void(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

OCTET_DECLARE_KERNEL(unary_kernel, UnaryKernelFn);
OCTET_DECLARE_KERNEL(binary_kernel, BinaryKernelFn);
OCTET_DECLARE_KERNEL(compare_kernel, CompareKernelFn);
OCTET_DECLARE_KERNEL(where_kernel, WhereKernelFn);

}  // namespace octet
