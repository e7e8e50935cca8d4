// bfloat16: the top 16 bits of an IEEE binary32 (1 sign, 8 exponent, 7
// mantissa bits). Header-only; every function is OCTET_HOST_DEVICE so CPU and
// CUDA code share one definition.
//
// Conversion from float rounds to nearest even and is bit-exact with the host
// path of cuda_bf16.h's __float2bfloat16 / __float2bfloat16_rn:
//   - every NaN becomes the canonical quiet NaN 0x7FFF (sign dropped);
//   - values that round past the largest finite bf16 become +-inf;
//   - float subnormals round to bf16 subnormals (no flush to zero).
// Conversion to float is exact (the 16 bits are shifted into the top half, so
// a NaN keeps its sign and payload).
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

#include <octet/core/bit_cast.h>

namespace octet {

// The canonical NaN produced by FloatToBf16Bits (same as cuda_bf16.h).
inline constexpr uint16_t kBf16CanonicalNaN = 0x7FFF;

// float -> bf16 bits, round to nearest even. See the file comment for NaN,
// overflow and subnormals.
OCTET_HOST_DEVICE OCTET_INLINE uint16_t FloatToBf16Bits(float x) {
  const uint32_t u = detail::FloatAsBits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNaN;
  // Adding 0x7FFF plus the lowest kept bit rounds the dropped 16 bits to
  // nearest, ties to even; a carry correctly bumps the exponent (up to inf).
  const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// bf16 bits -> float, exact.
OCTET_HOST_DEVICE OCTET_INLINE float Bf16BitsToFloat(uint16_t bits) {
  return detail::BitsAsFloat(static_cast<uint32_t>(bits) << 16);
}

// A bf16 element. Trivially default constructible (the default constructor
// leaves `bits` uninitialised, like float) so arrays of it are plain memory.
struct bfloat16 {
  uint16_t bits;

  bfloat16() = default;
  // Rounds to nearest even (see FloatToBf16Bits).
  OCTET_HOST_DEVICE explicit bfloat16(float x) : bits(FloatToBf16Bits(x)) {}

  OCTET_HOST_DEVICE static constexpr bfloat16 FromBits(uint16_t b) {
    bfloat16 r{};
    r.bits = b;
    return r;
  }

  OCTET_HOST_DEVICE operator float() const { return Bf16BitsToFloat(bits); }

  // Largest finite value, (2 - 2^-7) * 2^127.
  static constexpr float kMaxFinite = 3.38953139e38f;

  // Equality compares bits: NaN == NaN with the same bits, +0 != -0. Compare
  // float(a) == float(b) for IEEE semantics.
  OCTET_HOST_DEVICE friend constexpr bool operator==(bfloat16 a, bfloat16 b) {
    return a.bits == b.bits;
  }
  OCTET_HOST_DEVICE friend constexpr bool operator!=(bfloat16 a, bfloat16 b) {
    return a.bits != b.bits;
  }
};
static_assert(sizeof(bfloat16) == 2, "bfloat16 must be 2 bytes");

}  // namespace octet
