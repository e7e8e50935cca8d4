// GeluBackwardFp8 (ops/pointwise.h, NOTE [gelu backward to fp8]): the FP8
// bytes, amax, scale_inv and bias gradient equal GELU's backward followed by
// QuantizeWithBiasGrad, bit for bit, for float32 and bfloat16, both FP8
// formats, shapes across the kernel's column blocks, one and two threads,
// saturating values and NaN; and the values themselves are close to a
// float64 reference (dq * gelu'(h), its column sums).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <absl/strings/str_cat.h>

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

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kE4M3 = DType::kFloat8E4M3;
constexpr DType kE5M2 = DType::kFloat8E5M2;

Tensor F32Scalar(float v) { return Full({1}, v, {.dtype = kF32}); }

uint32_t Bits(double v) {
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void ExpectSameAsUnfused(const Tensor& dq, const Tensor& h, DType fp8, float scale, const std::string& what) {
  const Tensor dh = BinaryRaw(BinaryOp::kGeluBackward, dq, h);
  const QuantizeBiasGrad want = QuantizeWithBiasGrad(dh, fp8, F32Scalar(scale));
  for (bool with_dbias : {true, false}) {
    const GeluBackwardFp8Result got = GeluBackwardFp8(dq, h, fp8, F32Scalar(scale), with_dbias);
    ASSERT_EQ(got.q.dtype(), fp8) << what;
    ASSERT_EQ(got.q.shape(), h.shape()) << what;
    ASSERT_NE(got.q.scale_meta(), nullptr) << what;
    EXPECT_EQ(Bytes(got.q), Bytes(want.q)) << what;
    const ScaleMeta& g = *got.q.scale_meta();
    const ScaleMeta& w = *want.q.scale_meta();
    EXPECT_EQ(Bits(g.amax.ToDoubles()[0]), Bits(w.amax.ToDoubles()[0])) << what;
    EXPECT_EQ(Bits(g.scale_inv.ToDoubles()[0]), Bits(w.scale_inv.ToDoubles()[0])) << what;
    EXPECT_EQ(g.scale.ToDoubles(), std::vector<double>{scale}) << what;
    if (with_dbias) {
      ASSERT_TRUE(got.dbias.defined()) << what;
      EXPECT_EQ(Bytes(got.dbias), Bytes(want.dbias)) << what;
    } else {
      EXPECT_FALSE(got.dbias.defined()) << what;
    }
  }
}

TEST(GeluBackwardFp8, EqualsGeluBackwardThenQuantizeWithBiasGrad) {
  // Column counts below, at and across the kernel's blocks (64..512 wide,
  // at least two a thread), rows from one up.
  const std::vector<Shape> shapes = {{1, 5}, {3, 64}, {37, 1100}, {64, 3072}, {130, 96}, {0, 8}, {5, 0}};
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (DType dtype : {kF32, kBF16}) {
      for (DType fp8 : {kE4M3, kE5M2}) {
        int seed = 1;
        for (const Shape& shape : shapes) {
          const Tensor dq = RandomTensor(shape, seed++, dtype);
          const Tensor h = MulScalar(RandomTensor(shape, seed++, dtype), 3.0);
          ExpectSameAsUnfused(dq, h, fp8, 37.5f,
                              absl::StrCat(Name(dtype), " ", Name(fp8), " ", ShapeStr(shape), " ", threads, "t"));
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(GeluBackwardFp8, SaturatingAndNanValuesAsQuantizeHasThem) {
  std::vector<double> dq = {1.0, -2.0, 1e6, -1e6, 0.5, std::numeric_limits<double>::quiet_NaN(), 3.0, 0.0};
  std::vector<double> h = {0.5, -0.25, 2.0, 1.0, 40.0, 1.0, -40.0, std::numeric_limits<double>::infinity()};
  for (DType dtype : {kF32, kBF16}) {
    const Tensor tdq = FromVector(dq, {2, 4}, {.dtype = dtype});
    const Tensor th = FromVector(h, {2, 4}, {.dtype = dtype});
    ExpectSameAsUnfused(tdq, th, kE4M3, 1.0f, std::string(Name(dtype)) + " with NaN");
    const GeluBackwardFp8Result r = GeluBackwardFp8(tdq, th, kE5M2, F32Scalar(1.0f), true);
    EXPECT_TRUE(std::isnan(r.q.scale_meta()->amax.ToDoubles()[0]));
    dq[5] = 1.0;  // no NaN left: the 1e6 gradients saturate E4M3 at +-448
    const Tensor finite = FromVector(dq, {2, 4}, {.dtype = dtype});
    ExpectSameAsUnfused(finite, th, kE4M3, 1.0f, std::string(Name(dtype)) + " saturating");
  }
}

TEST(GeluBackwardFp8, CloseToAFloat64Reference) {
  const Shape shape = {50, 700};
  const Tensor dq = RandomTensor(shape, 11, kF32);
  const Tensor h = MulScalar(RandomTensor(shape, 12, kF32), 2.0);
  const float scale = 64.0f;
  const GeluBackwardFp8Result r = GeluBackwardFp8(dq, h, kE4M3, F32Scalar(scale), true);
  const std::vector<double> vdq = dq.ToDoubles(), vh = h.ToDoubles();
  const std::vector<double> q = r.q.ToDoubles();  // decoded with scale_inv
  const std::vector<double> db = r.dbias.ToDoubles();
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  std::vector<double> sums(shape[1], 0.0);
  double amax = 0.0;
  for (int64_t i = 0; i < Numel(shape); ++i) {
    const double x = vh[i], u = k * (x + c * x * x * x), t = std::tanh(u);
    const double grad = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
    const double want = vdq[i] * grad;
    sums[i % shape[1]] += want;
    amax = std::max(amax, std::abs(want));
    // E4M3 keeps 3 mantissa bits: half an ulp is 2^-4 relative; subnormals
    // (below 2^-6 / scale) are 2^-9 / scale apart.
    EXPECT_NEAR(q[i], want, std::abs(want) / 16.0 + std::ldexp(1.0, -10) / scale + 1e-6) << i;
  }
  for (int64_t j = 0; j < shape[1]; ++j) EXPECT_NEAR(db[j], sums[j], 1e-4 * (1.0 + std::abs(sums[j]))) << j;
  EXPECT_NEAR(r.q.scale_meta()->amax.ToDoubles()[0], amax, 1e-5 * amax);
}

TEST(GeluBackwardFp8, BadArgumentsAreNamed) {
  const Tensor a = RandomTensor({4, 8}, 1, kF32);
  EXPECT_THAT(ErrorOf([&] { GeluBackwardFp8(a, RandomTensor({4, 9}, 2, kF32), kE5M2, F32Scalar(1), true); }),
              HasSubstr("gelu_backward_fp8: dq float32[4, 8] and h float32[4, 9]"));
  EXPECT_THAT(ErrorOf([&] { GeluBackwardFp8(a, a.To(kBF16), kE5M2, F32Scalar(1), true); }),
              HasSubstr("must have the same shape and dtype"));
  EXPECT_THAT(ErrorOf([&] { GeluBackwardFp8(a.Reshape({32}), a.Reshape({32}), kE5M2, F32Scalar(1), true); }),
              HasSubstr("gelu_backward_fp8"));
  EXPECT_THAT(ErrorOf([&] { GeluBackwardFp8(a.To(DType::kFloat64), a.To(DType::kFloat64), kE5M2, F32Scalar(1), true); }),
              HasSubstr("float32 or bfloat16"));
  EXPECT_THAT(ErrorOf([&] { GeluBackwardFp8(a, a, kBF16, F32Scalar(1), true); }), HasSubstr("not an FP8 dtype"));
  EXPECT_THAT(ErrorOf([&] { GeluBackwardFp8(a, a, kE4M3, Full({2}, 1.0), true); }),
              HasSubstr("scale must be a float32 tensor with one element"));
}

}  // namespace
}  // namespace octet
