// Kernel signature of the FP8 cast statistics (internal): how many elements
// a cast to FP8 would saturate or flush to zero. nn/fp8_scaling.cc
// (CountFp8Clipping, the FP8 telemetry) calls it; the backends register it
// (ops/cpu/fp8_stats_cpu.cc, ops/cuda/fp8_stats_cuda.cc). The table is
// defined in ops/fp8_stats.cc.
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// NOTE [fp8 clip counts]: with a = |float(x) * scale| (one float32 multiply,
// as the cast does):
//   saturated: a rounds, to nearest even, past fp8_dtype's max finite value:
//              a > 464 for E4M3 (the tie at 464 goes to 448), a >= 61440 for
//              E5M2 (the tie goes to 65536, i.e. inf);
//   underflow: x != 0 and a <= half the smallest subnormal (2^-10 for E4M3,
//              2^-17 for E5M2): the cast rounds it to zero.
// x: contiguous, float32/float64/bfloat16/float16. fp8_dtype: an FP8 dtype.
struct Fp8ClipCounts {
  int64_t saturated = 0;
  int64_t underflow = 0;
};
using Fp8ClipCountFn = Fp8ClipCounts(const Tensor& x, float scale, DType fp8_dtype);
OCTET_DECLARE_KERNEL(fp8_clip_count_kernel, Fp8ClipCountFn);

}  // namespace octet
