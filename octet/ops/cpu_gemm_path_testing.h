// Test and benchmark hooks of ops/cpu_gemm_path.h (not installed).
#pragma once

#include <optional>

#include <octet/ops/cpu_gemm_path.h>

namespace octet::internal {

// Forces the path (std::nullopt: forget the cached decision, so the next
// GetCpuGemmPath decides again from the environment).
void SetCpuGemmPathForTesting(std::optional<CpuGemmPath> path);

}  // namespace octet::internal
