// octet's environment switches, read through one parser.
//
// NOTE [environment switches]: each of octet's switches (OCTET_CPU_GEMM,
// OCTET_CPU_GELU, OCTET_CPU_AMX_GEMM, OCTET_CPU_F32_GEMM, OCTET_CPU_CACHING,
// OCTET_DISABLE_AVX512, OCTET_CUDA_SYNC_CHECK) takes one of a few named
// values, and unset or empty means its default. Any other value is an error
// that names the variable, the value given and every value it takes, with
// what each one does: a misspelt switch never falls back silently (before
// this parser, OCTET_CPU_CACHING=off left the cache on and
// OCTET_DISABLE_AVX512=false turned AVX-512 off). OCTET_LOG_LEVEL is the
// exception by design: logging never fails an op (core/log.h).
//
//   constexpr EnvValue kValues[] = {{"matmul", "oneDNN's matmul (the default)"}, {"sgemm", "oneDNN's sgemm"}};
//   const bool sgemm = ReadEnvChoice("OCTET_CPU_F32_GEMM", kValues, 0) == 1;
#pragma once

#include <span>
#include <string_view>

namespace octet::internal {

struct EnvValue {
  std::string_view value;    // as the user writes it, e.g. "sgemm"
  std::string_view meaning;  // what it does, for the error message
};

// The index in `values` of `text`, the variable `name`'s value; `fallback`
// when text is null or empty. Throws octet::Error for any other text:
//   OCTET_CPU_F32_GEMM='fast' is not understood: use matmul (oneDNN's matmul
//   (the default)) or sgemm (oneDNN's sgemm)
int ParseEnvChoice(std::string_view name, const char* text, std::span<const EnvValue> values, int fallback);

// ParseEnvChoice of the environment variable `name` as it is now.
int ReadEnvChoice(const char* name, std::span<const EnvValue> values, int fallback);

}  // namespace octet::internal
