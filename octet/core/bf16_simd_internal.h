// FloatToBf16Bits with AVX2 integer arithmetic, inline (internal), the word
// packing it needs, and the exact widening back: shared by the AVX2 row
// converters (core/convert_avx2.cc), the GEMM packer that rounds f32 B
// operands while it packs them (ops/cpu/gemm_pack.cc, NOTE [narrowed B]), the
// span rounding of the CPU GEMM (ops/cpu/dnnl_gemm.cc) and the row kernels
// that widen bf16 lanes (ops/cpu/row_helpers.h, ops/cpu/attention_cpu.cc). The
// vector helpers are compiled for AVX2 wherever they are inlined; callers run
// them only on CPUs that have AVX2.
#pragma once

#include <cstdint>

#include <octet/core/bfloat16.h>
#include <octet/core/convert_internal.h>

#if OCTET_CONVERT_X86_KERNELS
#include <immintrin.h>
#endif

namespace octet::convert_internal {

#if OCTET_CONVERT_X86_KERNELS

// FloatToBf16Bits on 8 lanes (integer round-to-nearest-even, so MXCSR does
// not matter; NaN -> 0x7FFF), one result in the low half of each 32-bit lane.
__attribute__((target("avx2"))) OCTET_INLINE __m256i FloatToBf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(kBf16CanonicalNaN), nan);
}

// Two vectors of 8 int32 values in [0, 0xFFFF] -> 16 words in element order
// (packus works per 128-bit lane; the permute puts the lanes back in order).
__attribute__((target("avx2"))) OCTET_INLINE __m256i PackWords(__m256i w0, __m256i w1) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(w0, w1), 0xD8);
}

// FloatToBf16Bits of src[0, 16), as 16 packed bf16 words in order.
__attribute__((target("avx2"))) OCTET_INLINE __m256i FloatToBf16x16(const float* src) {
  return PackWords(FloatToBf16x8(_mm256_loadu_ps(src)), FloatToBf16x8(_mm256_loadu_ps(src + 8)));
}

// The 8 lanes of x rounded to bf16 precision (FloatToBf16Bits) and kept in
// f32: Bf16BitsToFloat(FloatToBf16Bits(x)) per lane.
__attribute__((target("avx2"))) OCTET_INLINE __m256 RoundToBf16x8(__m256 x) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(FloatToBf16x8(x), 16));
}

// Bf16BitsToFloat of src[0, 8): the bits widened into the top half of each
// f32 lane (exact).
__attribute__((target("avx2"))) OCTET_INLINE __m256 Bf16x8ToFloat(const uint16_t* src) {
  const __m256i words = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
}

#endif  // OCTET_CONVERT_X86_KERNELS

// dst[i] = Bf16BitsToFloat(FloatToBf16Bits(src[i])), i < n: f32 values
// rounded to bf16 precision and kept in f32. Eight lanes at a time where the
// including file is compiled for AVX2 (the plain loop is not vectorised
// well).
inline void RoundToBf16Row(const float* src, int64_t n, float* dst) {
  int64_t i = 0;
#if OCTET_CONVERT_X86_KERNELS && defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, RoundToBf16x8(_mm256_loadu_ps(src + i)));
#endif
  for (; i < n; ++i) dst[i] = Bf16BitsToFloat(FloatToBf16Bits(src[i]));
}

}  // namespace octet::convert_internal
