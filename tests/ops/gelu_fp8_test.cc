// GeluFp8 (ops/pointwise.h, NOTE [gelu to fp8] in ops/pointwise.cc): the
// FP8 bytes, amax and scale_inv equal Quantize of the float32 Gelu of the
// same values (one rounding; for float64 x, Quantize of the float64 Gelu),
// including inf, NaN, saturating values and strided inputs; the decoded
// values are within one FP8 rounding of a float64 reference GELU; backward
// is Gelu's given the same output gradient, and matches central differences
// of the float64 reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/pointwise.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::Bytes;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

constexpr DType kE4M3 = DType::kFloat8E4M3;
constexpr DType kE5M2 = DType::kFloat8E5M2;
constexpr DType kF32 = DType::kFloat32;

float ScalarOf(const Tensor& t) { return static_cast<float>(t.ToDoubles().at(0)); }
Tensor F32Scalar(float v) { return Full({1}, v, {.dtype = kF32}); }

double RefGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Quantize of Gelu computed the way the kernel computes it: float32 for
// 16-bit and float32 x (widening is exact), float64 for float64 x.
Tensor Unfused(const Tensor& x, DType fp8, float scale, Fp8Saturation sat = Fp8Saturation::kSatFinite) {
  const Tensor g = x.dtype() == DType::kFloat64 ? Gelu(x) : Gelu(x.To(kF32));
  return Quantize(g, fp8, F32Scalar(scale), sat);
}

void ExpectSameAsUnfused(const Tensor& x, DType fp8, float scale, Fp8Saturation sat, const std::string& what) {
  const Tensor q = GeluFp8(x, fp8, F32Scalar(scale), sat);
  const Tensor want = Unfused(x, fp8, scale, sat);
  ASSERT_EQ(q.dtype(), fp8) << what;
  ASSERT_EQ(q.shape(), x.shape()) << what;
  ASSERT_NE(q.scale_meta(), nullptr) << what;
  EXPECT_EQ(Bytes(q), Bytes(want)) << what;
  const float a = ScalarOf(q.scale_meta()->amax), b = ScalarOf(want.scale_meta()->amax);
  if (std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a)) << what;
  } else {
    EXPECT_EQ(a, b) << what;
  }
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale_inv), ScalarOf(want.scale_meta()->scale_inv)) << what;
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale), scale) << what;
}

TEST(GeluFp8, EqualsQuantizeOfTheFloat32Gelu) {
  // 4*33*97 = 12804 elements: several 4096-element blocks and a ragged tail.
  for (DType xdt : {kF32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    const Tensor x = RandomTensor({4, 33, 97}, 11, xdt, -6.0, 8.0);
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
        for (float scale : {1.0f, 37.5f, 200.0f}) {  // 200: values beyond E4M3's 448 saturate
          ExpectSameAsUnfused(x, fp8, scale, sat,
                              std::string(Name(xdt)) + " " + Name(fp8) + " scale " + std::to_string(scale));
        }
      }
    }
  }
}

// The decoded values against a float64 GELU: within one FP8 rounding (half a
// step: 2^-4 relative for E4M3, 2^-3 for E5M2) plus the float32 error and the
// subnormal step; amax against the float64 max.
TEST(GeluFp8, DecodedValuesMatchTheFloat64Reference) {
  const Tensor x = RandomTensor({3000}, 12, kF32, -5.0, 5.0);
  const std::vector<double> xv = x.ToDoubles();
  for (DType fp8 : {kE4M3, kE5M2}) {
    const float scale = 16.0f;
    const Tensor q = GeluFp8(x, fp8, F32Scalar(scale));
    const std::vector<double> d = Dequantize(q, DType::kFloat64).ToDoubles();
    const double rel = fp8 == kE4M3 ? 1.0 / 16 : 1.0 / 8;
    const double tiny = (fp8 == kE4M3 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -16)) / scale;
    double amax = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double g = RefGelu(xv[i]);
      amax = std::max(amax, std::abs(g));
      EXPECT_NEAR(d[i], g, rel * std::abs(g) * 1.0001 + tiny) << Name(fp8) << " x=" << xv[i];
    }
    EXPECT_NEAR(ScalarOf(q.scale_meta()->amax), amax, 1e-5 * amax);
    EXPECT_EQ(ScalarOf(q.scale_meta()->scale_inv), 1.0f / scale);
  }
}

// For bfloat16 x the unfused path rounds the GELU to bfloat16 first;
// somewhere that moves a value across an FP8 rounding boundary (else the
// test above would not tell the two apart).
TEST(GeluFp8, RoundsOnceWhereGeluThenQuantizeRoundsTwice) {
  const Tensor x = RandomTensor({64, 96}, 13, DType::kBFloat16, -4.0, 4.0);
  const Tensor q = GeluFp8(x, kE4M3, F32Scalar(91.0f));
  EXPECT_NE(Bytes(q), Bytes(Quantize(Gelu(x), kE4M3, 91.0f)));
}

TEST(GeluFp8, InfNanAndSaturatingValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (DType xdt : {kF32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    // Without NaN: +inf saturates (or becomes inf/NaN without saturation),
    // large finite values saturate, tiny ones underflow.
    std::vector<double> v = {0.0, -0.0, 1e-30, -1e-8, 1.0, -1.0, 3.0, 60.0, 500.0, 6e4, inf, -30.0, -100.0};
    const Tensor a = FromVector(v, {static_cast<int64_t>(v.size())}).To(xdt);
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
        ExpectSameAsUnfused(a, fp8, 4.0f, sat, std::string(Name(xdt)) + " " + Name(fp8) + " inf");
      }
    }
    const Tensor qa = GeluFp8(a, kE4M3, F32Scalar(4.0f));
    EXPECT_EQ(ScalarOf(qa.scale_meta()->amax), inf) << Name(xdt);
    // A NaN anywhere (here in the last block) makes amax NaN.
    Tensor b = RandomTensor({9000}, 14, xdt, -3.0, 3.0).Contiguous();
    std::vector<double> bv = b.ToDoubles();
    bv[8500] = nan;
    b = FromVector(bv, {9000}).To(xdt);
    for (DType fp8 : {kE4M3, kE5M2}) {
      ExpectSameAsUnfused(b, fp8, 2.0f, Fp8Saturation::kSatFinite, std::string(Name(xdt)) + " " + Name(fp8) + " nan");
    }
    EXPECT_TRUE(std::isnan(ScalarOf(GeluFp8(b, kE5M2, F32Scalar(1.0f)).scale_meta()->amax))) << Name(xdt);
  }
}

TEST(GeluFp8, StridedInputsGiveTheBytesOfTheirContiguousCopy) {
  for (DType xdt : {kF32, DType::kBFloat16}) {
    const Tensor big = RandomTensor({70, 130}, 15, xdt, -4.0, 4.0);
    const Tensor t = big.T();  // (130, 70), transposed strides
    const Tensor q = GeluFp8(t, kE4M3, F32Scalar(24.0f));
    ASSERT_EQ(q.shape(), (Shape{130, 70}));
    EXPECT_TRUE(q.is_contiguous());
    EXPECT_EQ(Bytes(q), Bytes(GeluFp8(t.Contiguous(), kE4M3, F32Scalar(24.0f))));
    ExpectSameAsUnfused(t, kE4M3, 24.0f, Fp8Saturation::kSatFinite, std::string(Name(xdt)) + " transposed");
  }
}

TEST(GeluFp8, MetadataOwnsACopyOfTheScale) {
  const Tensor x = RandomTensor({5, 16}, 16, kF32);
  Tensor scale = F32Scalar(4.0f);
  const Tensor q = GeluFp8(x, kE4M3, scale);
  scale.Fill_(9.0);
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale), 4.0f);
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale_inv), 0.25f);
  EXPECT_EQ(q.scale_meta()->granularity, ScaleGranularity::kPerTensor);
}

// Backward is Gelu's: the same bits as Gelu's backward given the same output
// gradient (in x's dtype), whatever float dtype reaches the FP8 output.
TEST(GeluFp8, BackwardEqualsGeluBackward) {
  for (DType xdt : {kF32, DType::kBFloat16, DType::kFloat64, DType::kFloat16}) {
    for (DType gdt : {kF32, DType::kBFloat16}) {
      const Tensor x0 = RandomTensor({6, 11, 48}, 21, xdt, -4.0, 3.0);
      const Tensor dy = RandomTensor({6, 11, 48}, 22, gdt, -1.0, 1.0);
      Tensor xa = x0.detach().requires_grad_(), xb = x0.detach().requires_grad_();
      const Tensor q = GeluFp8(xa, kE4M3, F32Scalar(16.0f));
      ASSERT_TRUE(q.requires_grad());
      Dequantize(q, gdt).Backward(dy);
      Gelu(xb).Backward(dy.To(xdt));
      ASSERT_TRUE(xa.grad().defined());
      EXPECT_EQ(xa.grad().dtype(), xdt);
      EXPECT_EQ(xa.grad().ToDoubles(), xb.grad().ToDoubles()) << Name(xdt) << " dy " << Name(gdt);
    }
  }
}

// The analytic gradient (float64) against central differences of the float64
// reference GELU contracted with dy: the straight-through gradient of the
// quantized output is the GELU's own.
TEST(GeluFp8, GradientMatchesFiniteDifferencesOfTheReference) {
  const int64_t n = 41;
  const double h = 1e-6;
  const Tensor x0 = RandomTensor({n}, 31, DType::kFloat64, -4.0, 4.0);
  const std::vector<double> dy = ::octet::testing::RandomValues(n, 32);
  Tensor x = x0.detach().requires_grad_();
  Dequantize(GeluFp8(x, kE5M2, F32Scalar(1.0f)), DType::kFloat64).Backward(FromVector(dy, {n}).To(DType::kFloat64));
  const std::vector<double> xv = x0.ToDoubles(), g = x.grad().ToDoubles();
  for (int64_t i = 0; i < n; ++i) {
    const double fd = (RefGelu(xv[i] + h) - RefGelu(xv[i] - h)) / (2 * h) * dy[i];
    EXPECT_NEAR(g[i], fd, 1e-6 * std::max(1.0, std::abs(g[i]))) << "x=" << xv[i];
  }
}

TEST(GeluFp8, EmptyInputGivesScaleInvAndZeroAmax) {
  const Tensor q = GeluFp8(Empty({0, 8}), kE5M2, F32Scalar(2.0f));
  EXPECT_EQ(q.shape(), (Shape{0, 8}));
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale_inv), 0.5f);
  EXPECT_EQ(ScalarOf(q.scale_meta()->amax), 0.0f);
}

TEST(GeluFp8, BadCallsNameTheProblem) {
  const Tensor x = RandomTensor({4, 8}, 41, kF32);
  EXPECT_THAT(ErrorOf([&] { GeluFp8(x, DType::kBFloat16, F32Scalar(1.0f)); }), HasSubstr("is not an FP8 dtype"));
  EXPECT_THAT(ErrorOf([&] { GeluFp8(x, kE4M3, Full({2}, 1.0)); }),
              HasSubstr("scale must be a float32 tensor with one element"));
  EXPECT_THAT(ErrorOf([&] { GeluFp8(x, kE4M3, Full({1}, 1.0, {.dtype = DType::kFloat64})); }),
              HasSubstr("scale must be a float32 tensor with one element"));
  EXPECT_THAT(ErrorOf([&] { GeluFp8(x, kE4M3, Tensor()); }), HasSubstr("scale"));
  EXPECT_THAT(ErrorOf([&] { GeluFp8(Quantize(x, kE4M3, 1.0f), kE4M3, F32Scalar(1.0f)); }), HasSubstr("gelu_fp8"));
  EXPECT_THAT(ErrorOf([&] { GeluFp8(Tensor(), kE4M3, F32Scalar(1.0f)); }), HasSubstr("gelu_fp8"));
}

}  // namespace
}  // namespace octet
