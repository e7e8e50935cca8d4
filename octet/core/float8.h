// FP8 element types and scalar conversions. Header-only; every function is
// OCTET_HOST_DEVICE so CPU and CUDA code share one definition (DESIGN.md §2).
//
// Formats (bit layout sign | exponent | mantissa):
//   float8_e4m3  1|4|3, bias 7, the OCP / NVIDIA "fn" variant: no infinities,
//                NaN is 0x7F / 0xFF, max finite 448 (0x7E), smallest
//                subnormal 2^-9 (0x01), smallest normal 2^-6 (0x08).
//   float8_e5m2  1|5|2, bias 15, IEEE-like: +-inf is 0x7C / 0xFC, NaN is
//                0x7D..0x7F / 0xFD..0xFF, max finite 57344 (0x7B), smallest
//                subnormal 2^-16 (0x01), smallest normal 2^-14 (0x04).
//
// NOTE [fp8 conversion semantics]: float -> fp8 is bit-exact with the host
// path of cuda_fp8.h's __nv_cvt_float_to_fp8(x, sat, __NV_E4M3 / __NV_E5M2):
//   - round to nearest, ties to even, including in the subnormal range;
//     |x| <= half the smallest subnormal becomes a signed zero (-0 -> 0x80);
//   - NaN input gives the positive NaN 0x7F in both formats (the sign of a
//     NaN is dropped);
//   - "overflow" is |x| > 464 for e4m3 (464 itself ties to even, down to 448)
//     and |x| >= 61440 for e5m2 (61440 ties to even, which is inf); this
//     includes +-inf. kSatFinite gives +-max finite (0x7E/0xFE, 0x7B/0xFB);
//     kNoSat gives NaN with the input's sign for e4m3 (0x7F/0xFF) and +-inf
//     for e5m2 (0x7C/0xFC).
// fp8 -> float is exact; every NaN code decodes to the canonical float NaN
// 0x7FFFFFFF (cuda_fp8.h's fp8 -> half likewise drops the NaN's sign and
// payload), so decode-then-encode of a NaN gives 0x7F.
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

#include <octet/core/bit_cast.h>

namespace octet {

// What a float -> fp8 conversion does with values past the largest finite
// value (see NOTE [fp8 conversion semantics]).
enum class Fp8Saturation {
  kSatFinite,  // clamp to +-max finite (also +-inf); the default for casts
  kNoSat,      // e4m3: NaN; e5m2: +-inf
};

// Canonical NaN codes produced by the encoders.
inline constexpr uint8_t kFp8CanonicalNaN = 0x7F;
// Float bits of the NaN the decoders return.
inline constexpr uint32_t kFp8DecodedNaNBits = 0x7FFFFFFFu;

namespace detail {

// Constants of one fp8 format, as static scalars (usable in device code
// without --expt-relaxed-constexpr), expressed on float32 bit patterns.
struct E4M3Format {
  static constexpr uint32_t kMantissaBits = 3;
  static constexpr uint32_t kRebias = 120;  // 127 - 7
  // |x| bits above which the value overflows: 464 = 448 + half an ulp (464
  // itself ties to even, down to 448).
  static constexpr uint32_t kOverflowAbs = 0x43E80000u;
  static constexpr uint32_t kMinNormalAbs = 0x3C800000u;        // 2^-6
  static constexpr uint32_t kHalfMinSubnormalAbs = 0x3A800000u;  // 2^-10
  // A subnormal code is significand * 2^(E - 150) / 2^-9 for the float's
  // biased exponent E and 24-bit significand: significand >> (141 - E).
  static constexpr uint32_t kSubnormalShiftBase = 141;
  static constexpr uint8_t kMaxFiniteCode = 0x7E;
  static constexpr uint8_t kOverflowNoSatCode = 0x7F;  // NaN
};

struct E5M2Format {
  static constexpr uint32_t kMantissaBits = 2;
  static constexpr uint32_t kRebias = 112;  // 127 - 15
  // Overflow when |x| >= 61440 = 57344 + half an ulp (the tie goes to the
  // even code 0x7C, inf).
  static constexpr uint32_t kOverflowAbs = 0x476FFFFFu;
  static constexpr uint32_t kMinNormalAbs = 0x38800000u;        // 2^-14
  static constexpr uint32_t kHalfMinSubnormalAbs = 0x37000000u;  // 2^-17
  static constexpr uint32_t kSubnormalShiftBase = 134;  // see E4M3Format
  static constexpr uint8_t kMaxFiniteCode = 0x7B;
  static constexpr uint8_t kOverflowNoSatCode = 0x7C;  // inf
};

template <class Format>
OCTET_HOST_DEVICE OCTET_INLINE uint8_t FloatToFp8Bits(float x,
                                                      Fp8Saturation sat) {
  const uint32_t u = FloatAsBits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kFp8CanonicalNaN;
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (a > Format::kOverflowAbs) {
    return sign | (sat == Fp8Saturation::kSatFinite
                       ? Format::kMaxFiniteCode
                       : Format::kOverflowNoSatCode);
  }
  constexpr uint32_t kDropped = 23u - Format::kMantissaBits;
  if (a >= Format::kMinNormalAbs) {
    // Round the dropped mantissa bits to nearest even; a carry bumps the
    // exponent. Below the overflow threshold the result stays finite.
    const uint32_t rounded =
        a + ((1u << (kDropped - 1u)) - 1u) + ((a >> kDropped) & 1u);
    return sign | static_cast<uint8_t>((rounded >> kDropped) -
                                       (Format::kRebias << Format::kMantissaBits));
  }
  if (a <= Format::kHalfMinSubnormalAbs) return sign;  // ties to even zero
  const uint32_t significand = (a & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = Format::kSubnormalShiftBase - (a >> 23);  // <= 24
  uint32_t q = significand >> shift;
  const uint32_t rem = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may reach min normal
  return sign | static_cast<uint8_t>(q);
}

}  // namespace detail

// float -> e4m3 bits. Never fails; see NOTE [fp8 conversion semantics].
OCTET_HOST_DEVICE OCTET_INLINE uint8_t FloatToE4M3Bits(float x,
                                                       Fp8Saturation sat) {
  return detail::FloatToFp8Bits<detail::E4M3Format>(x, sat);
}

// float -> e5m2 bits. Never fails; see NOTE [fp8 conversion semantics].
OCTET_HOST_DEVICE OCTET_INLINE uint8_t FloatToE5M2Bits(float x,
                                                       Fp8Saturation sat) {
  return detail::FloatToFp8Bits<detail::E5M2Format>(x, sat);
}

// e4m3 bits -> float, exact. 0x7F / 0xFF decode to the NaN kFp8DecodedNaNBits.
OCTET_HOST_DEVICE OCTET_INLINE float E4M3BitsToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exponent = (b >> 3) & 0xFu;
  const uint32_t mantissa = b & 0x7u;
  if ((b & 0x7Fu) == 0x7Fu) return detail::BitsAsFloat(kFp8DecodedNaNBits);
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-9, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    return detail::BitsAsFloat(sign | detail::FloatAsBits(magnitude));
  }
  return detail::BitsAsFloat(sign | ((exponent + 120u) << 23) |
                             (mantissa << 20));
}

// e5m2 bits -> float, exact. Infinities keep their sign; NaN codes decode to
// the NaN kFp8DecodedNaNBits.
OCTET_HOST_DEVICE OCTET_INLINE float E5M2BitsToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exponent = (b >> 2) & 0x1Fu;
  const uint32_t mantissa = b & 0x3u;
  if (exponent == 0x1Fu) {
    if (mantissa != 0) return detail::BitsAsFloat(kFp8DecodedNaNBits);
    return detail::BitsAsFloat(sign | 0x7F800000u);
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-16, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 1.52587890625e-5f;
    return detail::BitsAsFloat(sign | detail::FloatAsBits(magnitude));
  }
  return detail::BitsAsFloat(sign | ((exponent + 112u) << 23) |
                             (mantissa << 21));
}

// An e4m3 element. Trivially default constructible (the default constructor
// leaves `bits` uninitialised, like float) so arrays of it are plain memory.
struct float8_e4m3 {
  uint8_t bits;

  float8_e4m3() = default;
  // Saturating (kSatFinite), round to nearest even.
  OCTET_HOST_DEVICE explicit float8_e4m3(float x)
      : bits(FloatToE4M3Bits(x, Fp8Saturation::kSatFinite)) {}

  OCTET_HOST_DEVICE static constexpr float8_e4m3 FromBits(uint8_t b) {
    float8_e4m3 r{};
    r.bits = b;
    return r;
  }

  OCTET_HOST_DEVICE operator float() const { return E4M3BitsToFloat(bits); }

  static constexpr float kMaxFinite = 448.0f;

  // Equality compares bits: NaN == NaN with the same bits, +0 != -0. Compare
  // float(a) == float(b) for IEEE semantics.
  OCTET_HOST_DEVICE friend constexpr bool operator==(float8_e4m3 a, float8_e4m3 b) {
    return a.bits == b.bits;
  }
  OCTET_HOST_DEVICE friend constexpr bool operator!=(float8_e4m3 a, float8_e4m3 b) {
    return a.bits != b.bits;
  }
};

// An e5m2 element. Same conventions as float8_e4m3.
struct float8_e5m2 {
  uint8_t bits;

  float8_e5m2() = default;
  // Saturating (kSatFinite, so +-inf becomes +-57344), round to nearest even.
  OCTET_HOST_DEVICE explicit float8_e5m2(float x)
      : bits(FloatToE5M2Bits(x, Fp8Saturation::kSatFinite)) {}

  OCTET_HOST_DEVICE static constexpr float8_e5m2 FromBits(uint8_t b) {
    float8_e5m2 r{};
    r.bits = b;
    return r;
  }

  OCTET_HOST_DEVICE operator float() const { return E5M2BitsToFloat(bits); }

  static constexpr float kMaxFinite = 57344.0f;

  OCTET_HOST_DEVICE friend constexpr bool operator==(float8_e5m2 a, float8_e5m2 b) {
    return a.bits == b.bits;
  }
  OCTET_HOST_DEVICE friend constexpr bool operator!=(float8_e5m2 a, float8_e5m2 b) {
    return a.bits != b.bits;
  }
};

static_assert(sizeof(float8_e4m3) == 1, "float8_e4m3 must be 1 byte");
static_assert(sizeof(float8_e5m2) == 1, "float8_e5m2 must be 1 byte");

}  // namespace octet
