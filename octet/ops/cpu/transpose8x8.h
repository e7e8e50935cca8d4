// An 8 x 8 transpose of 32-bit elements in AVX2 registers, for the CPU
// kernels that pack tiles transposed (GEMM operand packing, attention).
#pragma once

#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace octet::cpu {

#if defined(__AVX2__)
// r[i] = column i of the 8 x 8 block whose rows are r[0..7] on entry. The
// classic unpack / shuffle / permute2f128 net.
inline void Transpose8x8InRegisters(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3 (h = 0) and 4-7 (h = 1)
    s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x31);
  }
}

// dst (8 rows of 8 x 32-bit, stride ds) = src (8 x 8, stride ss) transposed;
// strides in 32-bit units.
inline void Transpose8x8Dwords(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  Transpose8x8InRegisters(r);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ds, r[i]);
}
#endif

}  // namespace octet::cpu
