// FloatToBf16Bits on 16 and 32 AVX-512 lanes, inline (internal): the integer
// form (AVX-512F/BW) and the one that uses AVX-512 BF16's conversion
// instructions with the integer form as the fix-up for the lanes they treat
// differently; and 16-lane loads that widen bf16. Shared by the row
// converters (core/convert_avx512.cc), the GEMM packer that narrows f32 B
// operands while it packs them (ops/cpu/gemm_pack.cc, NOTE [native narrowing
// in packing]) and the norms' bf16 rows (ops/cpu/norm_cpu.cc). Callers run
// them only on CPUs with the instructions their target attribute names.
#pragma once

#include <octet/core/convert_internal.h>

#if OCTET_CONVERT_X86_KERNELS

#include <immintrin.h>

#include <cstdint>

#include <octet/core/bfloat16.h>
#include <octet/core/macros.h>

namespace octet::convert_internal {

// Lowest `count` bits set, count in [0, 64]: the lanes of a row's tail.
inline uint64_t LowBits64(int64_t count) {
  return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
}

// 16 source values as f32: f32 loaded as they are, bf16 widened in the
// register (a bf16 is the top half of its f32: exact), so a bf16 row needs no
// f32 copy (NOTE [bf16 quantize in registers] in core/convert.cc,
// NOTE [native bf16 norm output] in ops/cpu/norm_cpu.cc). MaskLoadFloatx16
// reads only the lanes in mask, the others 0.
OCTET_TARGET_AVX512 OCTET_INLINE __m512 LoadFloatx16(const float* src) { return _mm512_loadu_ps(src); }
OCTET_TARGET_AVX512 OCTET_INLINE __m512 LoadFloatx16(const uint16_t* src) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))), 16));
}
OCTET_TARGET_AVX512 OCTET_INLINE __m512 MaskLoadFloatx16(__mmask16 mask, const float* src) {
  return _mm512_maskz_loadu_ps(mask, src);
}
OCTET_TARGET_AVX512 OCTET_INLINE __m512 MaskLoadFloatx16(__mmask16 mask, const uint16_t* src) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, src)), 16));
}

// Integer round-to-nearest-even, NaN -> 0x7FFF: FloatToBf16Bits on 16 lanes.
OCTET_TARGET_AVX512 OCTET_INLINE __m256i FloatToBf16x16Int(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(kBf16CanonicalNaN));
  return _mm512_cvtepi32_epi16(r);
}

// vcvtneps2bf16 rounds to nearest even but treats subnormal inputs as zero
// and keeps NaN payloads; lanes holding those (fpclass: QNaN 0x01 | denormal
// 0x20 | SNaN 0x80) are redone with the integer path.
OCTET_TARGET_AVX512_BF16 OCTET_INLINE __m256i FloatToBf16x16Native(__m512 x) {
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
  const __mmask16 special = _mm512_fpclass_ps_mask(x, 0xA1);
  if (OCTET_UNLIKELY(special != 0)) {
    r = _mm256_mask_blend_epi16(special, r, FloatToBf16x16Int(x));
  }
  return r;
}

// NOTE [bf16 narrowing width]: vcvtne2ps2bf16 narrows 32 lanes (two
// registers) in one instruction where vcvtneps2bf16 narrows 16: half the
// conversion instructions, and one 64-byte store per 32 values instead of
// two 32-byte ones. Every bf16 pointwise result goes through it, in
// FloatToBf16Native's loop (core/convert_avx512.cc), after its f32 chunk
// (NOTE [narrow pointwise in chunks] in ops/cpu/pointwise_cpu.cc), as do the
// norms' outputs, f32 -> bf16 casts and f32 weights packed for a bf16 GEMM
// (NOTE [native narrowing in packing]). Measured on a Zen 5 (2026-11-24,
// alternating, one thread): octet_convert_bench FloatToBf16Row n=16384
// 705-732 -> 617-673 ns; bf16 GELU over 4096 x 1024 and 1024 x 1024 (a
// driver timing 2.6G elements through Gelu) 5-8 % faster in 4 of 4 rounds.
// Its inputs are treated as vcvtneps2bf16 treats them, so a group holding a
// subnormal or NaN lane is redone by FloatToBf16x16Native, half by half.
// In a training step most of that loop's samples fall on its stores (perf,
// wide GPT at O2: 66 %), into outputs not in the cache; prefetching the
// output 1 KiB ahead (two prefetcht0 per 64 values) measured no gain
// (octet_train_step_bench, 2026-11-27, three alternating rounds, O2 ms:
// small 45.3-46.3 against 45.8-51.6, wide 151-155 against 150-163), so it
// is not done. Bf16 GELU alone over a cold (1024, 3072) output costs only
// 10-20 % more than over a cached one.
OCTET_TARGET_AVX512_BF16 OCTET_INLINE __m512i FloatToBf16x32Native(__m512 lo, __m512 hi) {
  __m512i r = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // lanes 0-15 from lo
  const __mmask16 special = _mm512_fpclass_ps_mask(lo, 0xA1) | _mm512_fpclass_ps_mask(hi, 0xA1);
  if (OCTET_UNLIKELY(special != 0)) {
    r = _mm512_inserti64x4(_mm512_castsi256_si512(FloatToBf16x16Native(lo)), FloatToBf16x16Native(hi), 1);
  }
  return r;
}

}  // namespace octet::convert_internal

#endif  // OCTET_CONVERT_X86_KERNELS
