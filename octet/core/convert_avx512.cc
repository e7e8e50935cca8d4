// The AVX-512 row-converter kernels (declared in convert_internal.h; chosen
// at run time by core/convert.cc, NOTE [converter dispatch] in convert.h).
// Each is compiled for its own target ISA with a function attribute, so this
// file builds for any x86-64 baseline.
#include <octet/core/convert_internal.h>

#if OCTET_CONVERT_X86_KERNELS

#include <immintrin.h>

#include <array>
#include <cstdint>

#include <octet/core/bf16_avx512_internal.h>
#include <octet/core/bfloat16.h>
#include <octet/core/bit_cast.h>
#include <octet/core/float16.h>

namespace octet::convert_internal {

// vpternlog immediates are truth tables over (A, B, C) = (0xF0, 0xCC, 0xAA).
constexpr int kTernA = 0xF0, kTernB = 0xCC, kTernC = 0xAA;
// C ? (~A & B) : A -- see NOTE [fp8 byte tables].
constexpr int kTernSignUnlessFlag =
    ((kTernC & ~kTernA & kTernB) | (~kTernC & kTernA)) & 0xFF;
// A | (B & C).
constexpr int kTernOrMasked = (kTernA | (kTernB & kTernC)) & 0xFF;

// vpermb orders that make the in-lane unpacks come out in memory order.
// Fp8ToBf16: unpack{lo,hi}_epi8 of lane L take bytes 16L+0..7 / 16L+8..15 and
// must yield elements 8L+r (first 32 outputs) / 32+8L+r (last 32).
constexpr std::array<uint8_t, 64> MakeBf16Order() {
  std::array<uint8_t, 64> order{};
  for (int lane = 0; lane < 4; ++lane) {
    for (int r = 0; r < 8; ++r) {
      order[16 * lane + r] = static_cast<uint8_t>(8 * lane + r);
      order[16 * lane + 8 + r] = static_cast<uint8_t>(32 + 8 * lane + r);
    }
  }
  return order;
}
// Dequantize: after a further unpack{lo,hi}_epi16 with zero, float q of lane
// L of output vector j comes from byte 16L+4j+q and must be element 16j+4L+q.
constexpr std::array<uint8_t, 64> MakeF32Order() {
  std::array<uint8_t, 64> order{};
  for (int lane = 0; lane < 4; ++lane) {
    for (int j = 0; j < 4; ++j) {
      for (int q = 0; q < 4; ++q) {
        order[16 * lane + 4 * j + q] = static_cast<uint8_t>(16 * j + 4 * lane + q);
      }
    }
  }
  return order;
}
alignas(64) constexpr std::array<uint8_t, 64> kBf16Order = MakeBf16Order();
alignas(64) constexpr std::array<uint8_t, 64> kF32Order = MakeF32Order();

// --- fp8 -> bf16, VBMI: 64 codes per step through 128-entry byte tables.

struct VbmiTables {
  __m512i lo0, lo1, hi0, hi1, sign;
};

OCTET_TARGET_AVX512_VBMI OCTET_INLINE VbmiTables LoadVbmiTables(Fp8Kind kind) {
  const Fp8Tables& t = Tables();
  return {_mm512_load_si512(t.bf16_lo[kind]),
          _mm512_load_si512(t.bf16_lo[kind] + 64),
          _mm512_load_si512(t.bf16_hi_flag[kind]),
          _mm512_load_si512(t.bf16_hi_flag[kind] + 64),
          _mm512_set1_epi8(static_cast<char>(0x80))};
}

// `permuted` holds 64 codes in a kBf16Order / kF32Order arrangement; returns
// the low and high bytes of their bf16 values (vpermi2b ignores index bit 7,
// so both signs hit the same entry).
OCTET_TARGET_AVX512_VBMI OCTET_INLINE void LookupBf16Bytes(
    const VbmiTables& t, __m512i permuted, __m512i* lo, __m512i* hi) {
  *lo = _mm512_permutex2var_epi8(t.lo0, permuted, t.lo1);
  const __m512i hi_flag = _mm512_permutex2var_epi8(t.hi0, permuted, t.hi1);
  *hi = _mm512_ternarylogic_epi32(hi_flag, permuted, t.sign,
                                  kTernSignUnlessFlag);
}

OCTET_TARGET_AVX512_VBMI void Fp8ToBf16Vbmi(const uint8_t* src, Fp8Kind kind,
                                            uint16_t* dst, int64_t n) {
  const VbmiTables t = LoadVbmiTables(kind);
  const __m512i order = _mm512_load_si512(kBf16Order.data());
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i p =
        _mm512_permutexvar_epi8(order, _mm512_loadu_si512(src + i));
    __m512i lo, hi;
    LookupBf16Bytes(t, p, &lo, &hi);
    _mm512_storeu_si512(dst + i, _mm512_unpacklo_epi8(lo, hi));
    _mm512_storeu_si512(dst + i + 32, _mm512_unpackhi_epi8(lo, hi));
  }
  if (i < n) {
    const uint64_t mask = LowBits64(n - i);
    const __m512i p = _mm512_permutexvar_epi8(
        order, _mm512_maskz_loadu_epi8(mask, src + i));
    __m512i lo, hi;
    LookupBf16Bytes(t, p, &lo, &hi);
    _mm512_mask_storeu_epi16(dst + i, static_cast<__mmask32>(mask),
                             _mm512_unpacklo_epi8(lo, hi));
    _mm512_mask_storeu_epi16(dst + i + 32, static_cast<__mmask32>(mask >> 32),
                             _mm512_unpackhi_epi8(lo, hi));
  }
}

// Widens the bytes of a kF32Order-permuted step to four float vectors
// (elements 0-15, 16-31, 32-47, 48-63), each multiplied by `scale_inv`.
OCTET_TARGET_AVX512_VBMI OCTET_INLINE void DequantizeStepVbmi(
    const VbmiTables& t, __m512i permuted, __m512 scale_inv, __m512 out[4]) {
  __m512i lo, hi;
  LookupBf16Bytes(t, permuted, &lo, &hi);
  const __m512i words_a = _mm512_unpacklo_epi8(lo, hi);
  const __m512i words_b = _mm512_unpackhi_epi8(lo, hi);
  const __m512i zero = _mm512_setzero_si512();
  out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, words_a));
  out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, words_a));
  out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, words_b));
  out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, words_b));
  for (int j = 0; j < 4; ++j) out[j] = _mm512_mul_ps(out[j], scale_inv);
}

OCTET_TARGET_AVX512_VBMI void DequantizeVbmi(const uint8_t* src, Fp8Kind kind,
                                             float scale_inv, float* dst,
                                             int64_t n) {
  const VbmiTables t = LoadVbmiTables(kind);
  const __m512i order = _mm512_load_si512(kF32Order.data());
  const __m512 vscale = _mm512_set1_ps(scale_inv);
  int64_t i = 0;
  __m512 out[4];
  for (; i + 64 <= n; i += 64) {
    DequantizeStepVbmi(
        t, _mm512_permutexvar_epi8(order, _mm512_loadu_si512(src + i)), vscale,
        out);
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(dst + i + 16 * j, out[j]);
  }
  if (i < n) {
    const uint64_t mask = LowBits64(n - i);
    DequantizeStepVbmi(t,
                       _mm512_permutexvar_epi8(
                           order, _mm512_maskz_loadu_epi8(mask, src + i)),
                       vscale, out);
    for (int j = 0; j < 4; ++j) {
      _mm512_mask_storeu_ps(dst + i + 16 * j,
                            static_cast<__mmask16>(mask >> (16 * j)), out[j]);
    }
  }
}

// NOTE [fp8 vnni pairs]: two rows of 64 codes converted and interleaved in
// registers, as the BF16 GEMM's VNNI layout pairs K rows. The codes are
// permuted as for DequantizeVbmi, whose unpack_epi16 with zero puts each
// bf16 value in the high half of its element's 32-bit lane in memory order;
// unpacking row 0's words with row 1's instead puts the pair (row 0, row 1)
// in that lane.
OCTET_TARGET_AVX512_VBMI void Fp8ToBf16PairRowsVbmi(const uint8_t* src, int64_t row_stride, int64_t pairs,
                                                    Fp8Kind kind, uint16_t* dst) {
  const VbmiTables t = LoadVbmiTables(kind);
  const __m512i order = _mm512_load_si512(kF32Order.data());
  for (int64_t p = 0; p < pairs; ++p) {
    const uint8_t* r0 = src + 2 * p * row_stride;
    __m512i lo0, hi0, lo1, hi1;
    LookupBf16Bytes(t, _mm512_permutexvar_epi8(order, _mm512_loadu_si512(r0)), &lo0, &hi0);
    LookupBf16Bytes(t, _mm512_permutexvar_epi8(order, _mm512_loadu_si512(r0 + row_stride)), &lo1, &hi1);
    const __m512i a0 = _mm512_unpacklo_epi8(lo0, hi0), b0 = _mm512_unpackhi_epi8(lo0, hi0);
    const __m512i a1 = _mm512_unpacklo_epi8(lo1, hi1), b1 = _mm512_unpackhi_epi8(lo1, hi1);
    uint16_t* o = dst + p * 128;
    _mm512_storeu_si512(o, _mm512_unpacklo_epi16(a0, a1));
    _mm512_storeu_si512(o + 32, _mm512_unpackhi_epi16(a0, a1));
    _mm512_storeu_si512(o + 64, _mm512_unpacklo_epi16(b0, b1));
    _mm512_storeu_si512(o + 96, _mm512_unpackhi_epi16(b0, b1));
  }
}

// --- fp8 -> bf16 without VBMI: 32 codes per step through 16-bit tables.

struct BwTables {
  __m512i t0, t1, t2, t3, bit6, sign;
};

OCTET_TARGET_AVX512 OCTET_INLINE BwTables LoadBwTables(Fp8Kind kind) {
  const uint16_t* t = Tables().bf16_flag[kind];
  return {_mm512_load_si512(t),      _mm512_load_si512(t + 32),
          _mm512_load_si512(t + 64), _mm512_load_si512(t + 96),
          _mm512_set1_epi16(0x40),   _mm512_set1_epi16(static_cast<short>(0x8000))};
}

// codes: 32 zero-extended codes, one per 16-bit lane. vpermi2w indexes 64
// entries, so bit 6 picks between the two table halves.
OCTET_TARGET_AVX512 OCTET_INLINE __m512i LookupBf16Words(const BwTables& t,
                                                         __m512i codes) {
  const __m512i low_half = _mm512_permutex2var_epi16(t.t0, codes, t.t1);
  const __m512i high_half = _mm512_permutex2var_epi16(t.t2, codes, t.t3);
  const __mmask32 upper = _mm512_test_epi16_mask(codes, t.bit6);
  const __m512i flagged = _mm512_mask_blend_epi16(upper, low_half, high_half);
  return _mm512_ternarylogic_epi32(flagged, _mm512_slli_epi16(codes, 8),
                                   t.sign, kTernSignUnlessFlag);
}

OCTET_TARGET_AVX512 void Fp8ToBf16Bw(const uint8_t* src, Fp8Kind kind,
                                     uint16_t* dst, int64_t n) {
  const BwTables t = LoadBwTables(kind);
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 mask = static_cast<__mmask32>(LowBits64(n - i));
    const __m512i codes =
        _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, src + i));
    _mm512_mask_storeu_epi16(dst + i, mask, LookupBf16Words(t, codes));
  }
}

OCTET_TARGET_AVX512 void DequantizeBw(const uint8_t* src, Fp8Kind kind,
                                      float scale_inv, float* dst, int64_t n) {
  const BwTables t = LoadBwTables(kind);
  const __m512 vscale = _mm512_set1_ps(scale_inv);
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 mask = static_cast<__mmask32>(LowBits64(n - i));
    const __m512i words = LookupBf16Words(
        t, _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, src + i)));
    const __m512i f0 = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_castsi512_si256(words)), 16);
    const __m512i f1 = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(words, 1)), 16);
    _mm512_mask_storeu_ps(dst + i, static_cast<__mmask16>(mask),
                          _mm512_mul_ps(_mm512_castsi512_ps(f0), vscale));
    _mm512_mask_storeu_ps(dst + i + 16, static_cast<__mmask16>(mask >> 16),
                          _mm512_mul_ps(_mm512_castsi512_ps(f1), vscale));
  }
}

// --- float -> fp8 with amax.

// 16 floats -> 16 fp8 codes in the low byte of each 32-bit lane, following
// detail::FloatToFp8Bits exactly:
//  - normal range: integer round-to-nearest-even on the float bits;
//  - subnormal range: adding 2^(kSubnormalShiftBase - 127) (whose ulp is the
//    fp8 subnormal step) makes the float adder do the rounding; the code is
//    the low bits of the sum. Embedded rounding pins it to nearest-even
//    whatever MXCSR says;
//  - then overflow, sign and NaN by masks.
template <class Format>
struct QuantizeConsts {
  __m512i abs_mask, one, round_bias, min_normal, overflow, overflow_code,
      inf_bits, nan_code, sign_byte, magic_bits;
  __m512 magic;
};

template <class Format>
OCTET_TARGET_AVX512 OCTET_INLINE QuantizeConsts<Format> MakeQuantizeConsts(
    Fp8Saturation sat) {
  using K = Fp8EncodeConstants<Format>;
  constexpr uint32_t kMagicBits = Format::kSubnormalShiftBase << 23;
  QuantizeConsts<Format> c;
  c.abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  c.one = _mm512_set1_epi32(1);
  c.round_bias = _mm512_set1_epi32(static_cast<int>(K::kRoundBias));
  c.min_normal = _mm512_set1_epi32(static_cast<int>(Format::kMinNormalAbs));
  c.overflow = _mm512_set1_epi32(static_cast<int>(Format::kOverflowAbs));
  c.overflow_code = _mm512_set1_epi32(static_cast<int>(K::OverflowCode(sat)));
  c.inf_bits = _mm512_set1_epi32(0x7F800000);
  c.nan_code = _mm512_set1_epi32(kFp8CanonicalNaN);
  c.sign_byte = _mm512_set1_epi32(0x80);
  c.magic_bits = _mm512_set1_epi32(static_cast<int>(kMagicBits));
  c.magic = _mm512_castsi512_ps(c.magic_bits);
  return c;
}

template <class Format>
OCTET_TARGET_AVX512 OCTET_INLINE __m512i EncodeFp8x16(
    const QuantizeConsts<Format>& c, __m512 y) {
  constexpr uint32_t kDropped = Fp8EncodeConstants<Format>::kDropped;
  const __m512i u = _mm512_castps_si512(y);
  const __m512i a = _mm512_and_si512(u, c.abs_mask);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, kDropped), c.one);
  const __m512i normal = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(a, c.round_bias), lsb), kDropped);
  const __m512 sum = _mm512_add_round_ps(
      _mm512_castsi512_ps(a), c.magic,
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i subnormal = _mm512_sub_epi32(_mm512_castps_si512(sum), c.magic_bits);
  __m512i code = _mm512_mask_blend_epi32(
      _mm512_cmplt_epu32_mask(a, c.min_normal), normal, subnormal);
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(a, c.overflow),
                               c.overflow_code);
  code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(u, 24), c.sign_byte,
                                   kTernOrMasked);
  return _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(a, c.inf_bits),
                               c.nan_code);
}

template <class Format, class Src>
OCTET_TARGET_AVX512 uint32_t QuantizeAvx512(const Src* src, float scale,
                                            Fp8Saturation sat, uint8_t* dst,
                                            int64_t n) {
  const QuantizeConsts<Format> c = MakeQuantizeConsts<Format>(sat);
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512i amax0 = _mm512_setzero_si512();
  __m512i amax1 = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 x0 = LoadFloatx16(src + i);
    const __m512 x1 = LoadFloatx16(src + i + 16);
    amax0 = _mm512_max_epu32(amax0, _mm512_and_si512(_mm512_castps_si512(x0), c.abs_mask));
    amax1 = _mm512_max_epu32(amax1, _mm512_and_si512(_mm512_castps_si512(x1), c.abs_mask));
    _mm512_mask_cvtepi32_storeu_epi8(
        dst + i, 0xFFFF, EncodeFp8x16(c, _mm512_mul_ps(x0, vscale)));
    _mm512_mask_cvtepi32_storeu_epi8(
        dst + i + 16, 0xFFFF, EncodeFp8x16(c, _mm512_mul_ps(x1, vscale)));
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    const __m512 x = MaskLoadFloatx16(mask, src + i);
    amax0 = _mm512_max_epu32(amax0, _mm512_and_si512(_mm512_castps_si512(x), c.abs_mask));
    _mm512_mask_cvtepi32_storeu_epi8(dst + i, mask,
                                     EncodeFp8x16(c, _mm512_mul_ps(x, vscale)));
  }
  return _mm512_reduce_max_epu32(_mm512_max_epu32(amax0, amax1));
}

OCTET_TARGET_AVX512 uint32_t AmaxAvx512(const float* src, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512(), _mm512_setzero_si512()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm512_max_epu32(
          acc[k], _mm512_and_si512(_mm512_loadu_si512(src + i + 16 * k), abs_mask));
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    acc[0] = _mm512_max_epu32(
        acc[0], _mm512_and_si512(_mm512_maskz_loadu_epi32(mask, src + i), abs_mask));
  }
  return _mm512_reduce_max_epu32(_mm512_max_epu32(
      _mm512_max_epu32(acc[0], acc[1]), _mm512_max_epu32(acc[2], acc[3])));
}

// max |x| over bf16 bits, 32 lanes per register: with the sign cleared,
// integer order is float order and NaN is above inf, as for f32 bits; the
// result is returned as f32 bits (exact: shifted up by 16).
OCTET_TARGET_AVX512 uint32_t AmaxBf16Avx512(const uint16_t* src, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi16(0x7FFF);
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512(), _mm512_setzero_si512()};
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm512_max_epu16(
          acc[k], _mm512_and_si512(_mm512_loadu_si512(src + i + 32 * k), abs_mask));
    }
  }
  for (; i < n; i += 32) {
    const __mmask32 mask = static_cast<__mmask32>(LowBits64(n - i));
    acc[0] = _mm512_max_epu16(
        acc[0], _mm512_and_si512(_mm512_maskz_loadu_epi16(mask, src + i), abs_mask));
  }
  const __m512i m = _mm512_max_epu16(_mm512_max_epu16(acc[0], acc[1]), _mm512_max_epu16(acc[2], acc[3]));
  const __m512i wide = _mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(m)),
                                        _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(m, 1)));
  return _mm512_reduce_max_epu32(wide) << 16;
}

// --- bf16 / f16.

OCTET_TARGET_AVX512 void FloatToBf16Avx512(const float* src, uint16_t* dst,
                                           int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    _mm256_mask_storeu_epi16(dst + i, mask,
                             FloatToBf16x16Int(_mm512_maskz_loadu_ps(mask, src + i)));
  }
}

OCTET_TARGET_AVX512_BF16 void FloatToBf16Native(const float* src, uint16_t* dst,
                                                int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i r0 = FloatToBf16x32Native(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16));
    const __m512i r1 = FloatToBf16x32Native(_mm512_loadu_ps(src + i + 32), _mm512_loadu_ps(src + i + 48));
    _mm512_storeu_si512(dst + i, r0);
    _mm512_storeu_si512(dst + i + 32, r1);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    _mm256_mask_storeu_epi16(dst + i, mask,
                             FloatToBf16x16Native(_mm512_maskz_loadu_ps(mask, src + i)));
  }
}

OCTET_TARGET_AVX512 void Bf16ToFloatAvx512(const uint16_t* src, float* dst,
                                           int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    const __m512i words = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, src + i));
    _mm512_mask_storeu_ps(dst + i, mask,
                          _mm512_castsi512_ps(_mm512_slli_epi32(words, 16)));
  }
}

// vcvtps2ph with an immediate rounding mode ignores MXCSR; only NaN lanes
// differ from FloatToF16Bits (it keeps the sign and payload).
OCTET_TARGET_AVX512 void FloatToF16Avx512(const float* src, uint16_t* dst,
                                          int64_t n) {
  const __m256i canonical_nan = _mm256_set1_epi16(static_cast<short>(kF16CanonicalNaN));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    const __m512 x = _mm512_maskz_loadu_ps(mask, src + i);
    __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    h = _mm256_mask_mov_epi16(h, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                              canonical_nan);
    _mm256_mask_storeu_epi16(dst + i, mask, h);
  }
}

OCTET_TARGET_AVX512 void F16ToFloatAvx512(const uint16_t* src, float* dst,
                                          int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    _mm512_mask_storeu_ps(dst + i, mask,
                          _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src + i)));
  }
}

template uint32_t QuantizeAvx512<detail::E4M3Format>(const float*, float, Fp8Saturation, uint8_t*, int64_t);
template uint32_t QuantizeAvx512<detail::E5M2Format>(const float*, float, Fp8Saturation, uint8_t*, int64_t);
template uint32_t QuantizeAvx512<detail::E4M3Format>(const uint16_t*, float, Fp8Saturation, uint8_t*, int64_t);
template uint32_t QuantizeAvx512<detail::E5M2Format>(const uint16_t*, float, Fp8Saturation, uint8_t*, int64_t);

}  // namespace octet::convert_internal

#endif  // OCTET_CONVERT_X86_KERNELS
