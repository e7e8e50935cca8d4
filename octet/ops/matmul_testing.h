// Test hooks of ops/matmul.h (not installed).
#pragma once

#include <optional>

#include <octet/core/tensor.h>

namespace octet {

// Forces Fp8GemmWantsTransposedCopies' answer for every device (nullopt: ask
// the backend again).
void SetFp8TransposedCopiesForTesting(std::optional<bool> value);

// Forces whether CastLinear takes its fused route (NOTE [cast linear]) where
// it applies (a bf16 compute dtype and an f32 weight); nullopt: ask the
// backend again. Forcing it on for a device whose GEMM cannot mix operands
// makes that GEMM fail.
void SetCastLinearFusionForTesting(std::optional<bool> value);

// Whether CastLinear(x, weight, ..., compute) takes its fused route now.
bool CastLinearFusesFor(const Tensor& x, const Tensor& weight, DType compute);

}  // namespace octet
