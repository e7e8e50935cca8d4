// octet's environment switches, read through one parser.
//
// NOTE [environment switches]: each of octet's switches (OCTET_CPU_GEMM,
// OCTET_CPU_GELU, OCTET_CPU_AMX_GEMM, OCTET_CPU_F32_GEMM, OCTET_CPU_CACHING,
// OCTET_DISABLE_AVX512, OCTET_DISABLE_AVX512_BF16, OCTET_CUDA_SYNC_CHECK)
// takes one of a few named
// values, and unset or empty means its default. Any other value is an error
// that names the variable, the value given and every value it takes, with
// what each one does: a misspelt switch never falls back silently (before
// this parser, OCTET_CPU_CACHING=off left the cache on and
// OCTET_DISABLE_AVX512=false turned AVX-512 off). OCTET_LOG_LEVEL is the
// exception by design: logging never fails an op (core/log.h).
//
// NOTE [every switch checked at every read]: the switches and their values
// are listed in one table (EnvSwitches, env.cc), and reading any one of them
// checks them all. Each is read where its code first runs, so a switch whose
// code a run never reaches was never read: OCTET_CPU_GELU and
// OCTET_CPU_AMX_GEMM at O0, OCTET_CPU_F32_GEMM at O1 and O2,
// OCTET_CPU_AMX_GEMM wherever BF16 GEMMs run on FP32 FMAs (and so in
// TrainGpt.ABadSwitchStopsTheRunNamingIt on such CPUs), and
// OCTET_CUDA_SYNC_CHECK on the CPU. A misspelt value went unnoticed there.
// Every process reads OCTET_CPU_CACHING at its first allocation, so a bad
// value of any switch now stops it there.
//
//   const bool sgemm = ReadEnvSwitch("OCTET_CPU_F32_GEMM") == 1;  // "matmul" 0, "sgemm" 1
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

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

// One of octet's switches: its variable and the values it takes, the first
// its default (what unset or empty means).
struct EnvSwitch {
  std::string_view name;
  std::span<const EnvValue> values;
};

// Every switch octet reads (NOTE [environment switches]).
std::span<const EnvSwitch> EnvSwitches();

// ParseEnvChoice of `text` as a value of the switch `name` (one of
// EnvSwitches(); any other name is an error): the index of the value, 0
// when text is null or empty.
int ParseEnvSwitch(std::string_view name, const char* text);

// The switch `name`'s value as the environment has it now, as
// ParseEnvSwitch; then every other switch is checked too, and the first
// that holds a value it does not take is an error (NOTE [every switch
// checked at every read]).
int ReadEnvSwitch(std::string_view name);

// Throws for the first switch whose environment value is not one it takes.
void CheckEnvSwitches();

}  // namespace octet::internal
