// NOTE [environment switches] (octet/core/env.h): one parser for octet's
// environment switches; a value it does not know is an error naming the
// variable, the value and every value it takes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>
#include <octet/core/env.h>

#include "tests/scoped_env.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::ErrorOf;
using testing::ScopedEnv;

constexpr internal::EnvValue kTwo[] = {{"matmul", "the default"}, {"sgemm", "oneDNN's sgemm"}};
constexpr internal::EnvValue kThree[] = {{"auto", "measure"}, {"bf16", "dot products"}, {"fp32", "FMAs"}};

TEST(EnvChoice, UnsetOrEmptyGivesTheFallback) {
  EXPECT_EQ(internal::ParseEnvChoice("OCTET_X", nullptr, kTwo, 0), 0);
  EXPECT_EQ(internal::ParseEnvChoice("OCTET_X", "", kTwo, 1), 1);
}

TEST(EnvChoice, AKnownValueGivesItsIndex) {
  EXPECT_EQ(internal::ParseEnvChoice("OCTET_X", "sgemm", kTwo, 0), 1);
  EXPECT_EQ(internal::ParseEnvChoice("OCTET_X", "matmul", kTwo, 1), 0);
  EXPECT_EQ(internal::ParseEnvChoice("OCTET_X", "fp32", kThree, 0), 2);
}

TEST(EnvChoice, AnyOtherValueIsAnErrorListingTheValues) {
  EXPECT_THAT(ErrorOf([] { internal::ParseEnvChoice("OCTET_X", "Sgemm", kTwo, 0); }),
              StartsWith("OCTET_X='Sgemm' is not understood: use matmul (the default) or sgemm (oneDNN's sgemm) ["));
  EXPECT_THAT(ErrorOf([] { internal::ParseEnvChoice("OCTET_Y", " fp32", kThree, 0); }),
              StartsWith("OCTET_Y=' fp32' is not understood: use auto (measure), bf16 (dot products) or fp32 "
                         "(FMAs) ["));
}

TEST(EnvChoice, ReadsTheEnvironmentAsItIsNow) {
  {
    ScopedEnv env("OCTET_ENV_TEST_SWITCH", "sgemm");
    EXPECT_EQ(internal::ReadEnvChoice("OCTET_ENV_TEST_SWITCH", kTwo, 0), 1);
  }
  EXPECT_EQ(internal::ReadEnvChoice("OCTET_ENV_TEST_SWITCH", kTwo, 0), 0);
  ScopedEnv env("OCTET_ENV_TEST_SWITCH", "on");
  EXPECT_THAT(ErrorOf([] { internal::ReadEnvChoice("OCTET_ENV_TEST_SWITCH", kTwo, 0); }),
              HasSubstr("OCTET_ENV_TEST_SWITCH='on' is not understood"));
}

// OCTET_DISABLE_AVX512 took any non-empty value but "0" as "disable": "false"
// turned AVX-512 off. It now takes 0 or 1 (re-read by
// ForceScalarConvertersForTesting(false)).
TEST(EnvChoice, DisableAvx512TakesZeroOrOne) {
  {
    ScopedEnv env("OCTET_DISABLE_AVX512", "false");
    EXPECT_THAT(ErrorOf([] { internal::ForceScalarConvertersForTesting(false); }),
                HasSubstr("OCTET_DISABLE_AVX512='false' is not understood: use 0 (AVX-512 kernels where the CPU "
                          "has them; the default) or 1 (the AVX2 kernels, as on a CPU without AVX-512)"));
  }
  // Whatever the test's own environment says.
  ScopedEnv unset("OCTET_DISABLE_AVX512", nullptr), unset_bf16("OCTET_DISABLE_AVX512_BF16", nullptr);
  internal::ForceScalarConvertersForTesting(false);
  EXPECT_EQ(internal::ActiveConverterIsa().avx512, internal::DetectedConverterIsa().avx512);
  {
    ScopedEnv env("OCTET_DISABLE_AVX512", "1");
    internal::ForceScalarConvertersForTesting(false);
    EXPECT_FALSE(internal::ActiveConverterIsa().avx512);
    EXPECT_EQ(internal::ActiveConverterIsa().avx2, internal::DetectedConverterIsa().avx2);
  }
  internal::ForceScalarConvertersForTesting(false);
}

// OCTET_DISABLE_AVX512_BF16=1: AVX-512 as the CPU has it, its BF16
// extension left unused (as on Skylake to Ice Lake).
TEST(EnvChoice, DisableAvx512Bf16KeepsTheRestOfAvx512) {
  ScopedEnv unset("OCTET_DISABLE_AVX512", nullptr);
  {
    ScopedEnv env("OCTET_DISABLE_AVX512_BF16", "1");
    internal::ForceScalarConvertersForTesting(false);
    EXPECT_EQ(internal::ActiveConverterIsa().avx512, internal::DetectedConverterIsa().avx512);
    EXPECT_EQ(internal::ActiveConverterIsa().vbmi, internal::DetectedConverterIsa().vbmi);
    EXPECT_FALSE(internal::ActiveConverterIsa().bf16);
    EXPECT_FALSE(CpuHasAvx512Bf16());
  }
  {
    ScopedEnv env("OCTET_DISABLE_AVX512_BF16", "0");
    internal::ForceScalarConvertersForTesting(false);
    EXPECT_EQ(internal::ActiveConverterIsa().bf16, internal::DetectedConverterIsa().bf16);
  }
  internal::ForceScalarConvertersForTesting(false);
}

// The switches env.h's NOTE names, each with its default first and at least
// one other value, and nothing else.
TEST(EnvSwitch, TheTableListsEverySwitch) {
  std::vector<std::string> names;
  for (const internal::EnvSwitch& s : internal::EnvSwitches()) {
    names.emplace_back(s.name);
    EXPECT_GE(s.values.size(), 2u) << s.name;
    EXPECT_THAT(std::string(s.values[0].meaning), HasSubstr("default")) << s.name;
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("OCTET_CPU_GEMM", "OCTET_CPU_GELU", "OCTET_CPU_AMX_GEMM",
                                                     "OCTET_CPU_F32_GEMM", "OCTET_CPU_CACHING",
                                                     "OCTET_DISABLE_AVX512", "OCTET_DISABLE_AVX512_BF16",
                                                     "OCTET_CUDA_SYNC_CHECK"));
  EXPECT_EQ(internal::ParseEnvSwitch("OCTET_CPU_GEMM", "fp32"), 2);
  EXPECT_EQ(internal::ParseEnvSwitch("OCTET_CPU_GELU", nullptr), 0);
  EXPECT_THAT(ErrorOf([] { internal::ParseEnvSwitch("OCTET_CPU_GEM", "fp32"); }),
              StartsWith("'OCTET_CPU_GEM' is not one of octet's environment switches"));
}

// NOTE [every switch checked at every read]: a bad value of any switch is an
// error at the read of any other, naming the bad one; each is read as it is
// now, and the switch being read gives its own error first.
TEST(EnvSwitch, AReadOfAnyChecksThemAll) {
  for (const internal::EnvSwitch& bad : internal::EnvSwitches()) {
    ScopedEnv env(std::string(bad.name).c_str(), "maybe");
    const std::string message = std::string(bad.name) + "='maybe' is not understood: use ";
    for (const internal::EnvSwitch& read : internal::EnvSwitches()) {
      EXPECT_THAT(ErrorOf([&] { internal::ReadEnvSwitch(read.name); }), StartsWith(message))
          << "reading " << read.name;
    }
    EXPECT_THAT(ErrorOf([] { internal::CheckEnvSwitches(); }), StartsWith(message));
  }
  {
    ScopedEnv gelu("OCTET_CPU_GELU", "maybe"), gemm("OCTET_CPU_GEMM", "often");
    EXPECT_THAT(ErrorOf([] { internal::ReadEnvSwitch("OCTET_CPU_GEMM"); }),
                StartsWith("OCTET_CPU_GEMM='often' is not understood"));
  }
  ScopedEnv sgemm("OCTET_CPU_F32_GEMM", "sgemm");
  EXPECT_EQ(internal::ReadEnvSwitch("OCTET_CPU_F32_GEMM"), 1);
  EXPECT_NO_THROW(internal::CheckEnvSwitches());
}

}  // namespace
}  // namespace octet
