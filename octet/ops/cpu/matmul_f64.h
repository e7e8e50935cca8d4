// octet's own f64 GEMM on the CPU (internal to ops/cpu/): oneDNN has no f64
// matmul; gradcheck and the float64 references run on this one.
#pragma once

#include <octet/core/tensor.h>

namespace octet::cpu {

// a (Ba..., M, K), b (Bb..., K, N), out (B..., M, N) contiguous, bias (N) or
// undefined. One output row per task, k outer and n inner so the inner loop
// streams a row of b and vectorises; b is packed to unit column stride first.
void MatmulF64(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

}  // namespace octet::cpu
