// FP8 codes decoded to their exact f32 values with AVX2 + F16C arithmetic,
// inline (internal; NOTE [avx2 fp8 decode] in core/convert_avx2.cc): shared
// by the AVX2 row converters and the CPU attention's FP8 operand packing
// (ops/cpu/attention_pack.h, NOTE [fp8 attention decode]). Compiled for AVX2
// + F16C wherever they are inlined; callers run them only on CPUs with both.
#pragma once

#include <cstdint>

#include <octet/core/convert_internal.h>
#include <octet/core/macros.h>

#if OCTET_CONVERT_X86_KERNELS
#include <immintrin.h>
#endif

namespace octet::convert_internal {

#if OCTET_CONVERT_X86_KERNELS

// 16 decoded codes: their exact float values (elements 0-7 and 8-15) and,
// per 16-bit element, all-ones for NaN codes.
struct Decoded16 {
  __m256 lo, hi;
  __m256i nan;
};

// NOTE [avx2 fp8 decode]: e5m2 is the top byte of a half; e4m3 moved into a
// half's fields is the value times 2^-8, undone by an exact multiply by 256;
// e4m3's NaN codes become a half NaN first.
__attribute__((target("avx2,f16c"))) OCTET_INLINE Decoded16 DecodeFp8x16(__m128i codes, Fp8Kind kind) {
  const __m256i w = _mm256_cvtepu8_epi16(codes);
  const __m256i magnitude = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
  Decoded16 d;
  __m256i h;
  if (kind == kE5M2) {
    h = _mm256_slli_epi16(w, 8);
    d.nan = _mm256_cmpgt_epi16(magnitude, _mm256_set1_epi16(0x7C));
  } else {
    h = _mm256_or_si256(_mm256_slli_epi16(magnitude, 7),
                        _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8));
    d.nan = _mm256_cmpeq_epi16(magnitude, _mm256_set1_epi16(0x7F));
    h = _mm256_or_si256(h, _mm256_and_si256(d.nan, _mm256_set1_epi16(0x7E00)));
  }
  d.lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  d.hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  if (kind == kE4M3) {
    const __m256 rebias = _mm256_set1_ps(256.0f);
    d.lo = _mm256_mul_ps(d.lo, rebias);
    d.hi = _mm256_mul_ps(d.hi, rebias);
  }
  return d;
}

// The exact values of the 8 codes in the low 8 bytes of `codes`: DecodeFp8x16's
// lo (what it computes for the upper bytes is left unused).
__attribute__((target("avx2,f16c"))) OCTET_INLINE __m256 DecodeFp8x8(__m128i codes, Fp8Kind kind) {
  return DecodeFp8x16(codes, kind).lo;
}

#endif  // OCTET_CONVERT_X86_KERNELS

}  // namespace octet::convert_internal
