// The cast family against the scalar conversions of core/float8.h (the
// bit-exact oracle of DESIGN §2): Quantize's bytes, scale metadata and amax,
// Dequantize, the round trip over all 256 codes, CastTranspose against
// Quantize + transpose, per-tensor scales from amax, straight-through
// gradients, and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

constexpr DType kE4M3 = DType::kFloat8E4M3;
constexpr DType kE5M2 = DType::kFloat8E5M2;

using ::octet::testing::Bytes;

uint8_t EncodeRef(float v, DType fp8, Fp8Saturation sat) {
  return fp8 == kE4M3 ? FloatToE4M3Bits(v, sat) : FloatToE5M2Bits(v, sat);
}
float DecodeRef(uint8_t b, DType fp8) { return fp8 == kE4M3 ? E4M3BitsToFloat(b) : E5M2BitsToFloat(b); }

// x as the f32 values the kernel quantizes (f64 rounds to f32 first).
std::vector<float> AsFloats(const Tensor& x) {
  const std::vector<double> d = x.ToDoubles();
  return std::vector<float>(d.begin(), d.end());
}

// Inputs with every interesting kind of value: in range, subnormal in FP8,
// beyond the format's max, ties.
Tensor Interesting(DType dtype, int64_t n, uint64_t seed) {
  std::vector<double> v = ::octet::testing::RandomValues(n, seed, -600.0, 600.0);
  const double specials[] = {0.0, -0.0, 448.0, 464.0, -465.0, 1e-3, -3e-3, 57344.0, 61440.0, 1e5, 0.3125, 2.0e-7};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i * 7 % v.size()] = specials[i];
  return FromVector(v, {n}, {.dtype = dtype});
}

class QuantizeTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeTest, BytesAmaxAndScalesMatchScalarReference) {
  const DType xdt = GetParam();
  for (DType fp8 : {kE4M3, kE5M2}) {
    for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
      for (float scale : {1.0f, 0.37f, 64.0f}) {
        const Tensor x = Interesting(xdt, 10007, 3);  // not a multiple of any block size
        const Tensor q = Quantize(x, fp8, scale, sat);
        ASSERT_EQ(q.dtype(), fp8);
        ASSERT_EQ(q.shape(), x.shape());
        const std::vector<float> xf = AsFloats(x);
        const std::vector<uint8_t> got = Bytes(q);
        float amax = 0.0f;
        int bad = 0;
        for (size_t i = 0; i < xf.size(); ++i) {
          amax = std::max(amax, std::abs(xf[i]));
          if (got[i] != EncodeRef(xf[i] * scale, fp8, sat) && bad++ < 3)
            ADD_FAILURE() << Name(xdt) << "->" << Name(fp8) << " x=" << xf[i] << " got " << int(got[i]);
        }
        EXPECT_EQ(bad, 0);
        const ScaleMeta* meta = q.scale_meta();
        ASSERT_NE(meta, nullptr);
        EXPECT_EQ(meta->granularity, ScaleGranularity::kPerTensor);
        EXPECT_EQ(meta->scale.Item(), scale);
        EXPECT_EQ(static_cast<float>(meta->scale_inv.Item()), 1.0f / scale);
        EXPECT_EQ(static_cast<float>(meta->amax.Item()), amax);
      }
    }
  }
}

TEST_P(QuantizeTest, DequantizeIsTheScalarDecodeTimesScaleInv) {
  const DType out = GetParam();
  for (DType fp8 : {kE4M3, kE5M2}) {
    const Tensor q = Quantize(Interesting(DType::kFloat32, 3001, 5), fp8, 0.75f);
    const float scale_inv = 1.0f / 0.75f;
    const Tensor y = Dequantize(q, out);
    ASSERT_EQ(y.dtype(), out);
    const std::vector<uint8_t> b = Bytes(q);
    const std::vector<double> got = y.ToDoubles();
    for (size_t i = 0; i < b.size(); ++i) {
      const float f = DecodeRef(b[i], fp8) * scale_inv;  // one f32 multiply, then the output rounding
      double want = f;
      if (out == DType::kBFloat16) want = Bf16BitsToFloat(FloatToBf16Bits(f));
      if (out == DType::kFloat16) want = F16BitsToFloat(FloatToF16Bits(f));
      ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want)))
          << Name(fp8) << "->" << Name(out) << " code " << int(b[i]) << " got " << got[i] << " want " << want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QuantizeTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(Name(i.param)); });

// Every code of `fp8` with the given scale metadata.
Tensor AllCodes(DType fp8, float scale) {
  Tensor t = Empty({256}, {.dtype = fp8});
  uint8_t* p = static_cast<uint8_t*>(t.raw_data());
  for (int i = 0; i < 256; ++i) p[i] = static_cast<uint8_t>(i);
  return t.WithScaleMeta(MakePerTensorScale(scale, 0.0f));
}

TEST(Quantize, RoundTripOverAllCodes) {
  // With a power-of-two scale every dequantized value is exact in f32 and
  // quantizes back to its own code; NaN codes come back as the canonical
  // 0x7F; E5M2 +-inf stay +-inf.
  for (DType fp8 : {kE4M3, kE5M2}) {
    for (float scale : {1.0f, 0.125f, 16.0f}) {
      const Tensor q = AllCodes(fp8, scale);
      const Tensor back = Quantize(Dequantize(q), fp8, scale, Fp8Saturation::kNoSat);
      const std::vector<uint8_t> got = Bytes(back);
      for (int c = 0; c < 256; ++c) {
        const bool nan = std::isnan(DecodeRef(static_cast<uint8_t>(c), fp8));
        EXPECT_EQ(got[c], nan ? kFp8CanonicalNaN : c) << Name(fp8) << " code " << c << " scale " << scale;
      }
      // Dequantize agrees with the scalar decode.
      const std::vector<double> deq = Dequantize(q).ToDoubles();
      for (int c = 0; c < 256; ++c) {
        const double want = DecodeRef(static_cast<uint8_t>(c), fp8) / scale;
        EXPECT_TRUE(deq[c] == want || (std::isnan(deq[c]) && std::isnan(want))) << c;
      }
    }
  }
}

TEST(Quantize, ScaleFromAmaxMapsAmaxToFormatMax) {
  for (DType fp8 : {kE4M3, kE5M2}) {
    const float fmax = static_cast<float>(Info(fp8).max_finite);
    const Tensor x = RandomTensor({1000}, 9, DType::kFloat32, -3.0, 2.0);
    const float amax = static_cast<float>(Amax(x).Item());
    const float scale = ComputeScale(amax, fmax, /*margin=*/0, /*previous_scale=*/1.0f, /*power_of_two=*/false);
    const Tensor q = Quantize(x, fp8, scale);
    // The element at amax lands exactly on the format's max code.
    const std::vector<float> xf = AsFloats(x);
    const size_t at = std::max_element(xf.begin(), xf.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                      xf.begin();
    const uint8_t max_code = fp8 == kE4M3 ? 0x7E : 0x7B;
    EXPECT_EQ(Bytes(q)[at] & 0x7F, max_code) << Name(fp8);
    EXPECT_EQ(DecodeRef(max_code, fp8), fmax);
    EXPECT_NEAR(Dequantize(q).ToDoubles()[at], xf[at], std::abs(xf[at]) * 1e-6);
    EXPECT_EQ(static_cast<float>(q.scale_meta()->amax.Item()), amax);
    // With a margin of 1 the amax maps to half the max.
    const float half = ComputeScale(amax, fmax, 1, 1.0f, false);
    EXPECT_EQ(DecodeRef(Bytes(Quantize(x, fp8, half))[at] & 0x7F, fp8), fmax / 2);
  }
}

TEST(Quantize, ScaleTensorIsCopiedAndAcceptsShapeless) {
  Tensor scale = Full({}, 4.0);
  const Tensor q = Quantize(Ones({3}), kE4M3, scale);
  scale.Fill_(100.0);  // a delayed-scaling update after the fact
  EXPECT_EQ(q.scale_meta()->scale.Item(), 4.0);
  EXPECT_EQ(q.scale_meta()->scale_inv.Item(), 0.25);
  EXPECT_EQ(Dequantize(q).ToDoubles(), (std::vector<double>{1, 1, 1}));
}

TEST(Quantize, NonContiguousInput) {
  const Tensor x = RandomTensor({40, 30}, 10, DType::kFloat32, -5, 5).T();
  const Tensor q = Quantize(x, kE4M3, 2.0f);
  EXPECT_EQ(Bytes(q), Bytes(Quantize(x.Contiguous(), kE4M3, 2.0f)));
}

TEST(Amax, MatchesReferenceAndPropagatesNaN) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    Tensor x = RandomTensor({70001}, 11, dtype, -2.0, 1.0);
    const std::vector<double> v = x.ToDoubles();
    double want = 0;
    for (double e : v) want = std::max(want, std::abs(e));
    EXPECT_EQ(Amax(x).Item(), static_cast<float>(want)) << Name(dtype);
    EXPECT_EQ(Amax(x.Slice(0, 1, 70001, 3)).Item(), Amax(x.Slice(0, 1, 70001, 3).Contiguous()).Item());
    Tensor y = x.Clone();
    y.Narrow(0, 54321, 1).Fill_(std::numeric_limits<double>::quiet_NaN());
    EXPECT_TRUE(std::isnan(Amax(y).Item())) << Name(dtype);
    const Tensor q = Quantize(y, kE4M3, 1.0f);
    EXPECT_TRUE(std::isnan(q.scale_meta()->amax.Item())) << Name(dtype);
  }
  EXPECT_EQ(Amax(Empty({0})).Item(), 0.0);
  EXPECT_EQ(Amax(Empty({0})).shape(), (Shape{1}));
}

TEST(CastTranspose, EqualsQuantizePlusTransposeBitForBit) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    for (const Shape& s : {Shape{1, 1}, Shape{7, 33}, Shape{64, 64}, Shape{65, 130}, Shape{129, 7}, Shape{300, 200}}) {
      const Tensor x = RandomTensor(s, 12, dtype, -500, 500);
      const Tensor scale = Full({1}, 0.8);
      for (DType fp8 : {kE4M3, kE5M2}) {
        const auto [q, qt] = CastTranspose(x, fp8, scale);
        const Tensor ref = Quantize(x, fp8, scale);
        EXPECT_EQ(q.shape(), s);
        EXPECT_EQ(qt.shape(), (Shape{s[1], s[0]}));
        EXPECT_TRUE(qt.is_contiguous());
        EXPECT_EQ(Bytes(q), Bytes(ref)) << Name(dtype) << ShapeStr(s);
        EXPECT_EQ(Bytes(qt), Bytes(ref.T())) << Name(dtype) << ShapeStr(s);
        EXPECT_EQ(q.scale_meta(), qt.scale_meta());
        EXPECT_EQ(q.scale_meta()->amax.Item(), ref.scale_meta()->amax.Item());
        EXPECT_EQ(q.scale_meta()->scale_inv.Item(), ref.scale_meta()->scale_inv.Item());
      }
    }
  }
}

// ---- straight-through gradients ----------------------------------------------------------

TEST(CastGrad, DequantizeOfQuantizeIsIdentityForGradients) {
  for (DType xdt : {DType::kFloat64, DType::kFloat32}) {
    Tensor x = RandomTensor({4, 5}, 13, xdt).requires_grad_();
    const Tensor w = RandomTensor({4, 5}, 14, xdt);
    for (DType out : {xdt, DType::kBFloat16}) {
      x.zero_grad();
      const Tensor q = Quantize(x, kE4M3, 8.0f);
      EXPECT_TRUE(q.requires_grad());
      const Tensor y = Dequantize(q, out);
      Sum(Mul(y, w.To(out))).Backward();
      ASSERT_TRUE(x.grad().defined());
      EXPECT_EQ(x.grad().dtype(), xdt);
      EXPECT_TRUE(::octet::testing::AllClose(x.grad(), w.To(out).To(xdt), 0, 0)) << Name(xdt) << "->" << Name(out);
    }
  }
}

TEST(CastGrad, CastTransposeSendsBothGradientsBack) {
  Tensor x = RandomTensor({3, 4}, 15).requires_grad_();
  const Tensor w1 = RandomTensor({3, 4}, 16), w2 = RandomTensor({4, 3}, 17);
  const auto [q, qt] = CastTranspose(x, kE5M2, Full({1}, 2.0));
  Add(Sum(Mul(Dequantize(q, DType::kFloat64), w1)), Sum(Mul(Dequantize(qt, DType::kFloat64), w2))).Backward();
  EXPECT_TRUE(::octet::testing::AllClose(x.grad(), Add(w1, w2.T()), 0, 1e-15));
  // Only one of the two copies used: the other contributes zero.
  Tensor z = RandomTensor({3, 4}, 18).requires_grad_();
  const auto [zq, zqt] = CastTranspose(z, kE4M3, Full({1}, 1.0));
  Sum(Mul(Dequantize(zqt, DType::kFloat64), w2)).Backward();
  EXPECT_TRUE(::octet::testing::AllClose(z.grad(), w2.T().Contiguous(), 0, 0));
}

TEST(CastGrad, AmaxAndScaleAreNotDifferentiable) {
  Tensor x = RandomTensor({5}, 19).requires_grad_();
  EXPECT_FALSE(Amax(x).requires_grad());
  Tensor scale = Full({1}, 2.0, {.requires_grad = true});
  Tensor xs = RandomTensor({5}, 20).requires_grad_();
  Sum(Dequantize(Quantize(xs, kE4M3, scale), DType::kFloat64)).Backward();
  EXPECT_FALSE(scale.grad().defined());
  EXPECT_TRUE(xs.grad().defined());
}

// ---- errors ------------------------------------------------------------------------------------

TEST(Cast, ErrorMessages) {
  const Tensor q = Quantize(Ones({2, 3}), kE4M3, 1.0f);
  std::string msg = ErrorOf([&] { Quantize(q, kE5M2, 1.0f); });
  EXPECT_NE(msg.find("quantize: argument 'x' is fp8_e4m3[2, 3]"), std::string::npos) << msg;
  msg = ErrorOf([] { Quantize(Ones({2, 3}), DType::kBFloat16, 1.0f); });
  EXPECT_NE(msg.find("quantize: target dtype bfloat16 is not an FP8 dtype"), std::string::npos) << msg;
  msg = ErrorOf([] { Quantize(Ones({2, 3}), kE4M3, Ones({2})); });
  EXPECT_NE(msg.find("quantize: scale must be a float32 tensor with one element, got float32[2]"), std::string::npos)
      << msg;
  msg = ErrorOf([] { Quantize(Ones({2, 3}), kE4M3, Ones({1}, {.dtype = DType::kFloat64})); });
  EXPECT_NE(msg.find("quantize: scale must be a float32 tensor with one element, got float64[1]"),
            std::string::npos)
      << msg;
  msg = ErrorOf([] { Quantize(Ones({2, 3}), kE4M3, 0.0f); });
  EXPECT_NE(msg.find("quantize: scale must be positive and finite, got 0 (input float32[2, 3])"), std::string::npos)
      << msg;
  // A subnormal scale is positive and finite, but 1/scale is inf: every
  // dequantized value would be NaN.
  msg = ErrorOf([] { Quantize(Ones({2, 3}), kE4M3, 1e-45f); });
  EXPECT_NE(msg.find("quantize: scale 1.4013e-45 is too small: its reciprocal (scale_inv) overflows float32"),
            std::string::npos)
      << msg;
  EXPECT_NO_THROW(Quantize(Ones({2, 3}), kE4M3, 3e-39f));  // 1/scale ~ 3.3e38 is finite
  msg = ErrorOf([] { Quantize(Ones({2, 3}, {.dtype = DType::kInt32}), kE4M3, 1.0f); });
  EXPECT_NE(msg.find("quantize: argument 'x' is int32[2, 3]"), std::string::npos) << msg;
  msg = ErrorOf([] { CastTranspose(Ones({2, 3, 4}), kE4M3, Full({1}, 1.0)); });
  EXPECT_NE(msg.find("cast_transpose: argument 'x' must have rank 2, got float32[2, 3, 4]"), std::string::npos)
      << msg;
  msg = ErrorOf([] { Dequantize(Ones({2, 3})); });
  EXPECT_NE(msg.find("dequantize: expects an FP8 tensor, got float32[2, 3]"), std::string::npos) << msg;
  msg = ErrorOf([&] { Dequantize(q, DType::kInt32); });
  EXPECT_NE(msg.find("dequantize: output dtype int32 is not float32, float64, bfloat16 or float16 (input "
                     "fp8_e4m3[2, 3])"),
            std::string::npos)
      << msg;
  msg = ErrorOf([&] { Amax(q); });
  EXPECT_NE(msg.find("amax: argument 'x' is fp8_e4m3[2, 3]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace octet
