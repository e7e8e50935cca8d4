// Kernel signatures for copies and fills (internal).
#pragma once

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// dst[i] = convert(src[i]); src already expanded to dst's shape; both on the
// same device; FP8 conversions are raw (no scale), saturating to finite.
using CopyKernelFn = void(const Tensor& src, const Tensor& dst);
using FillKernelFn = void(const Tensor& dst, double value);

OCTET_DECLARE_KERNEL(copy_kernel, CopyKernelFn);
OCTET_DECLARE_KERNEL(fill_kernel, FillKernelFn);

}  // namespace octet
