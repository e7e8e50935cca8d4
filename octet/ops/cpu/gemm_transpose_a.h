// A row-major bf16 copy of a transposed GEMM A operand, for oneDNN's AMX
// kernels (internal to ops/cpu/; NOTE [row-major A for AMX]).
//
// NOTE [row-major A for AMX]: a weight gradient dW = dYᵀ·X reads its A, dYᵀ,
// as a transposed view ("ba" in oneDNN's terms). oneDNN 2.6's AMX BF16
// matmul runs such GEMMs at 0.6-0.7x the rate it reaches on a row-major A of
// the same shape (Xeon with AMX, 2 threads, 2026-11-28: M x K x N 3072 x
// 1024 x 768 3.2-3.4 ms against 1.9-2.0, 768 x 1024 x 3072 2.8-3.0 against
// 2.0-2.1, 2304 x 1024 x 768 2.0 against 1.45-1.5), while its f32 kernels
// and the VDPBF16PS ones read both alike (f32: within 5 %). So where
// oneDNN's BF16 matmul runs on AMX, a transposed A of a GEMM with enough
// rows to pay for it is copied row-major first, into a transient buffer
// (an FP8 A after its conversion to bf16, which NOTE [converted A reuse] in
// matmul_operands.h keeps for the other GEMM of the pair); a 16 x 16 pair
// transpose in registers (transpose16x16.h) makes the copy cost about one
// pass over A.
#pragma once

#include <cstdint>

namespace octet::cpu {

// dst (M x K, row-major) = A where element (m, k) of A is at src[k * ld +
// m] (16-bit elements: bf16 bits). ld >= M. Runs on the OpenMP pool; call
// only where the CPU has AVX-512 BW (DnnlUsesAmxBf16 implies it).
void RowMajorBf16A(const uint16_t* src, int64_t M, int64_t K, int64_t ld, uint16_t* dst);

}  // namespace octet::cpu
