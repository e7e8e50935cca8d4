// float16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits; max 65504,
// smallest subnormal 2^-24). Header-only; every function is OCTET_HOST_DEVICE
// so CPU and CUDA code share one definition.
//
// Conversion from float rounds to nearest even and is bit-exact with the host
// path of cuda_fp16.h's __float2half / __float2half_rn:
//   - every NaN becomes the canonical quiet NaN 0x7FFF (sign dropped);
//   - values >= 65520 (the midpoint past 65504) become +-inf;
//   - results below 2^-14 are rounded to binary16 subnormals, down to +-0.
// Conversion to float is exact; a NaN keeps its sign and payload and comes out
// quiet (as x86 vcvtph2ps does).
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

#include <octet/core/bit_cast.h>

namespace octet {

// The canonical NaN produced by FloatToF16Bits (same as cuda_fp16.h).
inline constexpr uint16_t kF16CanonicalNaN = 0x7FFF;

// float -> binary16 bits, round to nearest even. See the file comment.
OCTET_HOST_DEVICE OCTET_INLINE uint16_t FloatToF16Bits(float x) {
  const uint32_t u = detail::FloatAsBits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (a > 0x7F800000u) return kF16CanonicalNaN;
  if (a >= 0x47800000u) return sign | 0x7C00u;  // >= 2^16, incl. inf
  if (a >= 0x38800000u) {                         // >= 2^-14: normal result
    // Round the 13 dropped bits to nearest even; a carry bumps the exponent,
    // which also turns [65520, 65536) into inf (0x7C00).
    const uint32_t rounded = a + 0x0FFFu + ((a >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded >> 13) - (112u << 10));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: ties to even zero
  // Subnormal result: value / 2^-24 = significand >> shift, shift in [14, 24].
  const uint32_t significand = (a & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126u - (a >> 23);
  uint32_t q = significand >> shift;
  const uint32_t rem = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

// binary16 bits -> float, exact (NaNs come out quiet, payload kept).
OCTET_HOST_DEVICE OCTET_INLINE float F16BitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) {
    if (mantissa == 0) return detail::BitsAsFloat(sign | 0x7F800000u);
    return detail::BitsAsFloat(sign | 0x7FC00000u | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact (and normal) in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return detail::BitsAsFloat(sign | detail::FloatAsBits(magnitude));
  }
  return detail::BitsAsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// A binary16 element. Trivially default constructible (the default
// constructor leaves `bits` uninitialised, like float).
struct float16 {
  uint16_t bits;

  float16() = default;
  // Rounds to nearest even; overflow gives +-inf (see FloatToF16Bits).
  OCTET_HOST_DEVICE explicit float16(float x) : bits(FloatToF16Bits(x)) {}

  OCTET_HOST_DEVICE static constexpr float16 FromBits(uint16_t b) {
    float16 r{};
    r.bits = b;
    return r;
  }

  OCTET_HOST_DEVICE operator float() const { return F16BitsToFloat(bits); }

  static constexpr float kMaxFinite = 65504.0f;

  // Equality compares bits: NaN == NaN with the same bits, +0 != -0.
  OCTET_HOST_DEVICE friend constexpr bool operator==(float16 a, float16 b) {
    return a.bits == b.bits;
  }
  OCTET_HOST_DEVICE friend constexpr bool operator!=(float16 a, float16 b) {
    return a.bits != b.bits;
  }
};
static_assert(sizeof(float16) == 2, "float16 must be 2 bytes");

}  // namespace octet
