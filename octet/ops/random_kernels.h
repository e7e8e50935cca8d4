// Kernel signatures of the random family (internal).
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

enum class RandomKind : uint8_t { kUniform, kNormal, kInteger };

// Fills contiguous `out` (float or integer dtype). Element i uses Philox
// counter offset + i/2: uniform = 53-bit double in [0,1) mapped to [a, b);
// normal = Box-Muller (even i: cos, odd i: sin) with mean a, std b;
// integer = floor(uniform * (b - a)) + a.
using RandomFillKernelFn = void(RandomKind kind, const Tensor& out, double a, double b, uint64_t seed,
                                uint64_t offset);
// out = keep ? x / (1-p) : 0, keep[i] = uniform(Philox(seed, offset + i/4).v[i%4]) >= p.
// mask (uint8, may be undefined) receives keep.
using DropoutKernelFn = void(const Tensor& x, const Tensor& out, const Tensor& mask, double p, uint64_t seed,
                             uint64_t offset);

OCTET_DECLARE_KERNEL(random_fill_kernel, RandomFillKernelFn);
OCTET_DECLARE_KERNEL(dropout_kernel, DropoutKernelFn);

}  // namespace octet
