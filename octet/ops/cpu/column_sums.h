// Column sums of a row-major (R, C) matrix in f32, each column's rows added
// in order 0..R-1 from +0: the order, and so the bits, of the CPU's
// Sum(x.To(f32), {0}). Shared by the reductions (ops/cpu/reduce_cpu.cc) and
// the bias gradients fused with FP8 casts (ops/cpu/cast_cpu.cc), so the two
// give the same bits by construction.
#pragma once

#include <cstdint>

#include <octet/core/dtype.h>

namespace octet::cpu {

// out[c] = sum over r = 0..R-1 of float(x[r * C + c]), each column added
// row after row from +0.
//   x: (R, C) contiguous of `dtype` (f32, bf16, f16 or f64; f64 elements are
//   rounded to f32 before they are added); out: (C) f32.
void ColumnSumsF32(const void* x, DType dtype, int64_t R, int64_t C, float* out);

}  // namespace octet::cpu
