// Test and benchmark hooks of ops/cpu_gelu_path.h (not installed).
#pragma once

#include <optional>
#include <string>

#include <octet/ops/cpu_gelu_path.h>

namespace octet::internal {

// Forces the path (std::nullopt: forget the cached decision, so the next
// use decides again from the environment).
void SetCpuGeluPathForTesting(std::optional<CpuGeluPath> path);

// OCTET_CPU_GELU's value parsed: nullopt for "" and "auto"; throws
// octet::Error for anything else but "table" and "compute".
std::optional<CpuGeluPath> ParseCpuGeluPath(const std::string& value);

}  // namespace octet::internal
