// Row converters: scalar loops plus AVX-512 kernels chosen at run time. See
// NOTE [converter dispatch] in convert.h.
#include "core/convert.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/float16.h"
#include "core/float8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OCTET_CONVERT_X86_KERNELS 1
// GCC 12 reports (-Wmaybe-)uninitialized inside its own AVX-512 intrinsics
// (the `__m512i __Y = __Y;` of _mm512_undefined_epi32) once they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#else
#define OCTET_CONVERT_X86_KERNELS 0
#endif

namespace octet {
namespace {

// ---------------------------------------------------------------------------
// Argument checks.

enum Fp8Kind { kE4M3 = 0, kE5M2 = 1 };

Fp8Kind Fp8KindOf(DType dtype, const char* op) {
  switch (dtype) {
    case DType::kFloat8E4M3:
      return kE4M3;
    case DType::kFloat8E5M2:
      return kE5M2;
    default:
      OCTET_FAIL(op, ": expected an fp8 dtype (fp8_e4m3 or fp8_e5m2), got ", dtype);
  }
}

void CheckLength(int64_t n, const char* op) {
  OCTET_CHECK(n >= 0, op, ": negative length ", n);
}

float AmaxFromAbsBits(uint32_t abs_bits) {
  // For non-negative floats, integer order is float order and every NaN is
  // above +inf, so the amax is a uint32 max over |x| bits.
  if (abs_bits > 0x7F800000u) return std::numeric_limits<float>::quiet_NaN();
  return detail::BitsAsFloat(abs_bits);
}

// ---------------------------------------------------------------------------
// Lookup tables, built once from the scalar functions so every path shares
// their definition.

float DecodeFp8(Fp8Kind kind, uint8_t code) {
  return kind == kE4M3 ? E4M3BitsToFloat(code) : E5M2BitsToFloat(code);
}

struct alignas(64) Fp8Tables {
  // Scalar path: full 256-entry tables.
  float f32[2][256];
  uint16_t bf16[2][256];
  // NOTE [fp8 byte tables]: the AVX-512 decoders look up |code| (7 bits) and
  // put the sign back with one vpternlog. A NaN code's entry has its top bit
  // set as a flag; the ternary function out = C ? (~A & B) : A with
  // A = entry, B = input, C = the sign-bit mask copies the input's sign into
  // the sign bit unless the flag is set (then the sign bit is 0), and keeps
  // the entry's other bits. So NaN gives the positive canonical 0x7FFF and
  // every other code keeps its sign (-0 stays -0).
  alignas(64) uint8_t bf16_lo[2][128];       // low byte of bf16(|code|)
  alignas(64) uint8_t bf16_hi_flag[2][128];  // high byte, 0xFF for NaN
  alignas(64) uint16_t bf16_flag[2][128];    // bf16(|code|), 0xFFFF for NaN
};

Fp8Tables BuildFp8Tables() {
  Fp8Tables t;
  for (int kind = 0; kind < 2; ++kind) {
    for (int code = 0; code < 256; ++code) {
      const float value = DecodeFp8(static_cast<Fp8Kind>(kind),
                                    static_cast<uint8_t>(code));
      t.f32[kind][code] = value;
      t.bf16[kind][code] = FloatToBf16Bits(value);
      if (code < 128) {
        const bool is_nan = value != value;
        const uint16_t bf = FloatToBf16Bits(value);
        t.bf16_lo[kind][code] = static_cast<uint8_t>(bf & 0xFF);
        t.bf16_hi_flag[kind][code] =
            is_nan ? 0xFF : static_cast<uint8_t>(bf >> 8);
        t.bf16_flag[kind][code] = is_nan ? 0xFFFF : bf;
      }
    }
  }
  return t;
}

const Fp8Tables& Tables() {
  static const Fp8Tables tables = BuildFp8Tables();
  return tables;
}

// ---------------------------------------------------------------------------
// Which path runs.

constexpr int kIsaAvx512 = 1;
constexpr int kIsaVbmi = 2;
constexpr int kIsaBf16 = 4;

int DetectIsaBits() {
#if OCTET_CONVERT_X86_KERNELS
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) {
    return 0;
  }
  int bits = kIsaAvx512;
  if (__builtin_cpu_supports("avx512vbmi")) bits |= kIsaVbmi;
  if (__builtin_cpu_supports("avx512bf16")) bits |= kIsaBf16;
  return bits;
#else
  return 0;
#endif
}

int DetectedIsaBits() {
  static const int bits = DetectIsaBits();
  return bits;
}

bool DisabledByEnvironment() {
  const char* value = std::getenv("OCTET_DISABLE_AVX512");
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

int DefaultIsaBits() { return DisabledByEnvironment() ? 0 : DetectedIsaBits(); }

std::atomic<int>& ActiveIsaWord() {
  static std::atomic<int> word{DefaultIsaBits()};
  return word;
}

int ActiveIsaBits() { return ActiveIsaWord().load(std::memory_order_relaxed); }

// ---------------------------------------------------------------------------
// Scalar loops (also the reference the AVX-512 kernels are tested against).

template <class Format>
uint32_t QuantizeScalar(const float* src, float scale, Fp8Saturation sat,
                        uint8_t* dst, int64_t n) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t abs_bits = detail::FloatAsBits(src[i]) & 0x7FFFFFFFu;
    amax_bits = abs_bits > amax_bits ? abs_bits : amax_bits;
    dst[i] = detail::FloatToFp8Bits<Format>(src[i] * scale, sat);
  }
  return amax_bits;
}

uint32_t AmaxScalar(const float* src, int64_t n) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t abs_bits = detail::FloatAsBits(src[i]) & 0x7FFFFFFFu;
    amax_bits = abs_bits > amax_bits ? abs_bits : amax_bits;
  }
  return amax_bits;
}

// ---------------------------------------------------------------------------
// AVX-512 kernels.

#if OCTET_CONVERT_X86_KERNELS

#define OCTET_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define OCTET_TARGET_AVX512_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))
#define OCTET_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

// vpternlog immediates are truth tables over (A, B, C) = (0xF0, 0xCC, 0xAA).
constexpr int kTernA = 0xF0, kTernB = 0xCC, kTernC = 0xAA;
// C ? (~A & B) : A -- see NOTE [fp8 byte tables].
constexpr int kTernSignUnlessFlag =
    ((kTernC & ~kTernA & kTernB) | (~kTernC & kTernA)) & 0xFF;
// A | (B & C).
constexpr int kTernOrMasked = (kTernA | (kTernB & kTernC)) & 0xFF;

// Lowest `count` bits set, count in [0, 64].
inline uint64_t LowBits64(int64_t count) {
  return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
}

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
  constexpr uint32_t kDropped = 23u - Format::kMantissaBits;
  constexpr uint32_t kMagicBits = Format::kSubnormalShiftBase << 23;
  QuantizeConsts<Format> c;
  c.abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  c.one = _mm512_set1_epi32(1);
  // (a + half_ulp - 1 + lsb - (rebias << 23)) >> dropped equals the scalar
  // ((a + half_ulp - 1 + lsb) >> dropped) - (rebias << mantissa_bits).
  c.round_bias = _mm512_set1_epi32(static_cast<int>(
      ((1u << (kDropped - 1u)) - 1u) - (Format::kRebias << 23)));
  c.min_normal = _mm512_set1_epi32(static_cast<int>(Format::kMinNormalAbs));
  c.overflow = _mm512_set1_epi32(static_cast<int>(Format::kOverflowAbs));
  c.overflow_code = _mm512_set1_epi32(sat == Fp8Saturation::kSatFinite
                                          ? Format::kMaxFiniteCode
                                          : Format::kOverflowNoSatCode);
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
  constexpr uint32_t kDropped = 23u - Format::kMantissaBits;
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

template <class Format>
OCTET_TARGET_AVX512 uint32_t QuantizeAvx512(const float* src, float scale,
                                            Fp8Saturation sat, uint8_t* dst,
                                            int64_t n) {
  const QuantizeConsts<Format> c = MakeQuantizeConsts<Format>(sat);
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512i amax0 = _mm512_setzero_si512();
  __m512i amax1 = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(src + i);
    const __m512 x1 = _mm512_loadu_ps(src + i + 16);
    amax0 = _mm512_max_epu32(amax0, _mm512_and_si512(_mm512_castps_si512(x0), c.abs_mask));
    amax1 = _mm512_max_epu32(amax1, _mm512_and_si512(_mm512_castps_si512(x1), c.abs_mask));
    _mm512_mask_cvtepi32_storeu_epi8(
        dst + i, 0xFFFF, EncodeFp8x16(c, _mm512_mul_ps(x0, vscale)));
    _mm512_mask_cvtepi32_storeu_epi8(
        dst + i + 16, 0xFFFF, EncodeFp8x16(c, _mm512_mul_ps(x1, vscale)));
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    const __m512 x = _mm512_maskz_loadu_ps(mask, src + i);
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

// --- bf16 / f16.

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

OCTET_TARGET_AVX512 void FloatToBf16Avx512(const float* src, uint16_t* dst,
                                           int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>(LowBits64(n - i));
    _mm256_mask_storeu_epi16(dst + i, mask,
                             FloatToBf16x16Int(_mm512_maskz_loadu_ps(mask, src + i)));
  }
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

OCTET_TARGET_AVX512_BF16 void FloatToBf16Native(const float* src, uint16_t* dst,
                                                int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i r0 = FloatToBf16x16Native(_mm512_loadu_ps(src + i));
    const __m256i r1 = FloatToBf16x16Native(_mm512_loadu_ps(src + i + 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), r0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), r1);
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

#endif  // OCTET_CONVERT_X86_KERNELS

}  // namespace

// ---------------------------------------------------------------------------
// Public entry points.

float QuantizeRow(const float* src, float scale, DType fp8_dtype,
                  Fp8Saturation sat, uint8_t* dst, int64_t n) {
  const Fp8Kind kind = Fp8KindOf(fp8_dtype, "QuantizeRow");
  CheckLength(n, "QuantizeRow");
  uint32_t amax_bits;
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) {
    amax_bits =
        kind == kE4M3
            ? QuantizeAvx512<detail::E4M3Format>(src, scale, sat, dst, n)
            : QuantizeAvx512<detail::E5M2Format>(src, scale, sat, dst, n);
    return AmaxFromAbsBits(amax_bits);
  }
#endif
  amax_bits = kind == kE4M3
                  ? QuantizeScalar<detail::E4M3Format>(src, scale, sat, dst, n)
                  : QuantizeScalar<detail::E5M2Format>(src, scale, sat, dst, n);
  return AmaxFromAbsBits(amax_bits);
}

void DequantizeRow(const uint8_t* src, DType fp8_dtype, float scale_inv,
                   float* dst, int64_t n) {
  const Fp8Kind kind = Fp8KindOf(fp8_dtype, "DequantizeRow");
  CheckLength(n, "DequantizeRow");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    if (isa & kIsaVbmi) {
      DequantizeVbmi(src, kind, scale_inv, dst, n);
    } else {
      DequantizeBw(src, kind, scale_inv, dst, n);
    }
    return;
  }
#endif
  const float* table = Tables().f32[kind];
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]] * scale_inv;
}

void Fp8ToBf16Row(const uint8_t* src, DType fp8_dtype, uint16_t* dst,
                  int64_t n) {
  const Fp8Kind kind = Fp8KindOf(fp8_dtype, "Fp8ToBf16Row");
  CheckLength(n, "Fp8ToBf16Row");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    if (isa & kIsaVbmi) {
      Fp8ToBf16Vbmi(src, kind, dst, n);
    } else {
      Fp8ToBf16Bw(src, kind, dst, n);
    }
    return;
  }
#endif
  const uint16_t* table = Tables().bf16[kind];
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

void FloatToBf16Row(const float* src, uint16_t* dst, int64_t n) {
  CheckLength(n, "FloatToBf16Row");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    if (isa & kIsaBf16) {
      FloatToBf16Native(src, dst, n);
    } else {
      FloatToBf16Avx512(src, dst, n);
    }
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16Bits(src[i]);
}

void Bf16ToFloatRow(const uint16_t* src, float* dst, int64_t n) {
  CheckLength(n, "Bf16ToFloatRow");
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) {
    Bf16ToFloatAvx512(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16BitsToFloat(src[i]);
}

void FloatToF16Row(const float* src, uint16_t* dst, int64_t n) {
  CheckLength(n, "FloatToF16Row");
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) {
    FloatToF16Avx512(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToF16Bits(src[i]);
}

void F16ToFloatRow(const uint16_t* src, float* dst, int64_t n) {
  CheckLength(n, "F16ToFloatRow");
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) {
    F16ToFloatAvx512(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = F16BitsToFloat(src[i]);
}

float AmaxRow(const float* src, int64_t n) {
  CheckLength(n, "AmaxRow");
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) return AmaxFromAbsBits(AmaxAvx512(src, n));
#endif
  return AmaxFromAbsBits(AmaxScalar(src, n));
}

bool CpuHasAvx512Bf16() {
  const int isa = ActiveIsaBits();
  return (isa & kIsaAvx512) && (isa & kIsaBf16);
}

namespace internal {
namespace {

ConverterIsa IsaFromBits(int bits) {
  ConverterIsa isa;
  isa.avx512 = (bits & kIsaAvx512) != 0;
  isa.vbmi = isa.avx512 && (bits & kIsaVbmi) != 0;
  isa.bf16 = isa.avx512 && (bits & kIsaBf16) != 0;
  return isa;
}

}  // namespace

ConverterIsa DetectedConverterIsa() { return IsaFromBits(DetectedIsaBits()); }

ConverterIsa ActiveConverterIsa() { return IsaFromBits(ActiveIsaBits()); }

void SetConverterIsaForTesting(const ConverterIsa& isa) {
  int bits = 0;
  if (isa.avx512) {
    bits = kIsaAvx512 | (isa.vbmi ? kIsaVbmi : 0) | (isa.bf16 ? kIsaBf16 : 0);
  }
  ActiveIsaWord().store(bits & DetectedIsaBits(), std::memory_order_relaxed);
}

void ForceScalarConvertersForTesting(bool force_scalar) {
  ActiveIsaWord().store(force_scalar ? 0 : DefaultIsaBits(),
                        std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace octet
