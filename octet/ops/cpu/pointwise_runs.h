// Contiguous runs of the pointwise kernels (ops/cpu/pointwise_cpu.cc) that
// other CPU code calls directly: the bf16 GELU tables are filled by the f32
// kernels, and the choice between table and computed GELU times the
// computed one (NOTE [bf16 gelu tables] in ops/cpu_gelu_path.h). Each runs
// on the calling thread, in the ISA build the kernels use (ops/cpu/isa.h).
#pragma once

#include <cstdint>

#include <octet/core/bfloat16.h>

namespace octet::cpu {

// o = gelu(x), o = dy * gelu'(x) in f32, as the f32 kernels compute them.
void GeluF32Run(const float* x, float* o, int64_t n);
void GeluGradF32Run(const float* dy, const float* x, float* o, int64_t n);

// o = bf16(gelu(x)), o = bf16(dy * gelu'(x)) computed, as the bf16 kernels
// do without tables.
void GeluBf16ComputeRun(const bfloat16* x, bfloat16* o, int64_t n);
void GeluGradBf16ComputeRun(const bfloat16* dy, const bfloat16* x, bfloat16* o, int64_t n);

}  // namespace octet::cpu
