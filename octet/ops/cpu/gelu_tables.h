// bf16 GELU by table lookups (NOTE [bf16 gelu tables] in ops/cpu_gelu_path.h):
// the tables, the lookup loops and the per-process choice. The f32 kernels
// that fill the tables live in ops/cpu/pointwise_cpu.cc (pointwise_runs.h).
#pragma once

#include <cstdint>

#include <octet/core/bfloat16.h>

namespace octet::cpu {

// Whether bf16 GELU and GeluFp8 on bf16 use the gelu table, and whether
// bf16 GELU's gradient uses the gradient table (GetCpuGeluPath: path and
// backward_path, decided once; lock-free after that).
bool UseGeluTables();
bool UseGeluGradTables();

// The gelu table, 65536 f32 values indexed by bf16 code, built at the first
// call: gelu(x) as the f32 kernel computes it (GeluFp8 reads it directly).
const float* GeluTable();

// out[i] = table[x[i]] for i in [0, n): x holds bf16 codes. AVX-512 gathers
// where the converters use AVX-512 (ops/cpu/isa.h), else one load a value.
void LookupBf16Codes(const float* table, const uint16_t* x, float* out, int64_t n);

// Contiguous runs: o = bf16(gelu(x)); o = bf16(dy * gelu'(x)).
void GeluTableRun(const bfloat16* x, bfloat16* o, int64_t n);
void GeluGradTableRun(const bfloat16* dy, const bfloat16* x, bfloat16* o, int64_t n);

}  // namespace octet::cpu
