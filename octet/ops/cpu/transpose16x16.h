// A 16 x 16 transpose of 32-bit elements in AVX-512 registers, for the CPU
// kernels that move pairs of bf16 values across rows: the attention's
// packing and AMX products (attention_bf16_tiles.cc, attention_amx.cc) and
// the row-major copy of a transposed GEMM A (gemm_transpose_a.cc). Call only
// where the CPU has AVX-512.
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

#if defined(__x86_64__)
#include <immintrin.h>

namespace octet::cpu {

// NOTE [pair transpose]: TransposePairs moves 16 x 16 blocks of 32-bit pairs
// through registers (unpacks of 32 and 64 bits, then two rounds of 128-bit
// lane shuffles: 64 shuffles a block) instead of gathering each output
// vector (16 gathers of 16 a block, one per vector; gathers are slow on the
// AMD cores these figures come from). Zen 5, 2026-11-28: its share of
// octet_attention_bench's bf16 fwd+bwd (B8 H4 T128 D64) 8.1 % -> ~4 %;
// three alternating rounds, ms: that shape 0.828-0.836 -> 0.776-0.796, D32
// (B16 H4 T128) 1.04-1.08 -> 0.99-1.02, B4 H12 T256 D64 3.88-3.93 ->
// 3.70-3.83. The same bits: a transpose moves values, and the attention
// tests compare the tiles' results with references and across paths.
// r[i]: row i of the block in; o[c]: column c of the block out.
__attribute__((target("avx512f"))) OCTET_INLINE void Transpose16x16Epi32(const __m512i (&r)[16], __m512i (&o)[16]) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k) {  // per 128-bit lane: (a0 b0 a1 b1), (a2 b2 a3 b3)
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {  // u[4k + m], lane L: column 4L + m of rows 4k..4k+3
    u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k + 0], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k + 0], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int m = 0; m < 4; ++m) {  // lane L of u[m], u[4+m], u[8+m], u[12+m] make column 4L + m
    const __m512i a = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44), b = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44),
                  d = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xEE);
    o[m] = _mm512_shuffle_i32x4(a, c, 0x88);
    o[4 + m] = _mm512_shuffle_i32x4(a, c, 0xDD);
    o[8 + m] = _mm512_shuffle_i32x4(b, d, 0x88);
    o[12 + m] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
}

// dst[c * ds + r] = src[r * ss + c] for r < rows and c < cols (32-bit
// elements; both multiples of 16), with src rows from `valid_rows` on read
// as zeros: 16 x 16 blocks through Transpose16x16Epi32.
__attribute__((target("avx512f"))) OCTET_INLINE void TransposeEpi32Blocks(const uint32_t* src, int64_t ss,
                                                                          int64_t rows, int64_t valid_rows,
                                                                          int64_t cols, uint32_t* dst, int64_t ds) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      __m512i in[16], out[16];
      for (int j = 0; j < 16; ++j)
        in[j] = r0 + j < valid_rows ? _mm512_loadu_si512(src + (r0 + j) * ss + c0) : _mm512_setzero_si512();
      Transpose16x16Epi32(in, out);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + (c0 + i) * ds + r0, out[i]);
    }
}

}  // namespace octet::cpu

#endif  // __x86_64__
