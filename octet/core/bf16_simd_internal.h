// FloatToBf16Bits on eight f32 lanes with AVX2 integer arithmetic (internal):
// shared by the AVX2 row converter (core/convert_avx2.cc) and the GEMM packer
// that rounds f32 B operands while it packs them (ops/cpu/gemm_pack.cc,
// NOTE [narrowed B]). Compiled for AVX2 wherever it is inlined; callers run
// it only on CPUs that have AVX2.
#pragma once

#include <octet/core/convert_internal.h>

#if OCTET_CONVERT_X86_KERNELS

#include <immintrin.h>

#include <octet/core/bfloat16.h>

namespace octet::convert_internal {

// FloatToBf16Bits on 8 lanes (integer round-to-nearest-even, so MXCSR does
// not matter; NaN -> 0x7FFF), one result in the low half of each 32-bit lane.
__attribute__((target("avx2"))) OCTET_INLINE __m256i FloatToBf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(kBf16CanonicalNaN), nan);
}

}  // namespace octet::convert_internal

#endif  // OCTET_CONVERT_X86_KERNELS
