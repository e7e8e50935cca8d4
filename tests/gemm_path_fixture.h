// A test fixture parameterised over the CPU GEMM paths (NOTE [CPU GEMM path]
// in ops/cpu_gemm_path.h): each test runs with its path forced, and the
// BF16-dot-product path skips where oneDNN has no bf16 matmul (no AVX-512).
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>

namespace octet::testing {

class ForcedGemmPathTest : public ::testing::TestWithParam<CpuGemmPath> {
 protected:
  void SetUp() override {
    if (GetParam() == CpuGemmPath::kBf16Dot && !internal::CpuRunsBf16Gemm())
      GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (it needs AVX-512)";
    internal::SetCpuGemmPathForTesting(GetParam());
  }
  void TearDown() override { internal::SetCpuGemmPathForTesting(std::nullopt); }
};

// Both paths, named "bf16" and "fp32" in test names.
inline auto AllGemmPaths() { return ::testing::Values(CpuGemmPath::kBf16Dot, CpuGemmPath::kFp32Fma); }
inline std::string GemmPathName(const ::testing::TestParamInfo<CpuGemmPath>& info) { return Name(info.param); }

}  // namespace octet::testing
