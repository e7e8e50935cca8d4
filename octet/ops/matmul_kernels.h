// Kernel signatures of the matmul family (internal: shared by ops/matmul.cc
// and the backends).
//
// Both kernels compute a batched, broadcast GEMM in one call:
//   out[b..., m, n] = sum_k a[b'..., m, k] * b[b"..., k, n]   (+ bias[n])
// with a (Ba..., M, K), b (Bb..., K, N), out (B..., M, N), all of one rank
// >= 2, where every batch dim of a and of b equals out's or is 1
// (broadcast). a and b may have any strides (transposed and sliced views, 0
// strides); the kernel copies whatever its GEMM library cannot read. out is
// contiguous. M, N or K may be 0 (K == 0 gives bias or zeros).
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>
#include <octet/ops/gemm_layout.h>
#include <octet/ops/registry.h>

namespace octet {

// NOTE [gelu epilogue]: with `gelu_pre` defined (contiguous, out's shape and
// dtype) a kernel writes the product (+ bias) there — the pre-activation the
// backward needs — and out = Gelu(pre) (tanh form, NOTE [gelu] in
// ops/functors.h). On CUDA a single 2-D GEMM with a bias does both in
// cuBLASLt's GELU_AUX_BIAS epilogue (one pass less over the (M,N) result;
// cuBLASLt's GELU is the same tanh approximation, evaluated in its own
// order); otherwise, and on the CPU, the GELU is the pointwise kernel on the
// rounded pre-activation.

// a, b, out: one dtype of f32/f64/bf16/f16; bias: (N) of out's dtype, or
// undefined. Accumulation in f32 (f64 for f64); bias added before the final
// rounding to out's dtype. Where gemm_mixed_bf16 says so, also a bf16 a with
// an f32 b (its values rounded to bf16 as they are read) and/or an f32 out
// (the accumulators unrounded); bias then bf16 or f32.
using MatmulKernelFn = void(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                            const Tensor& gelu_pre);

// FP8 x FP8 (not E5M2 x E5M2): out = (a·b) * (scale_inv_a * scale_inv_b)
// (+ bias), the products exact and accumulated in f32, the way tensor cores
// do it (CUDA_NOTES §1.1: alpha = scaleA·scaleB). a, b: FP8 with per-tensor
// ScaleMeta (no metadata: scale_inv 1); out: f32 or bf16; bias: (N) f32 or
// bf16, or undefined; it is added after the scaling, in f32. role: which
// GEMM of a Linear this is (cuBLASLt sets FAST_ACCUM for kFprop only; the
// CPU accumulates every product exactly in f32 whatever the role).
using ScaledMatmulKernelFn = void(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                                  GemmRole role, const Tensor& gelu_pre);

// Whether FP8 GEMMs on `device` read only K-contiguous operands (NOTE [FP8
// TN rule] in ops/gemm_layout.h). Backs Fp8GemmWantsTransposedCopies.
using Fp8GemmNeedsTnFn = bool(Device device);

OCTET_DECLARE_KERNEL(matmul_kernel, MatmulKernelFn);
OCTET_DECLARE_KERNEL(scaled_matmul_kernel, ScaledMatmulKernelFn);
OCTET_DECLARE_KERNEL(fp8_gemm_needs_tn, Fp8GemmNeedsTnFn);

// Whether the GEMM on `device` applies a GELU in its epilogue (one pass,
// the pre-activation written beside the output) rather than as a separate
// pass after it. Backs GemmEpilogueRunsGelu.
using GemmEpilogueGeluFn = bool(Device device);
OCTET_DECLARE_KERNEL(gemm_epilogue_gelu, GemmEpilogueGeluFn);

// Whether matmul_kernel on `device` takes the mixed bf16 operands above
// (NOTE [mixed bf16 GEMM operands] in ops/cpu/matmul_cpu.cc). Backs
// CastLinear's fused route (NOTE [cast linear] in ops/matmul.h).
using GemmMixedBf16Fn = bool(Device device);
OCTET_DECLARE_KERNEL(gemm_mixed_bf16, GemmMixedBf16Fn);

namespace cpu {

// The CPU backend's cache of oneDNN matmul primitives (NOTE [oneDNN
// primitive cache] in ops/cpu/dnnl_primitive.cc): lookups that found a primitive,
// lookups that had to create one, and the number held now; and, counted since
// the process started (ClearMatmulCacheForTesting keeps them), primitives
// made for a plain B where a packed one was asked for (NOTE [plain weights]
// in ops/cpu/dnnl_primitive.cc), oneDNN reorders run to pack a B, and A and B
// operands copied to a padded leading dimension (NOTE [column-major A], NOTE
// [row-major B beside a column-major A]).
struct MatmulCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t size = 0;
  int64_t plain_b = 0;
  int64_t b_reorders = 0;
  int64_t padded_a = 0;
  int64_t padded_b = 0;
  int64_t amx_gemms = 0;  // GEMMs run by octet's AMX GEMM (NOTE [amx gemm] in ops/cpu/amx_gemm.cc)
  int64_t packed_b = 0;   // GEMMs whose B octet's packers (PackF32B, PackVnniB) packed first
};
MatmulCacheStats GetMatmulCacheStats();
void ClearMatmulCacheForTesting();

}  // namespace cpu
}  // namespace octet
