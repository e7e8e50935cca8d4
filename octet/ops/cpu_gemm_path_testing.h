// Test and benchmark hooks of ops/cpu_gemm_path.h (not installed).
#pragma once

#include <optional>

#include <octet/ops/cpu_gemm_path.h>

namespace octet::internal {

// Forces the path (std::nullopt: forget the cached decision, so the next
// GetCpuGemmPath decides again from the environment).
void SetCpuGemmPathForTesting(std::optional<CpuGemmPath> path);

// Whether this CPU can run the BF16-dot-product path at all (oneDNN has a
// bf16 matmul: AVX-512, subject to ONEDNN_MAX_CPU_ISA). Tests that force
// kBf16Dot skip without it.
bool CpuRunsBf16Gemm();

}  // namespace octet::internal
