// The scalar bf16 and f16 cast rules (core/bfloat16.h, core/float16.h):
// every non-NaN value round-trips, ties round to even, overflow goes to
// infinity, subnormals and NaNs (quieted, canonical or with their payload)
// at their exact bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include <octet/core/bfloat16.h>
#include <octet/core/bit_cast.h>
#include <octet/core/float16.h>

namespace octet {
namespace {

TEST(Bf16Cast, EveryNonNaNValueRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = Bf16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(v)) {
      EXPECT_EQ(FloatToBf16Bits(v), kBf16CanonicalNaN);
    } else {
      ASSERT_EQ(FloatToBf16Bits(v), b);
    }
  }
}

TEST(Bf16Cast, RoundsTiesToEvenAndOverflowsToInf) {
  EXPECT_EQ(FloatToBf16Bits(detail::BitsAsFloat(0x3F808000u)), 0x3F80);  // tie, even down
  EXPECT_EQ(FloatToBf16Bits(detail::BitsAsFloat(0x3F818000u)), 0x3F82);  // tie, even up
  EXPECT_EQ(FloatToBf16Bits(detail::BitsAsFloat(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::quiet_NaN()), 0x7FFF);
  EXPECT_EQ(FloatToBf16Bits(detail::BitsAsFloat(0x7F800001u)), 0x7FFF);  // sNaN -> quiet
  EXPECT_EQ(FloatToBf16Bits(detail::BitsAsFloat(0x00018000u)), 0x0002);  // subnormal tie
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3F80);
  EXPECT_EQ(static_cast<float>(bfloat16::FromBits(0xC000)), -2.0f);
}

TEST(F16Cast, EveryNonNaNValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = F16BitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      EXPECT_EQ(FloatToF16Bits(v), kF16CanonicalNaN);
    } else {
      ASSERT_EQ(FloatToF16Bits(v), h);
    }
  }
}

TEST(F16Cast, RoundsTiesToEvenSubnormalsAndOverflow) {
  EXPECT_EQ(FloatToF16Bits(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToF16Bits(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(FloatToF16Bits(65520.0f), 0x7C00);  // tie goes to even: inf
  EXPECT_EQ(FloatToF16Bits(-1e10f), 0xFC00);
  EXPECT_EQ(FloatToF16Bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToF16Bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to zero
  EXPECT_EQ(FloatToF16Bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToF16Bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: even
  EXPECT_EQ(FloatToF16Bits(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(FloatToF16Bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, even
  EXPECT_EQ(FloatToF16Bits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToF16Bits(std::numeric_limits<float>::signaling_NaN()), 0x7FFF);
  // NaN payload survives decoding, quieted.
  EXPECT_EQ(detail::FloatAsBits(F16BitsToFloat(0xFC01)), 0xFFC02000u);
  EXPECT_EQ(float16(2.0f).bits, 0x4000);
  EXPECT_EQ(static_cast<float>(float16::FromBits(0xBC00)), -1.0f);
}

}  // namespace
}  // namespace octet
