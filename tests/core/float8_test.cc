// Tests for core/float8.h against an independent closed-form decode computed
// here in double with ldexp, plus the rounding, saturation and special-value
// rules of NOTE [fp8 conversion semantics]. The bit-exact comparison with
// cuda_fp8.h lives in float8_cuda_oracle_test.cc and float8_golden_test.cc.
#include <octet/core/float8.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include <octet/core/bit_cast.h>

namespace octet {
namespace {

enum class Fmt { kE4M3, kE5M2 };

std::string FmtName(Fmt f) { return f == Fmt::kE4M3 ? "e4m3" : "e5m2"; }
void PrintTo(Fmt f, std::ostream* os) { *os << FmtName(f); }

uint8_t Encode(Fmt f, float x, Fp8Saturation sat) {
  return f == Fmt::kE4M3 ? FloatToE4M3Bits(x, sat) : FloatToE5M2Bits(x, sat);
}

float Decode(Fmt f, uint8_t code) {
  return f == Fmt::kE4M3 ? E4M3BitsToFloat(code) : E5M2BitsToFloat(code);
}

// Independent reference decode: value = (-1)^s * 2^(e - bias) * (1 + m/2^M)
// for normal codes, (-1)^s * 2^(1 - bias) * (m / 2^M) for subnormals.
double ReferenceDecode(Fmt f, uint8_t code) {
  const int mbits = f == Fmt::kE4M3 ? 3 : 2;
  const int ebits = f == Fmt::kE4M3 ? 4 : 5;
  const int bias = f == Fmt::kE4M3 ? 7 : 15;
  const bool negative = (code & 0x80) != 0;
  const int e = (code >> mbits) & ((1 << ebits) - 1);
  const int m = code & ((1 << mbits) - 1);
  const double sign = negative ? -1.0 : 1.0;
  if (f == Fmt::kE4M3 && (code & 0x7F) == 0x7F) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (f == Fmt::kE5M2 && e == 31) {
    return m == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mbits),
                           e - bias);
}

bool IsNaNCode(Fmt f, uint8_t code) {
  const uint8_t a = code & 0x7F;
  return f == Fmt::kE4M3 ? a == 0x7F : a > 0x7C;
}

// Largest finite positive code.
uint8_t MaxCode(Fmt f) { return f == Fmt::kE4M3 ? 0x7E : 0x7B; }

class Fp8FormatTest : public ::testing::TestWithParam<Fmt> {};

INSTANTIATE_TEST_SUITE_P(BothFormats, Fp8FormatTest,
                         ::testing::Values(Fmt::kE4M3, Fmt::kE5M2),
                         [](const auto& info) { return FmtName(info.param); });

TEST_P(Fp8FormatTest, EveryCodeDecodesToClosedFormValue) {
  const Fmt f = GetParam();
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const double want = ReferenceDecode(f, code);
    const float got = Decode(f, code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << c;
      EXPECT_EQ(detail::FloatAsBits(got), kFp8DecodedNaNBits) << "code 0x" << std::hex << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code 0x" << std::hex << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code 0x" << std::hex << c;
  }
}

TEST_P(Fp8FormatTest, NaNCodesAreExactlyTheDocumentedOnes) {
  const Fmt f = GetParam();
  int nan_codes = 0;
  for (int c = 0; c < 256; ++c) {
    const bool is_nan = std::isnan(Decode(f, static_cast<uint8_t>(c)));
    EXPECT_EQ(is_nan, IsNaNCode(f, static_cast<uint8_t>(c))) << "code " << c;
    nan_codes += is_nan ? 1 : 0;
  }
  EXPECT_EQ(nan_codes, f == Fmt::kE4M3 ? 2 : 6);
}

TEST_P(Fp8FormatTest, EveryFiniteCodeRoundTripsInBothModes) {
  const Fmt f = GetParam();
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float value = Decode(f, code);
    if (!std::isfinite(value)) continue;
    EXPECT_EQ(Encode(f, value, Fp8Saturation::kSatFinite), code)
        << "code 0x" << std::hex << c;
    EXPECT_EQ(Encode(f, value, Fp8Saturation::kNoSat), code)
        << "code 0x" << std::hex << c;
  }
}

TEST_P(Fp8FormatTest, TiesBetweenNeighbouringCodesRoundToEven) {
  const Fmt f = GetParam();
  for (const float sign : {1.0f, -1.0f}) {
    for (int c = 0; c < MaxCode(f); ++c) {
      const float lo = sign * Decode(f, static_cast<uint8_t>(c));
      const float hi = sign * Decode(f, static_cast<uint8_t>(c + 1));
      // Both neighbours have at most 4 significant bits, so the midpoint is
      // exact in float.
      const float mid = (lo + hi) / 2;
      ASSERT_EQ(static_cast<double>(mid),
                (static_cast<double>(lo) + static_cast<double>(hi)) / 2);
      const uint8_t sign_bit = sign < 0 ? 0x80 : 0x00;
      const uint8_t even = static_cast<uint8_t>((c % 2 == 0 ? c : c + 1) | sign_bit);
      for (const auto sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
        EXPECT_EQ(Encode(f, mid, sat), even) << "tie between codes " << c
                                             << " and " << c + 1;
        EXPECT_EQ(Encode(f, std::nextafter(mid, 0.0f), sat), c | sign_bit)
            << "just inside the tie between " << c << " and " << c + 1;
        EXPECT_EQ(Encode(f, std::nextafter(mid, 2 * hi), sat),
                  (c + 1) | sign_bit)
            << "just outside the tie between " << c << " and " << c + 1;
      }
    }
  }
}

TEST_P(Fp8FormatTest, NaNInputGivesPositiveCanonicalNaNInBothModes) {
  const Fmt f = GetParam();
  const float nans[] = {
      std::numeric_limits<float>::quiet_NaN(),
      -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::signaling_NaN(),
      -std::numeric_limits<float>::signaling_NaN(),
  };
  for (const float x : nans) {
    EXPECT_EQ(Encode(f, x, Fp8Saturation::kSatFinite), 0x7F);
    EXPECT_EQ(Encode(f, x, Fp8Saturation::kNoSat), 0x7F);
  }
}

TEST_P(Fp8FormatTest, NegativeZeroKeepsItsSign) {
  const Fmt f = GetParam();
  EXPECT_EQ(Encode(f, -0.0f, Fp8Saturation::kSatFinite), 0x80);
  EXPECT_EQ(Encode(f, 0.0f, Fp8Saturation::kSatFinite), 0x00);
  EXPECT_TRUE(std::signbit(Decode(f, 0x80)));
  EXPECT_EQ(Decode(f, 0x80), 0.0f);
  // Underflow to zero keeps the sign as well.
  EXPECT_EQ(Encode(f, -1e-30f, Fp8Saturation::kNoSat), 0x80);
  EXPECT_EQ(Encode(f, -std::numeric_limits<float>::denorm_min(),
                   Fp8Saturation::kNoSat),
            0x80);
}

TEST_P(Fp8FormatTest, SubnormalsRoundToNearestEven) {
  const Fmt f = GetParam();
  const int min_exp = f == Fmt::kE4M3 ? -9 : -16;  // smallest subnormal
  const float tiny = std::ldexp(1.0f, min_exp);
  const auto sat = Fp8Saturation::kSatFinite;
  EXPECT_EQ(Encode(f, tiny, sat), 0x01);
  EXPECT_EQ(Encode(f, -tiny, sat), 0x81);
  // Half the smallest subnormal ties to even: zero.
  EXPECT_EQ(Encode(f, tiny / 2, sat), 0x00);
  EXPECT_EQ(Encode(f, std::nextafter(tiny / 2, 1.0f), sat), 0x01);
  // 1.5 * tiny ties between codes 1 and 2: code 2.
  EXPECT_EQ(Encode(f, 1.5f * tiny, sat), 0x02);
  // 2.5 * tiny ties between codes 2 and 3: code 2.
  EXPECT_EQ(Encode(f, 2.5f * tiny, sat), 0x02);
  // Largest subnormal and the step into the normal range.
  const uint8_t min_normal_code = f == Fmt::kE4M3 ? 0x08 : 0x04;
  const float min_normal = std::ldexp(1.0f, f == Fmt::kE4M3 ? -6 : -14);
  EXPECT_EQ(Encode(f, min_normal, sat), min_normal_code);
  EXPECT_EQ(Encode(f, min_normal - tiny, sat), min_normal_code - 1);
  EXPECT_EQ(Encode(f, std::nextafter(min_normal, 0.0f), sat), min_normal_code);
  // Float subnormal inputs are far below fp8's range.
  EXPECT_EQ(Encode(f, std::numeric_limits<float>::denorm_min(), sat), 0x00);
}

TEST(Fp8Cast, SaturatesAbove448ToMaxFinite) {
  const auto sat = Fp8Saturation::kSatFinite;
  for (const float x : {448.0f, 449.0f, 463.0f, 464.0f, std::nextafter(464.0f, 1e9f),
                        480.0f, 1e6f, std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(FloatToE4M3Bits(x, sat), 0x7E) << x;
    EXPECT_EQ(FloatToE4M3Bits(-x, sat), 0xFE) << -x;
  }
}

TEST(Fp8Cast, E4M3NoSatOverflowIsNaNWithInputSign) {
  const auto nosat = Fp8Saturation::kNoSat;
  // 464 is the tie between 448 and the would-be 480: it rounds to even, 448.
  EXPECT_EQ(FloatToE4M3Bits(464.0f, nosat), 0x7E);
  EXPECT_EQ(FloatToE4M3Bits(-464.0f, nosat), 0xFE);
  for (const float x : {std::nextafter(464.0f, 1e9f), 480.0f, 1e6f,
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(FloatToE4M3Bits(x, nosat), 0x7F) << x;
    EXPECT_EQ(FloatToE4M3Bits(-x, nosat), 0xFF) << -x;
  }
}

TEST(Fp8Cast, E5M2SaturatesAbove57344ToMaxFinite) {
  const auto sat = Fp8Saturation::kSatFinite;
  for (const float x : {57344.0f, 61439.0f, 61440.0f, 65536.0f, 1e9f,
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(FloatToE5M2Bits(x, sat), 0x7B) << x;
    EXPECT_EQ(FloatToE5M2Bits(-x, sat), 0xFB) << -x;
  }
}

TEST(Fp8Cast, E5M2NoSatOverflowIsInfinity) {
  const auto nosat = Fp8Saturation::kNoSat;
  // Just below the tie at 61440 rounds down; the tie itself rounds to the
  // even code 0x7C, which is inf.
  EXPECT_EQ(FloatToE5M2Bits(std::nextafter(61440.0f, 0.0f), nosat), 0x7B);
  for (const float x : {61440.0f, 65536.0f, 1e9f,
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(FloatToE5M2Bits(x, nosat), 0x7C) << x;
    EXPECT_EQ(FloatToE5M2Bits(-x, nosat), 0xFC) << -x;
  }
}

TEST(Fp8Cast, E5M2InfinityDecodesWithSign) {
  EXPECT_EQ(E5M2BitsToFloat(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_EQ(E5M2BitsToFloat(0xFC), -std::numeric_limits<float>::infinity());
}

TEST(Fp8Cast, KnownValues) {
  const auto sat = Fp8Saturation::kSatFinite;
  EXPECT_EQ(FloatToE4M3Bits(1.0f, sat), 0x38);
  EXPECT_EQ(FloatToE4M3Bits(-2.0f, sat), 0xC0);
  EXPECT_EQ(FloatToE4M3Bits(448.0f, sat), 0x7E);
  EXPECT_EQ(FloatToE5M2Bits(1.0f, sat), 0x3C);
  EXPECT_EQ(FloatToE5M2Bits(57344.0f, sat), 0x7B);
  EXPECT_EQ(E4M3BitsToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E5M2BitsToFloat(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(E4M3BitsToFloat(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(E5M2BitsToFloat(0x04), std::ldexp(1.0f, -14));
}

TEST(Fp8Type, ConstructorSaturatesAndRoundsToNearestEven) {
  EXPECT_EQ(float8_e4m3(1000.0f).bits, 0x7E);
  EXPECT_EQ(float8_e4m3(-std::numeric_limits<float>::infinity()).bits, 0xFE);
  EXPECT_EQ(float8_e5m2(std::numeric_limits<float>::infinity()).bits, 0x7B);
  EXPECT_EQ(float8_e4m3(1.0625f).bits, 0x38);  // tie between 1 and 1.125
  EXPECT_EQ(float8_e4m3(1.1875f).bits, 0x3A);  // tie between 1.125 and 1.25
  EXPECT_EQ(float8_e5m2(1.125f).bits, 0x3C);   // tie between 1 and 1.25
}

TEST(Fp8Type, ConvertsToFloatAndComparesBits) {
  constexpr float8_e4m3 one = float8_e4m3::FromBits(0x38);
  static_assert(one.bits == 0x38);
  EXPECT_EQ(static_cast<float>(one), 1.0f);
  EXPECT_EQ(static_cast<float>(float8_e5m2::FromBits(0xFC)),
            -std::numeric_limits<float>::infinity());
  EXPECT_EQ(float8_e4m3::FromBits(0x7F), float8_e4m3::FromBits(0x7F));
  EXPECT_NE(float8_e4m3::FromBits(0x00), float8_e4m3::FromBits(0x80));
  EXPECT_EQ(float8_e4m3(2.0f), float8_e4m3::FromBits(0x40));
  static_assert(float8_e4m3::kMaxFinite == 448.0f);
  static_assert(float8_e5m2::kMaxFinite == 57344.0f);
  EXPECT_EQ(static_cast<float>(float8_e4m3::FromBits(0x7E)), float8_e4m3::kMaxFinite);
  EXPECT_EQ(static_cast<float>(float8_e5m2::FromBits(0x7B)), float8_e5m2::kMaxFinite);
  float8_e4m3 zero{};
  EXPECT_EQ(zero.bits, 0);
}

}  // namespace
}  // namespace octet
