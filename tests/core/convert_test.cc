// Tests for core/convert.h: every row converter, on every implementation path
// this CPU has (scalar, AVX2, AVX-512 with and without VBMI / BF16), against the
// scalar element functions of core/float8.h, core/bfloat16.h and
// core/float16.h, on rows of awkward lengths with random data and specials.
// Paths are switched with octet::internal::SetConverterIsaForTesting /
// ForceScalarConvertersForTesting (NOTE [converter dispatch]); a path the CPU
// lacks is skipped. The scalar bf16 / f16 cast rules: half_cast_test.cc.
#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/bit_cast.h>
#include <octet/core/error.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>

#include "tests/scoped_env.h"

namespace octet {
namespace {

using internal::ConverterIsa;

// Padding written around every output row; must survive the call (checks
// that masked tails do not write past n).
constexpr int kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

// ---------------------------------------------------------------------------
// Test data.

// Floats that exercise every branch of the encoders: random bit patterns,
// values in the fp8 ranges, exact fp8 values and the ties between them (and
// their float neighbours), subnormals, overflow, +-0, +-inf and NaNs.
std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  const float specials[] = {
      0.0f, -0.0f, std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      -std::numeric_limits<float>::quiet_NaN(), detail::BitsAsFloat(0x7F800001u),
      detail::BitsAsFloat(0xFFC00123u), std::numeric_limits<float>::max(),
      std::numeric_limits<float>::denorm_min(), detail::BitsAsFloat(0x80000F00u),
      std::numeric_limits<float>::min(), 448.0f, 464.0f, 465.0f, -464.0f,
      57344.0f, 61440.0f, -61440.0f, 65504.0f, 65520.0f,
      std::ldexp(1.0f, -10), std::ldexp(3.0f, -11), std::ldexp(1.0f, -17),
      std::ldexp(1.0f, -25), 1.0625f, -1.0625f, 1.125f};
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    switch (r % 6) {
      case 0:
        out[i] = detail::BitsAsFloat(rng());
        break;
      case 1: {  // |x| in [2^-20, 2^18)
        const uint32_t exponent = 127 - 20 + rng() % 38;
        out[i] = detail::BitsAsFloat((rng() & 0x807FFFFFu) | (exponent << 23));
        break;
      }
      case 2: {  // an exact fp8 value, or a tie, or a tie's neighbour
        const uint8_t code = static_cast<uint8_t>(rng());
        const bool e4m3 = rng() & 1;
        float v = e4m3 ? E4M3BitsToFloat(code) : E5M2BitsToFloat(code);
        if (!std::isfinite(v)) v = 1.0f;
        const float next = e4m3 ? E4M3BitsToFloat(code + 1) : E5M2BitsToFloat(code + 1);
        if (std::isfinite(next) && (code & 0x7F) != 0x7F && rng() % 2) {
          v = (v + next) / 2;
          if (rng() % 2) v = std::nextafter(v, (rng() % 2) ? 0.0f : 1e30f);
        }
        out[i] = v;
        break;
      }
      case 3:  // float subnormal
        out[i] = detail::BitsAsFloat((rng() & 0x807FFFFFu));
        break;
      default:
        out[i] = specials[rng() % (sizeof(specials) / sizeof(specials[0]))];
        break;
    }
  }
  return out;
}

std::vector<uint8_t> RandomBytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  // Make sure the NaN, inf and zero codes show up in short rows too.
  const uint8_t specials[] = {0x7F, 0xFF, 0x7C, 0xFC, 0x7D, 0xFE, 0x00, 0x80};
  for (int64_t i = 0; i < n && i < 8; ++i) out[(i * 7) % n] = specials[i];
  return out;
}

std::vector<uint16_t> RandomHalves(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> out(n);
  for (auto& h : out) h = static_cast<uint16_t>(rng());
  return out;
}

// A buffer of n elements with guard bytes on both sides; the data pointer is
// offset by one element from the allocation's start so rows are unaligned.
template <class T>
class GuardedRow {
 public:
  explicit GuardedRow(int64_t n)
      : n_(n), storage_((n + 1) * sizeof(T) + 2 * kGuard, kGuardByte) {}
  T* data() { return reinterpret_cast<T*>(storage_.data() + kGuard + sizeof(T)); }
  T operator[](int64_t i) const {
    T v;
    std::memcpy(&v, storage_.data() + kGuard + sizeof(T) + i * sizeof(T), sizeof(T));
    return v;
  }
  bool GuardsIntact() const {
    const size_t data_begin = kGuard + sizeof(T);
    const size_t data_end = data_begin + n_ * sizeof(T);
    for (size_t i = 0; i < storage_.size(); ++i) {
      if ((i < data_begin || i >= data_end) && storage_[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  int64_t n_;
  std::vector<uint8_t> storage_;
};

// Reference amax: max |x| in double, NaN if any element is NaN.
float ReferenceAmax(const std::vector<float>& x) {
  double m = 0;
  for (const float v : x) {
    if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
    m = std::max(m, std::fabs(static_cast<double>(v)));
  }
  return static_cast<float>(m);
}

void ExpectSameFloat(float got, float want, const std::string& where) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << where;
  } else {
    EXPECT_EQ(detail::FloatAsBits(got), detail::FloatAsBits(want)) << where << ": got " << got << " want " << want;
  }
}

// ---------------------------------------------------------------------------
// The (path, length) grid.

struct Path {
  const char* name;
  bool scalar;
  ConverterIsa isa;
};

// Names the path in test output instead of dumping its bytes.
void PrintTo(const Path& path, std::ostream* os) { *os << path.name; }

const Path kPaths[] = {
    {"Scalar", true, {}},
    {"Avx2", false, {.avx2 = true}},
    {"Avx512", false, {true, false, false}},
    {"Avx512Vbmi", false, {true, true, false}},
    {"Avx512Bf16", false, {true, false, true}},
    {"Avx512All", false, {true, true, true}},
};

const int64_t kLengths[] = {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000};

// Selects `path` for the duration of a test; skips when the CPU lacks it.
void SelectPathOrSkip(const Path& path) {
  if (path.scalar) {
    internal::ForceScalarConvertersForTesting(true);
    return;
  }
  internal::SetConverterIsaForTesting(path.isa);
  const ConverterIsa active = internal::ActiveConverterIsa();
  if (active.avx512 != path.isa.avx512 || active.vbmi != path.isa.vbmi ||
      active.bf16 != path.isa.bf16 || active.avx2 != path.isa.avx2) {
    GTEST_SKIP() << "this CPU lacks the features of path " << path.name;
  }
}

// The grid is (path, length); the path is the test parameter and each test
// loops over kLengths, which keeps the number of registered tests small.
class RowConverterTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override { SelectPathOrSkip(GetParam()); }
  void TearDown() override { internal::ForceScalarConvertersForTesting(false); }

  // Runs `check` once per row length, with n() and seed() set for it.
  template <class F>
  void ForEachLength(F check) {
    for (const int64_t n : kLengths) {
      n_ = n;
      SCOPED_TRACE("row length " + std::to_string(n));
      check();
      if (HasFatalFailure()) return;
    }
  }
  int64_t n() const { return n_; }
  uint32_t seed() const { return static_cast<uint32_t>(n_ * 7919 + 17); }

 private:
  int64_t n_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Paths, RowConverterTest, ::testing::ValuesIn(kPaths),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(RowConverterTest, QuantizeRowMatchesScalarEncoderAndReturnsAmax) {
  ForEachLength([&] {
    const std::vector<float> src = RandomFloats(n(), seed());
    for (const DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (const auto sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
        for (const float scale : {1.0f, 0.25f, 3.7f, 1e-3f}) {
          GuardedRow<uint8_t> dst(n());
          const float amax = QuantizeRow(src.data(), scale, dtype, sat, dst.data(), n());
          EXPECT_TRUE(dst.GuardsIntact());
          int mismatches = 0;
          for (int64_t i = 0; i < n(); ++i) {
            const float y = src[i] * scale;
            const uint8_t want = dtype == DType::kFloat8E4M3 ? FloatToE4M3Bits(y, sat)
                                                             : FloatToE5M2Bits(y, sat);
            if (dst[i] != want && mismatches++ < 5) {
              ADD_FAILURE() << "i=" << i << " x=0x" << std::hex << detail::FloatAsBits(src[i])
                            << " scale=" << scale << " got 0x" << int{dst[i]}
                            << " want 0x" << int{want};
            }
          }
          EXPECT_EQ(mismatches, 0);
          ExpectSameFloat(amax, ReferenceAmax(src), "amax");
        }
      }
    }
  });
}

// NOTE [avx2 fp8 subnormal rounding]: every FP8 value, the midpoints to its
// neighbours and the floats just either side of them, encoded under each of
// MXCSR's rounding modes, give the codes the scalar encoder gives under
// round-to-nearest (scale 1: the multiply is exact in every mode). The AVX2
// kernel lets the float adder round only under round-to-nearest; in the
// other modes it takes its integer form, which this also checks.
TEST_P(RowConverterTest, QuantizeRowDoesNotDependOnTheRoundingMode) {
  for (const DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    std::vector<float> probes;
    for (int code = 0; code < 0x7F; ++code) {
      const auto value = [&](int c) {
        return dtype == DType::kFloat8E4M3 ? E4M3BitsToFloat(static_cast<uint8_t>(c))
                                           : E5M2BitsToFloat(static_cast<uint8_t>(c));
      };
      const float v = value(code), next = value(code + 1);
      if (!std::isfinite(v) || !std::isfinite(next)) continue;
      const float mid = v + (next - v) / 2;
      for (const float p : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
        probes.push_back(p);
        probes.push_back(-p);
      }
    }
    const int64_t n = static_cast<int64_t>(probes.size());
    std::vector<uint8_t> want(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = dtype == DType::kFloat8E4M3 ? FloatToE4M3Bits(probes[i], Fp8Saturation::kSatFinite)
                                            : FloatToE5M2Bits(probes[i], Fp8Saturation::kSatFinite);
    }
    for (const int mode : {FE_TONEAREST, FE_TOWARDZERO, FE_UPWARD, FE_DOWNWARD}) {
      std::vector<uint8_t> got(n);
      ASSERT_EQ(std::fesetround(mode), 0);
      QuantizeRow(probes.data(), 1.0f, dtype, Fp8Saturation::kSatFinite, got.data(), n);
      std::fesetround(FE_TONEAREST);
      int mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (got[i] != want[i] && mismatches++ < 5) {
          ADD_FAILURE() << Name(dtype) << " rounding mode " << mode << " x=" << probes[i] << " got 0x" << std::hex
                        << int{got[i]} << " want 0x" << int{want[i]};
        }
      }
      EXPECT_EQ(mismatches, 0) << Name(dtype) << " rounding mode " << mode;
    }
  }
}

TEST_P(RowConverterTest, QuantizeRowAmaxIsFiniteMaxWithoutNaN) {
  ForEachLength([&] {
    std::vector<float> src = RandomFloats(n(), seed());
    for (float& v : src) {
      if (std::isnan(v)) v = -3.0f;
    }
    std::vector<uint8_t> dst(n());
    const float amax =
        QuantizeRow(src.data(), 1.0f, DType::kFloat8E4M3, Fp8Saturation::kSatFinite,
                    dst.data(), n());
    ExpectSameFloat(amax, ReferenceAmax(src), "amax");
    EXPECT_FALSE(std::isnan(amax));
    EXPECT_EQ(AmaxRow(src.data(), n()), amax);
  });
}

TEST_P(RowConverterTest, DequantizeRowMatchesDecodeTimesScaleInv) {
  ForEachLength([&] {
    const std::vector<uint8_t> src = RandomBytes(n(), seed());
    for (const DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (const float scale_inv : {1.0f, 0.5f, 3.7f, 1e30f}) {
        GuardedRow<float> dst(n());
        DequantizeRow(src.data(), dtype, scale_inv, dst.data(), n());
        EXPECT_TRUE(dst.GuardsIntact());
        for (int64_t i = 0; i < n(); ++i) {
          const float decoded = dtype == DType::kFloat8E4M3 ? E4M3BitsToFloat(src[i])
                                                            : E5M2BitsToFloat(src[i]);
          ExpectSameFloat(dst[i], decoded * scale_inv,
                          "code 0x" + std::to_string(src[i]));
        }
      }
    }
  });
}

TEST_P(RowConverterTest, Fp8ToBf16RowIsExactAndBitIdenticalToScalar) {
  ForEachLength([&] {
    const std::vector<uint8_t> src = RandomBytes(n(), seed());
    for (const DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      GuardedRow<uint16_t> dst(n());
      Fp8ToBf16Row(src.data(), dtype, dst.data(), n());
      EXPECT_TRUE(dst.GuardsIntact());
      for (int64_t i = 0; i < n(); ++i) {
        const float decoded = dtype == DType::kFloat8E4M3 ? E4M3BitsToFloat(src[i])
                                                          : E5M2BitsToFloat(src[i]);
        ASSERT_EQ(dst[i], FloatToBf16Bits(decoded)) << "code " << int{src[i]};
        if (!std::isnan(decoded)) {
          EXPECT_EQ(detail::FloatAsBits(Bf16BitsToFloat(dst[i])), detail::FloatAsBits(decoded)) << "not exact";
        } else {
          EXPECT_EQ(dst[i], kBf16CanonicalNaN);
        }
      }
    }
  });
}

TEST_P(RowConverterTest, FloatToBf16RowMatchesScalarRounding) {
  ForEachLength([&] {
    const std::vector<float> src = RandomFloats(n(), seed());
    GuardedRow<uint16_t> dst(n());
    FloatToBf16Row(src.data(), dst.data(), n());
    EXPECT_TRUE(dst.GuardsIntact());
    for (int64_t i = 0; i < n(); ++i) {
      ASSERT_EQ(dst[i], FloatToBf16Bits(src[i])) << "x=0x" << std::hex << detail::FloatAsBits(src[i]);
    }
  });
}

// The native bf16 narrowing converts 32 lanes per instruction and redoes a
// whole 32-lane group when one lane is a subnormal or NaN: one special value
// at each position of a row of ordinary ones must change only its own lane.
TEST_P(RowConverterTest, FloatToBf16RowRedoesOnlyTheSpecialLane) {
  constexpr int64_t kN = 133;  // two 64-value steps and a masked tail
  std::vector<float> src(kN);
  for (int64_t i = 0; i < kN; ++i) src[i] = 1.0f + 0.00390625f * static_cast<float>(i) + 1e-5f;
  for (const float special : {std::numeric_limits<float>::denorm_min(), detail::BitsAsFloat(0x807FFFFFu),
                              detail::BitsAsFloat(0x7FC12345u), detail::BitsAsFloat(0xFF800001u)}) {
    for (int64_t at = 0; at < kN; ++at) {
      std::vector<float> row = src;
      row[at] = special;
      GuardedRow<uint16_t> dst(kN);
      FloatToBf16Row(row.data(), dst.data(), kN);
      ASSERT_TRUE(dst.GuardsIntact());
      for (int64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(dst[i], FloatToBf16Bits(row[i])) << "special at " << at << ", lane " << i;
      }
    }
  }
}

// bf16 rows for the bf16-reading quantize and amax: every other value any
// bit pattern, the rest RandomFloats rounded to bf16 (fp8 ties, the fp8
// range's edges); with_nan false turns NaN patterns into infinities.
std::vector<uint16_t> Bf16Source(int64_t n, uint32_t seed, bool with_nan) {
  std::vector<uint16_t> out = RandomHalves(n, seed);
  const std::vector<float> f = RandomFloats(n, seed + 1);
  for (int64_t i = 1; i < n; i += 2) out[i] = FloatToBf16Bits(f[i]);
  if (!with_nan) {
    for (auto& h : out) {
      if ((h & 0x7FFF) > 0x7F80) h = static_cast<uint16_t>(h & 0xFF80);
    }
  }
  return out;
}

// QuantizeBf16Row and AmaxBf16Row are QuantizeRow and AmaxRow of the row
// widened to f32 (Bf16ToFloatRow is exact, checked below).
TEST_P(RowConverterTest, QuantizeBf16RowIsQuantizeRowOfTheWidenedRow) {
  ForEachLength([&] {
    for (const bool with_nan : {false, true}) {
      const std::vector<uint16_t> src = Bf16Source(n(), seed(), with_nan);
      std::vector<float> wide(n());
      for (int64_t i = 0; i < n(); ++i) wide[i] = Bf16BitsToFloat(src[i]);
      for (const DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
        for (const auto sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
          for (const float scale : {1.0f, 0.25f, 3.7f, 1e-3f}) {
            GuardedRow<uint8_t> got(n());
            std::vector<uint8_t> want(n());
            const float amax = QuantizeBf16Row(src.data(), scale, dtype, sat, got.data(), n());
            const float want_amax = QuantizeRow(wide.data(), scale, dtype, sat, want.data(), n());
            EXPECT_TRUE(got.GuardsIntact());
            for (int64_t i = 0; i < n(); ++i) {
              ASSERT_EQ(got[i], want[i]) << "i=" << i << " bf16=0x" << std::hex << src[i] << " scale=" << scale;
            }
            ExpectSameFloat(amax, want_amax, "amax");
            ExpectSameFloat(AmaxBf16Row(src.data(), n()), want_amax, "AmaxBf16Row");
            if (!with_nan && n() > 0) EXPECT_FALSE(std::isnan(amax));
          }
        }
      }
    }
  });
}

TEST_P(RowConverterTest, Bf16ToFloatRowIsExact) {
  ForEachLength([&] {
    const std::vector<uint16_t> src = RandomHalves(n(), seed());
    GuardedRow<float> dst(n());
    Bf16ToFloatRow(src.data(), dst.data(), n());
    EXPECT_TRUE(dst.GuardsIntact());
    for (int64_t i = 0; i < n(); ++i) {
      ASSERT_EQ(detail::FloatAsBits(dst[i]), uint32_t{src[i]} << 16);
    }
  });
}

TEST_P(RowConverterTest, FloatToF16RowMatchesScalarRounding) {
  ForEachLength([&] {
    const std::vector<float> src = RandomFloats(n(), seed());
    GuardedRow<uint16_t> dst(n());
    FloatToF16Row(src.data(), dst.data(), n());
    EXPECT_TRUE(dst.GuardsIntact());
    for (int64_t i = 0; i < n(); ++i) {
      ASSERT_EQ(dst[i], FloatToF16Bits(src[i])) << "x=0x" << std::hex << detail::FloatAsBits(src[i]);
    }
  });
}

TEST_P(RowConverterTest, F16ToFloatRowMatchesScalarDecode) {
  ForEachLength([&] {
    const std::vector<uint16_t> src = RandomHalves(n(), seed());
    GuardedRow<float> dst(n());
    F16ToFloatRow(src.data(), dst.data(), n());
    EXPECT_TRUE(dst.GuardsIntact());
    for (int64_t i = 0; i < n(); ++i) {
      ASSERT_EQ(detail::FloatAsBits(dst[i]), detail::FloatAsBits(F16BitsToFloat(src[i]))) << "h=0x" << std::hex << src[i];
    }
  });
}

TEST_P(RowConverterTest, AmaxRowMatchesReferenceAndPropagatesNaN) {
  ForEachLength([&] {
    std::vector<float> src = RandomFloats(n(), seed());
    ExpectSameFloat(AmaxRow(src.data(), n()), ReferenceAmax(src), "with specials");
    for (float& v : src) {
      if (std::isnan(v)) v = 0.5f;
    }
    const float finite_or_inf = AmaxRow(src.data(), n());
    ExpectSameFloat(finite_or_inf, ReferenceAmax(src), "without NaN");
    if (n() > 0) {
      src[n() - 1] = std::numeric_limits<float>::quiet_NaN();  // NaN in the tail
      EXPECT_TRUE(std::isnan(AmaxRow(src.data(), n())));
      src[n() - 1] = -std::numeric_limits<float>::signaling_NaN();
      EXPECT_TRUE(std::isnan(AmaxRow(src.data(), n())));
    } else {
      EXPECT_EQ(finite_or_inf, 0.0f);
    }
  });
}

// Exhaustive over the small input spaces.
TEST_P(RowConverterTest, EveryFp8CodeEveryHalfAndEveryHalfMidpoint) {
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  std::vector<uint16_t> bf(256);
  Fp8ToBf16Row(codes.data(), DType::kFloat8E4M3, bf.data(), 256);
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(bf[c], FloatToBf16Bits(E4M3BitsToFloat(static_cast<uint8_t>(c)))) << c;
  }
  Fp8ToBf16Row(codes.data(), DType::kFloat8E5M2, bf.data(), 256);
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(bf[c], FloatToBf16Bits(E5M2BitsToFloat(static_cast<uint8_t>(c)))) << c;
  }
  std::vector<uint16_t> halves(65536);
  for (int h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> f(65536);
  F16ToFloatRow(halves.data(), f.data(), 65536);
  for (int h = 0; h < 65536; ++h) {
    ASSERT_EQ(detail::FloatAsBits(f[h]), detail::FloatAsBits(F16BitsToFloat(static_cast<uint16_t>(h)))) << h;
  }
  // Each half's value and the midpoints to its neighbour, through f16 and
  // bf16 encoders.
  std::vector<float> probes;
  for (int h = 0; h < 0x7C00; ++h) {
    const float v = F16BitsToFloat(static_cast<uint16_t>(h));
    const float next = F16BitsToFloat(static_cast<uint16_t>(h + 1));
    for (const float p : {v, (v + next) / 2, std::nextafter((v + next) / 2, 0.0f)}) {
      probes.push_back(p);
      probes.push_back(-p);
    }
  }
  std::vector<uint16_t> out(probes.size());
  FloatToF16Row(probes.data(), out.data(), static_cast<int64_t>(probes.size()));
  for (size_t i = 0; i < probes.size(); ++i) {
    ASSERT_EQ(out[i], FloatToF16Bits(probes[i])) << probes[i];
  }
  FloatToBf16Row(probes.data(), out.data(), static_cast<int64_t>(probes.size()));
  for (size_t i = 0; i < probes.size(); ++i) {
    ASSERT_EQ(out[i], FloatToBf16Bits(probes[i])) << probes[i];
  }
}

// ---------------------------------------------------------------------------
// Dispatch and errors.

TEST(RowConverters, RejectNonFp8DTypeAndNegativeLength) {
  float f[1] = {1.0f};
  uint8_t b[1] = {0};
  uint16_t h[1] = {0};
  EXPECT_THROW(QuantizeRow(f, 1.0f, DType::kFloat32, Fp8Saturation::kSatFinite, b, 1),
               Error);
  EXPECT_THROW(DequantizeRow(b, DType::kBFloat16, 1.0f, f, 1), Error);
  EXPECT_THROW(Fp8ToBf16Row(b, DType::kUInt8, h, 1), Error);
  EXPECT_THROW(AmaxRow(f, -1), Error);
  EXPECT_THROW(FloatToBf16Row(f, h, -5), Error);
  EXPECT_THROW(QuantizeBf16Row(h, 1.0f, DType::kBFloat16, Fp8Saturation::kSatFinite, b, 1), Error);
  EXPECT_THROW(QuantizeBf16Row(h, 1.0f, DType::kFloat8E4M3, Fp8Saturation::kSatFinite, b, -1), Error);
  EXPECT_THROW(AmaxBf16Row(h, -1), Error);
  EXPECT_THROW(QuantizeRow(f, 1.0f, DType::kFloat8E4M3, Fp8Saturation::kSatFinite, b, -1),
               Error);
}

TEST(RowConverters, EnvironmentVariableDisablesAvx512) {
  const testing::ScopedEnv no_bf16_switch("OCTET_DISABLE_AVX512_BF16", nullptr);  // whatever the run's says
  ASSERT_EQ(setenv("OCTET_DISABLE_AVX512", "1", 1), 0);
  internal::ForceScalarConvertersForTesting(false);  // re-reads the variable
  EXPECT_FALSE(internal::ActiveConverterIsa().avx512);
  EXPECT_FALSE(CpuHasAvx512Bf16());
  // It leaves the AVX2 kernels on: it is how an AVX2-only CPU is simulated.
  EXPECT_EQ(internal::ActiveConverterIsa().avx2, internal::DetectedConverterIsa().avx2);
  ASSERT_EQ(setenv("OCTET_DISABLE_AVX512", "0", 1), 0);
  internal::ForceScalarConvertersForTesting(false);
  EXPECT_EQ(internal::ActiveConverterIsa().avx512,
            internal::DetectedConverterIsa().avx512);
  ASSERT_EQ(unsetenv("OCTET_DISABLE_AVX512"), 0);
  internal::ForceScalarConvertersForTesting(false);
  const ConverterIsa detected = internal::DetectedConverterIsa();
  EXPECT_EQ(CpuHasAvx512Bf16(), detected.avx512 && detected.bf16);
}

TEST(RowConverters, ForcingMoreThanTheCpuHasIsClamped) {
  internal::SetConverterIsaForTesting({true, true, true, true});
  const ConverterIsa active = internal::ActiveConverterIsa();
  const ConverterIsa detected = internal::DetectedConverterIsa();
  EXPECT_EQ(active.avx2, detected.avx2);
  EXPECT_EQ(active.avx512, detected.avx512);
  EXPECT_EQ(active.vbmi, detected.vbmi);
  EXPECT_EQ(active.bf16, detected.bf16);
  internal::ForceScalarConvertersForTesting(false);
}

}  // namespace
}  // namespace octet
