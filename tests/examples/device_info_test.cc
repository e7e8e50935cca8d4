// octet-device-info (tools/device_info.cc), run as a user runs it: what it
// says about the CPU paths, each override shown as the reason, the CPU
// cache's state, the CUDA side either way, and a bad switch stopping it with
// exit 1 and the variable named (NOTE [environment switches] in
// octet/core/env.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <octet/core/env.h>
#include <octet/core/version.h>
#include <octet/ops/cpu_gemm_path.h>

#include "tests/examples/programs.h"
#include "tests/test_util.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
using ::octet::testing::kDeviceInfo;
using ::testing::AnyOf;
using ::testing::HasSubstr;

using Result = ::octet::testing::CommandResult;

// Runs it with octet's switches cleared from this process's environment,
// then `env` (VAR=value words) set.
Result RunDeviceInfo(const std::string& env) {
  std::string line = "env";
  for (const octet::internal::EnvSwitch& s : octet::internal::EnvSwitches()) line += " -u " + std::string(s.name);
  return ::octet::testing::RunCommand(line + " OMP_NUM_THREADS=2 " + env + " " +
                                      ::octet::testing::ShellQuote(kDeviceInfo));
}

TEST(DeviceInfo, PrintsTheCpuPathsAndTheCudaSide) {
  if (!fs::exists(kDeviceInfo)) GTEST_SKIP() << "octet-device-info not built (" << kDeviceInfo << ")";
  const Result r = RunDeviceInfo("");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(std::string("octet ") + octet::LibraryVersionString() + "\n", 0), 0u)
      << "the first line names the library's version:\n" << r.out;
  EXPECT_THAT(r.out, HasSubstr("CPU GEMM path for bf16/fp8 operands: "));
  EXPECT_THAT(r.out, HasSubstr("  single-thread peaks: FP32 FMA "));
  // What the library does on this CPU (CpuGemmPath.F32BIsPackedWhereTheLibrarySaysSo checks it by the GEMMs).
  EXPECT_THAT(r.out, HasSubstr(CpuF32GemmPacksB()
                                   ? "CPU f32 GEMMs whose B would be packed: oneDNN's matmul, B packed by octet"
                                   : "CPU f32 GEMMs whose B would be packed: oneDNN's matmul, B read as it is"));
  EXPECT_THAT(r.out, HasSubstr("CPU memory: blocks of 64 KiB or more cached for reuse"));
  EXPECT_THAT(r.out, HasSubstr("CPU GELU on bf16: "));
  EXPECT_THAT(r.out, AnyOf(HasSubstr("octet CUDA backend: not built"), HasSubstr("devices: ")));
}

TEST(DeviceInfo, ShowsEachOverrideAsTheReason) {
  if (!fs::exists(kDeviceInfo)) GTEST_SKIP() << "octet-device-info not built (" << kDeviceInfo << ")";
  const Result r = RunDeviceInfo(
      "OCTET_CPU_GEMM=fp32 OCTET_CPU_F32_GEMM=sgemm OCTET_CPU_CACHING=0 OCTET_CPU_GELU=compute");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CPU GEMM path for bf16/fp8 operands: fp32 (OCTET_CPU_GEMM=fp32)"));
  EXPECT_THAT(r.out, HasSubstr("CPU f32 GEMMs whose B would be packed: oneDNN's sgemm (OCTET_CPU_F32_GEMM=sgemm)"));
  EXPECT_THAT(r.out, HasSubstr("CPU memory: every block from the system and back (OCTET_CPU_CACHING=0)"));
  EXPECT_THAT(r.out, HasSubstr("CPU GELU on bf16: forward compute (OCTET_CPU_GELU=compute), "
                                 "backward compute (OCTET_CPU_GELU=compute)"));
}

// OCTET_DISABLE_AVX512_BF16=1 (or OCTET_DISABLE_AVX512=1) makes any CPU one
// without the BF16 extension: the FP32-FMA path for that reason, and no AMX
// GEMM.
TEST(DeviceInfo, TheSimulatedCpuWithoutBf16HasNeitherBf16PathNorAmxGemm) {
  if (!fs::exists(kDeviceInfo)) GTEST_SKIP() << "octet-device-info not built (" << kDeviceInfo << ")";
  for (const char* env : {"OCTET_DISABLE_AVX512_BF16=1", "OCTET_DISABLE_AVX512=1"}) {
    const Result r = RunDeviceInfo(env);
    ASSERT_EQ(r.exit_code, 0) << env << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("CPU GEMM path for bf16/fp8 operands: fp32 (no AVX-512 BF16 on this CPU)")) << env;
    EXPECT_THAT(r.out, HasSubstr("BF16 GEMMs with a packed B and N <= 3K: oneDNN's matmul (no AMX, "
                                 "OCTET_CPU_AMX_GEMM=0, or OCTET_DISABLE_AVX512 or OCTET_DISABLE_AVX512_BF16 "
                                 "set to 1)"))
        << env;
  }
}

TEST(DeviceInfo, ABadSwitchStopsItNamingTheVariable) {
  if (!fs::exists(kDeviceInfo)) GTEST_SKIP() << "octet-device-info not built (" << kDeviceInfo << ")";
  for (const char* env : {"OCTET_CPU_CACHING=2", "OCTET_CPU_GEMM=fast", "OCTET_CPU_F32_GEMM=blas",
                          "OCTET_CPU_GELU=lut", "OCTET_CPU_AMX_GEMM=yes", "OCTET_DISABLE_AVX512=true",
                          "OCTET_DISABLE_AVX512_BF16=on", "OCTET_CUDA_SYNC_CHECK=yes"}) {
    const Result r = RunDeviceInfo(env);
    EXPECT_EQ(r.exit_code, 1) << env;
    const std::string name(env, std::string(env).find('='));
    EXPECT_THAT(r.err, HasSubstr("octet-device-info: " + name + "='")) << env;
    EXPECT_THAT(r.err, HasSubstr("' is not understood: use ")) << env;
  }
}

}  // namespace
}  // namespace octet
