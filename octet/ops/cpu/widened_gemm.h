// The FP32-FMA path of the CPU GEMMs for BF16 and FP8 operands (internal
// to ops/cpu/; NOTE [CPU GEMM path] in ops/cpu_gemm_path.h, NOTE [FP32-FMA
// path costs] in widened_gemm.cc).
#pragma once

#include <octet/core/tensor.h>

namespace octet::cpu {

// out = a·b (* *scale when scale is set) (+ bias) with f32 FMAs. a, b: bf16
// or FP8 (their bytes; the FP8 scales are the caller's `scale`), or b f32
// rounded to bf16 values (NOTE [narrowed B] in dnnl_gemm.cc); bias: (N) f32
// or bf16, or undefined; out: contiguous f32 or bf16.
void WidenedGemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, const float* scale);

}  // namespace octet::cpu
