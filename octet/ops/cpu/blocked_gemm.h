// octet's own blocked f32 GEMM: FP32 FMAs on operands widened while they
// are packed, the output scaled, biased and narrowed while it is stored.
// The FP32-FMA path's GEMM (NOTE [CPU GEMM path] in ops/cpu_gemm_path.h;
// NOTE [blocked gemm] in blocked_gemm.cc for the design and its figures).
#pragma once

#include <cstdint>

#include <octet/core/dtype.h>

namespace octet::cpu {

// A matrix operand: element (i, j) at data + i * row_stride + j * col_stride
// elements of dtype. One stride is 1: row-major or column-major.
struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;  // f32, bf16, or FP8 codes (E4M3 / E5M2)
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// out (m, n) = scale * (a (m, k) · b (k, n)) + bias (n), accumulated in f32.
struct BlockedGemmArgs {
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a;
  GemmOperand b;
  // An f32 b whose values are rounded to bf16 precision (nearest even) as it
  // is packed: an amp Linear's FP32 master weight (NOTE [narrowed B] in
  // dnnl_gemm.cc).
  bool b_round_bf16 = false;
  bool has_scale = false;
  float scale = 1.0f;
  const float* bias = nullptr;  // (n) f32, added after the scale; or null
  void* out = nullptr;          // (m, n) with unit column stride
  DType out_dtype = DType::kFloat32;  // f32, or bf16 rounded once from the f32 result
  int64_t out_row_stride = 0;
};

// Whether the FP32-FMA path runs its 2-D GEMMs here: on x86-64 with the
// AVX-512 kernels in use (UseAvx512Kernels() in ops/cpu/isa.h). Without
// AVX-512 it stays on oneDNN (NOTE [blocked gemm]).
bool BlockedGemmAvailable();

// Runs the GEMM on the OpenMP threads. Each output element is accumulated
// in the same order whatever the thread count. Throws octet::Error for an
// operand layout or dtype it does not take, or without AVX-512.
void BlockedGemm(const BlockedGemmArgs& args);

// BlockedGemm calls since the process started (MatmulCacheStats::blocked).
int64_t BlockedGemmCalls();

}  // namespace octet::cpu

namespace octet::internal {
// Tests and benchmarks: with false, BlockedGemmAvailable() says no, so the
// FP32-FMA path runs oneDNN's f32 matmul between its widening and narrowing
// passes (the path before the blocked GEMM, measured side by side with it).
void SetBlockedGemmEnabledForTesting(bool enabled);
}  // namespace octet::internal
