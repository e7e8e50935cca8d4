// NOTE [environment switches] (env.h).
#include <octet/core/env.h>

#include <cstdlib>
#include <string>

#include <octet/core/error.h>

namespace octet::internal {

int ParseEnvChoice(std::string_view name, const char* text, std::span<const EnvValue> values, int fallback) {
  if (text == nullptr || text[0] == '\0') return fallback;
  const std::string_view given(text);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].value == given) return static_cast<int>(i);
  std::string choices;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) choices += i + 1 == values.size() ? " or " : ", ";
    choices.append(values[i].value).append(" (").append(values[i].meaning).append(")");
  }
  OCTET_FAIL(name, "='", given, "' is not understood: use ", choices);
}

int ReadEnvChoice(const char* name, std::span<const EnvValue> values, int fallback) {
  return ParseEnvChoice(name, std::getenv(name), values, fallback);
}

namespace {

// Each switch's values, its default first; the code that reads a switch
// names its values by index (e.g. cpu_gemm_path.cc: 1 bf16, 2 fp32).
constexpr EnvValue kCpuGemm[] = {{"auto", "measure this CPU's rates; the default"},
                                 {"bf16", "BF16 dot products"},
                                 {"fp32", "widen to FP32 and use FMAs"}};
constexpr EnvValue kCpuGelu[] = {
    {"auto", "time both once; the default"}, {"table", "look bf16 GELU up in tables"}, {"compute", "evaluate it"}};
constexpr EnvValue kCpuAmxGemm[] = {{"1", "octet's AMX GEMM; the default where the CPU has AMX"},
                                    {"0", "oneDNN's matmul"}};
constexpr EnvValue kCpuF32Gemm[] = {{"matmul", "the default: oneDNN's matmul primitive, B packed by octet"},
                                    {"sgemm", "oneDNN's sgemm for the GEMMs whose B octet would pack"}};
constexpr EnvValue kCpuCaching[] = {{"1", "cache freed blocks for reuse; the default"},
                                    {"0", "every block from the system and back"}};
constexpr EnvValue kDisableAvx512[] = {{"0", "AVX-512 kernels where the CPU has them; the default"},
                                       {"1", "the AVX2 kernels, as on a CPU without AVX-512"}};
constexpr EnvValue kDisableAvx512Bf16[] = {
    {"0", "AVX-512 BF16 instructions where the CPU has them; the default"},
    {"1", "none: the AVX-512 kernels without them, as on a CPU without that extension (Skylake to Ice Lake)"}};
constexpr EnvValue kCudaSyncCheck[] = {{"0", "no check; the default"},
                                       {"1", "fail on a host synchronisation inside a step"}};

constexpr EnvSwitch kSwitches[] = {
    {"OCTET_CPU_GEMM", kCpuGemm},           {"OCTET_CPU_GELU", kCpuGelu},
    {"OCTET_CPU_AMX_GEMM", kCpuAmxGemm},    {"OCTET_CPU_F32_GEMM", kCpuF32Gemm},
    {"OCTET_CPU_CACHING", kCpuCaching},     {"OCTET_DISABLE_AVX512", kDisableAvx512},
    {"OCTET_DISABLE_AVX512_BF16", kDisableAvx512Bf16}, {"OCTET_CUDA_SYNC_CHECK", kCudaSyncCheck}};

const EnvSwitch& SwitchNamed(std::string_view name) {
  for (const EnvSwitch& s : kSwitches)
    if (s.name == name) return s;
  OCTET_FAIL("'", name, "' is not one of octet's environment switches");
}

// s's index for its environment value as it is now.
int ParseNow(const EnvSwitch& s) {
  return ParseEnvChoice(s.name, std::getenv(std::string(s.name).c_str()), s.values, 0);
}

}  // namespace

std::span<const EnvSwitch> EnvSwitches() { return kSwitches; }

int ParseEnvSwitch(std::string_view name, const char* text) {
  const EnvSwitch& s = SwitchNamed(name);
  return ParseEnvChoice(s.name, text, s.values, 0);
}

void CheckEnvSwitches() {
  for (const EnvSwitch& s : kSwitches) ParseNow(s);
}

int ReadEnvSwitch(std::string_view name) {
  const int index = ParseNow(SwitchNamed(name));  // its own error first
  CheckEnvSwitches();
  return index;
}

}  // namespace octet::internal
