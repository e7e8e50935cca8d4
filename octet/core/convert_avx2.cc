// The AVX2 (+F16C) row-converter kernels, for x86-64 CPUs without AVX-512
// (declared in convert_internal.h; chosen at run time by core/convert.cc,
// NOTE [converter dispatch] in convert.h). A target pragma compiles this file
// for AVX2 + F16C whatever the library's baseline is.
//
// NOTE [avx2 fp8 decode]: AVX2 has no byte permute wide enough for a
// 128-entry table, so fp8 codes are decoded through binary16 instead of a
// table: e5m2 is the top byte of a half (code << 8 is the half, infinities
// and NaNs included); e4m3 moved into a half's exponent/mantissa fields
// ((|code| << 7) | sign << 15) is the value times 2^-8, which one exact
// float multiply by 256 undoes. vcvtph2ps widens halves exactly, subnormals
// included, so every finite code decodes to the same float as the table.
// e4m3's NaN codes (|code| == 0x7F) would read as 1.875 and are turned into
// a half NaN first.
//
// The float -> fp8 encoder follows detail::FloatToFp8Bits. NOTE [avx2 fp8
// subnormal rounding]: in the fp8 subnormal range it lets the float adder
// round, as the AVX-512 encoder does (adding 2^(kSubnormalShiftBase - 127),
// whose ulp is the fp8 subnormal step), but AVX2 has no embedded rounding
// or exception suppression, so it does so only while MXCSR rounds to nearest
// and masks the invalid, denormal and precision exceptions (the default;
// checked once a call). Otherwise it takes the integer form (variable shifts
// that round the significand to nearest even), which does not depend on
// MXCSR. Both give FloatToFp8Bits' codes, DAZ or not (an f32 subnormal
// encodes to zero either way). The float form runs at 1.43x the integer
// form's rate (octet_convert_bench BM_QuantizeRowWithAmax path 3, 16 Ki
// values, one thread on the AMX Xeon, 2026-11-29: 2.29 -> 3.28 G values/s).
// tests/core/convert_test.cc QuantizeRowDoesNotDependOnTheRoundingMode
// encodes every FP8 value and its midpoints under all four rounding modes.
#include <octet/core/convert_internal.h>

#if OCTET_CONVERT_X86_KERNELS

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include <octet/core/bf16_simd_internal.h>
#include <octet/core/bfloat16.h>
#include <octet/core/float16.h>
#include <octet/core/fp8_simd_internal.h>

// Everything below, the lambdas handed to ForEachBlock included, is compiled
// for AVX2 + F16C.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

namespace octet::convert_internal {
namespace {

// Rows are processed in blocks of kBlock elements; the last partial block
// goes through zero-padded stack buffers (AVX2 has no byte-masked stores).
constexpr int64_t kBlock = 32;

// Runs `block(src, dst)` on every full block and on the zero-padded tail,
// copying back only the tail's n % kBlock outputs.
template <class In, class Out, class Block>
OCTET_INLINE void ForEachBlock(const In* src, Out* dst, int64_t n,
                                                 Block block) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) block(src + i, dst + i);
  if (i < n) {
    In in[kBlock] = {};
    Out out[kBlock];
    std::memcpy(in, src + i, sizeof(In) * static_cast<size_t>(n - i));
    block(in, out);
    std::memcpy(dst + i, out, sizeof(Out) * static_cast<size_t>(n - i));
  }
}

// Four vectors of 8 int32 values in [0, 255] -> 32 bytes in element order.
OCTET_INLINE __m256i PackBytes(__m256i c0, __m256i c1, __m256i c2,
                                                 __m256i c3) {
  // packus works within 128-bit lanes: the dwords of `bytes` hold
  // c0[0..3], c1[0..3], c2[0..3], c3[0..3] | c0[4..7], c1[4..7], c2[4..7], c3[4..7].
  const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1),
                                            _mm256_packus_epi32(c2, c3));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// PackWords: core/bf16_simd_internal.h.

// Decoded16, DecodeFp8x16: core/fp8_simd_internal.h.

// The largest of the 8 unsigned lanes.
OCTET_INLINE uint32_t MaxLane(__m256i v) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  uint32_t result = 0;
  for (const uint32_t x : lanes) result = x > result ? x : result;
  return result;
}

// FloatToBf16x8, FloatToBf16x16: core/bf16_simd_internal.h.

// --- float -> fp8, one lane per 32-bit element (detail::FloatToFp8Bits).

template <class Format>
struct QuantizeConsts {
  __m256i abs_mask, one, round_bias, min_normal, overflow, overflow_code, inf_bits,
      nan_code, sign_byte, mantissa_mask, hidden_bit, shift_base, max_shift, magic_bits;
  __m256 magic;
};

template <class Format>
OCTET_INLINE QuantizeConsts<Format> MakeQuantizeConsts(Fp8Saturation sat) {
  using K = Fp8EncodeConstants<Format>;
  QuantizeConsts<Format> c;
  c.abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  c.one = _mm256_set1_epi32(1);
  c.round_bias = _mm256_set1_epi32(static_cast<int>(K::kRoundBias));
  c.min_normal = _mm256_set1_epi32(static_cast<int>(Format::kMinNormalAbs));
  c.overflow = _mm256_set1_epi32(static_cast<int>(Format::kOverflowAbs));
  c.overflow_code = _mm256_set1_epi32(static_cast<int>(K::OverflowCode(sat)));
  c.inf_bits = _mm256_set1_epi32(0x7F800000);
  c.nan_code = _mm256_set1_epi32(kFp8CanonicalNaN);
  c.sign_byte = _mm256_set1_epi32(0x80);
  c.mantissa_mask = _mm256_set1_epi32(0x007FFFFF);
  c.hidden_bit = _mm256_set1_epi32(0x00800000);
  c.shift_base = _mm256_set1_epi32(static_cast<int>(Format::kSubnormalShiftBase));
  c.max_shift = _mm256_set1_epi32(31);
  c.magic_bits = _mm256_set1_epi32(static_cast<int>(Format::kSubnormalShiftBase << 23));
  c.magic = _mm256_castsi256_ps(c.magic_bits);
  return c;
}

// |x| bits are below 2^31, so the signed compares below order them correctly.
// kFloatRounding: NOTE [avx2 fp8 subnormal rounding].
template <class Format, bool kFloatRounding>
OCTET_INLINE __m256i EncodeFp8x8(const QuantizeConsts<Format>& c, __m256 y) {
  constexpr int kDropped = static_cast<int>(Fp8EncodeConstants<Format>::kDropped);
  const __m256i u = _mm256_castps_si256(y);
  const __m256i a = _mm256_and_si256(u, c.abs_mask);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, kDropped), c.one);
  const __m256i normal = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(a, c.round_bias), lsb), kDropped);
  __m256i subnormal;
  if constexpr (kFloatRounding) {
    // The code is the sum's low bits (MXCSR rounds to nearest even).
    const __m256 sum = _mm256_add_ps(_mm256_castsi256_ps(a), c.magic);
    subnormal = _mm256_sub_epi32(_mm256_castps_si256(sum), c.magic_bits);
  } else {
    // Round the significand shifted right by base - exponent to nearest
    // even. Shifts past 31 (zero, tiny values and float subnormals) are
    // clamped to 31, which rounds them to 0 as the scalar code's early
    // return does: the significand is below 2^24 <= half.
    const __m256i significand =
        _mm256_or_si256(_mm256_and_si256(a, c.mantissa_mask), c.hidden_bit);
    const __m256i shift = _mm256_min_epu32(
        _mm256_sub_epi32(c.shift_base, _mm256_srli_epi32(a, 23)), c.max_shift);
    const __m256i half_minus_one =
        _mm256_sub_epi32(_mm256_sllv_epi32(c.one, _mm256_sub_epi32(shift, c.one)), c.one);
    const __m256i q_lsb = _mm256_and_si256(_mm256_srlv_epi32(significand, shift), c.one);
    subnormal = _mm256_srlv_epi32(
        _mm256_add_epi32(_mm256_add_epi32(significand, half_minus_one), q_lsb), shift);
  }
  __m256i code = _mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(c.min_normal, a));
  code = _mm256_blendv_epi8(code, c.overflow_code, _mm256_cmpgt_epi32(a, c.overflow));
  code = _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(u, 24), c.sign_byte));
  return _mm256_blendv_epi8(code, c.nan_code, _mm256_cmpgt_epi32(a, c.inf_bits));
}

// Eight f32 values: read, or widened from bf16 bits (exact).
OCTET_INLINE __m256 LoadFloatx8(const float* src) { return _mm256_loadu_ps(src); }
OCTET_INLINE __m256 LoadFloatx8(const uint16_t* src) { return Bf16x8ToFloat(src); }

template <class Format, bool kFloatRounding, class Src>
uint32_t QuantizeAvx2With(const Src* src, float scale, Fp8Saturation sat, uint8_t* dst, int64_t n) {
  const QuantizeConsts<Format> c = MakeQuantizeConsts<Format>(sat);
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256i amax = _mm256_setzero_si256();
  ForEachBlock(src, dst, n, [&](const Src* in, uint8_t* out) {
    __m256i codes[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 x = LoadFloatx8(in + 8 * k);
      amax = _mm256_max_epu32(amax, _mm256_and_si256(_mm256_castps_si256(x), c.abs_mask));
      codes[k] = EncodeFp8x8<Format, kFloatRounding>(c, _mm256_mul_ps(x, vscale));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        PackBytes(codes[0], codes[1], codes[2], codes[3]));
  });
  return MaxLane(amax);
}

// NOTE [avx2 fp8 subnormal rounding]: MXCSR's rounding control (bits 13-14)
// at nearest, and the invalid (bit 7), denormal (bit 8) and precision (bit
// 12) exceptions masked.
bool MxcsrAllowsFloatRounding() {
  const unsigned csr = _mm_getcsr();
  return (csr & 0x6000u) == 0 && (csr & 0x1180u) == 0x1180u;
}

}  // namespace

template <class Format, class Src>
uint32_t QuantizeAvx2(const Src* src, float scale, Fp8Saturation sat, uint8_t* dst, int64_t n) {
  return MxcsrAllowsFloatRounding() ? QuantizeAvx2With<Format, true>(src, scale, sat, dst, n)
                                    : QuantizeAvx2With<Format, false>(src, scale, sat, dst, n);
}

uint32_t AmaxAvx2(const float* src, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_max_epu32(
          acc[k], _mm256_and_si256(
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8 * k)),
                      abs_mask));
    }
  }
  uint32_t result = MaxLane(_mm256_max_epu32(_mm256_max_epu32(acc[0], acc[1]),
                                             _mm256_max_epu32(acc[2], acc[3])));
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof bits);
    bits &= 0x7FFFFFFFu;
    result = bits > result ? bits : result;
  }
  return result;
}

void DequantizeAvx2(const uint8_t* src, Fp8Kind kind, float scale_inv,
                                      float* dst, int64_t n) {
  const __m256 vscale = _mm256_set1_ps(scale_inv);
  ForEachBlock(src, dst, n, [&](const uint8_t* in, float* out) {
    for (int k = 0; k < 2; ++k) {
      const Decoded16 d =
          DecodeFp8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 16 * k)), kind);
      _mm256_storeu_ps(out + 16 * k, _mm256_mul_ps(d.lo, vscale));
      _mm256_storeu_ps(out + 16 * k + 8, _mm256_mul_ps(d.hi, vscale));
    }
  });
}

// Every fp8 value is a bf16 value, so the decoded floats' top halves are
// exact; NaN codes of either sign give the canonical 0x7FFF.
void Fp8ToBf16Avx2(const uint8_t* src, Fp8Kind kind, uint16_t* dst, int64_t n) {
  const __m256i canonical_nan = _mm256_set1_epi16(static_cast<short>(kBf16CanonicalNaN));
  ForEachBlock(src, dst, n, [&](const uint8_t* in, uint16_t* out) {
    for (int k = 0; k < 2; ++k) {
      const Decoded16 d =
          DecodeFp8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 16 * k)), kind);
      const __m256i words = PackWords(_mm256_srli_epi32(_mm256_castps_si256(d.lo), 16),
                                      _mm256_srli_epi32(_mm256_castps_si256(d.hi), 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * k),
                          _mm256_blendv_epi8(words, canonical_nan, d.nan));
    }
  });
}

void FloatToBf16Avx2(const float* src, uint16_t* dst, int64_t n) {
  ForEachBlock(src, dst, n, [&](const float* in, uint16_t* out) {
    for (int k = 0; k < 2; ++k) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * k), FloatToBf16x16(in + 16 * k));
    }
  });
}

void Bf16ToFloatAvx2(const uint16_t* src, float* dst, int64_t n) {
  ForEachBlock(src, dst, n, [&](const uint16_t* in, float* out) {
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, Bf16x8ToFloat(in + 8 * k));
  });
}

// vcvtps2ph with an immediate rounding mode ignores MXCSR; only NaN lanes
// differ from FloatToF16Bits (it keeps the sign and payload).
void FloatToF16Avx2(const float* src, uint16_t* dst, int64_t n) {
  const __m128i canonical_nan = _mm_set1_epi16(static_cast<short>(kF16CanonicalNaN));
  ForEachBlock(src, dst, n, [&](const float* in, uint16_t* out) {
    for (int k = 0; k < 4; ++k) {
      const __m256 x = _mm256_loadu_ps(in + 8 * k);
      const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      const __m128i nan16 =
          _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8 * k),
                       _mm_blendv_epi8(h, canonical_nan, nan16));
    }
  });
}

void F16ToFloatAvx2(const uint16_t* src, float* dst, int64_t n) {
  ForEachBlock(src, dst, n, [&](const uint16_t* in, float* out) {
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(out + 8 * k, _mm256_cvtph_ps(_mm_loadu_si128(
                                        reinterpret_cast<const __m128i*>(in + 8 * k))));
    }
  });
}

template uint32_t QuantizeAvx2<detail::E4M3Format>(const float*, float, Fp8Saturation, uint8_t*, int64_t);
template uint32_t QuantizeAvx2<detail::E5M2Format>(const float*, float, Fp8Saturation, uint8_t*, int64_t);
template uint32_t QuantizeAvx2<detail::E4M3Format>(const uint16_t*, float, Fp8Saturation, uint8_t*, int64_t);
template uint32_t QuantizeAvx2<detail::E5M2Format>(const uint16_t*, float, Fp8Saturation, uint8_t*, int64_t);

}  // namespace octet::convert_internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // OCTET_CONVERT_X86_KERNELS
