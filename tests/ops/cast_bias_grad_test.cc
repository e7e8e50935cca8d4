// CastTransposeWithBiasGrad and QuantizeWithBiasGrad on the CPU
// (ops/cast.h): the FP8 bytes are CastTranspose's / Quantize's, dbias is the
// float64 column sum to float32 rounding and, by its defined row order, the
// bits of Sum(x.To(f32), {0}); QuantizeForGemm hands the sums out from the
// cast-transpose where it makes the column-wise copy and from the plain
// quantize where FP8 GEMMs want no copies; errors name the op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <octet/core/convert_testing.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul.h>
#include <octet/ops/matmul_testing.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

using ::octet::testing::Bytes;

// Column sums in float64 of the values the kernel sums (f64 x rounded to f32 first).
std::vector<double> ColumnSums64(const Tensor& x) {
  const std::vector<double> v = x.ToDoubles();
  const int64_t R = x.size(0), C = x.size(1);
  std::vector<double> s(C, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const double e = v[r * C + c];
      s[c] += x.dtype() == DType::kFloat64 ? static_cast<double>(static_cast<float>(e)) : e;
    }
  return s;
}

class BiasGradTest : public ::testing::TestWithParam<DType> {};

TEST_P(BiasGradTest, CopiesAreCastTransposeAndDbiasIsTheColumnSum) {
  const DType dtype = GetParam();
  for (const Shape& s : {Shape{1, 1}, Shape{1, 5}, Shape{7, 1}, Shape{33, 70}, Shape{128, 256}, Shape{300, 257},
                         Shape{0, 6}}) {
    SCOPED_TRACE(::testing::Message() << Name(dtype) << " " << ShapeStr(s));
    const Tensor x = RandomTensor(s, 21, dtype, -40.0, 40.0);
    const Tensor scale = Full({1}, 0.9);
    for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      const CastTransposeBiasGrad r = CastTransposeWithBiasGrad(x, fp8, scale);
      const auto [q, qt] = CastTranspose(x, fp8, scale);
      EXPECT_EQ(Bytes(r.q), Bytes(q));
      EXPECT_EQ(Bytes(r.qt), Bytes(qt));
      EXPECT_EQ(r.q.scale_meta(), r.qt.scale_meta());
      EXPECT_EQ(r.q.scale_meta()->amax.Item(), q.scale_meta()->amax.Item());
      EXPECT_EQ(r.q.scale_meta()->scale_inv.Item(), q.scale_meta()->scale_inv.Item());
      ASSERT_EQ(r.dbias.dtype(), DType::kFloat32);
      ASSERT_EQ(r.dbias.shape(), (Shape{s[1]}));
      const std::vector<double> got = r.dbias.ToDoubles(), want = ColumnSums64(x);
      // float32 sums of R terms of size <= 40: error below R * 40 * 2^-24 per column.
      const double tol = std::max<int64_t>(s[0], 1) * 40.0 * std::ldexp(1.0, -23);
      for (int64_t c = 0; c < s[1]; ++c) EXPECT_NEAR(got[c], want[c], tol) << "column " << c;
      // The defined order (rows 0..R-1 in f32) is Sum's on the CPU: same bits.
      if (s[0] > 0) EXPECT_EQ(Bytes(r.dbias), Bytes(Sum(x.To(DType::kFloat32), {0})));
      // Without the transposed copy: Quantize's bytes and amax, the same sums.
      const QuantizeBiasGrad p = QuantizeWithBiasGrad(x, fp8, scale);
      EXPECT_EQ(Bytes(p.q), Bytes(q));
      EXPECT_EQ(p.q.scale_meta()->amax.Item(), q.scale_meta()->amax.Item());
      EXPECT_EQ(p.q.scale_meta()->scale_inv.Item(), q.scale_meta()->scale_inv.Item());
      EXPECT_FALSE(p.q.scale_meta()->columnwise.defined());
      ASSERT_EQ(p.dbias.shape(), (Shape{s[1]}));
      EXPECT_EQ(Bytes(p.dbias), Bytes(r.dbias));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BiasGradTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(BiasGrad, ExactOnIntegers) {
  // Small integers add exactly in float32: dbias is exact, whatever the order.
  std::vector<double> v(50 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(static_cast<int>(i % 17) - 8);
  const Tensor x = FromVector(v, {50, 3}, {.dtype = DType::kBFloat16});
  const CastTransposeBiasGrad r = CastTransposeWithBiasGrad(x, DType::kFloat8E5M2, Full({1}, 1.0));
  EXPECT_EQ(r.dbias.ToDoubles(), ColumnSums64(x));
}

TEST(BiasGrad, QuantizeForGemmSumsFromTheCastItMakes) {
  const Tensor x = RandomTensor({20, 12}, 5, DType::kFloat32, -3.0, 3.0);
  const Tensor scale = Full({1}, 2.0);
  const Tensor want = Sum(x, {0});
  const Tensor plain = Quantize(x, DType::kFloat8E5M2, scale);
  Tensor dbias = Full({1}, 7.0);  // reset when not produced
  // No transposed copies (the CPU): the plain quantize sums, column-wise or not.
  SetFp8TransposedCopiesForTesting(false);
  for (bool columnwise : {true, false}) {
    dbias = Full({1}, 7.0);
    const Tensor q = QuantizeForGemm(x, DType::kFloat8E5M2, scale, columnwise, Fp8Saturation::kSatFinite, &dbias);
    ASSERT_TRUE(dbias.defined()) << columnwise;
    EXPECT_EQ(Bytes(dbias), Bytes(want));
    EXPECT_EQ(Bytes(q), Bytes(plain));
    EXPECT_FALSE(q.scale_meta()->columnwise.defined());
  }
  // Not 2-D: no sums.
  dbias = Full({1}, 7.0);
  (void)QuantizeForGemm(x.View({20, 3, 4}), DType::kFloat8E5M2, scale, false, Fp8Saturation::kSatFinite, &dbias);
  EXPECT_FALSE(dbias.defined());
  SetFp8TransposedCopiesForTesting(true);
  const Tensor q = QuantizeForGemm(x, DType::kFloat8E5M2, scale, /*columnwise=*/true, Fp8Saturation::kSatFinite, &dbias);
  ASSERT_TRUE(dbias.defined());
  EXPECT_EQ(Bytes(dbias), Bytes(want));
  EXPECT_EQ(Bytes(q), Bytes(plain));
  ASSERT_TRUE(q.scale_meta()->columnwise.defined());
  EXPECT_EQ(Bytes(q.scale_meta()->columnwise), Bytes(plain.T()));
  // Copies wanted but not column-wise: no copy, so no sums.
  dbias = Full({1}, 7.0);
  (void)QuantizeForGemm(x, DType::kFloat8E5M2, scale, /*columnwise=*/false, Fp8Saturation::kSatFinite, &dbias);
  EXPECT_FALSE(dbias.defined());
  SetFp8TransposedCopiesForTesting(std::nullopt);
}

// The sums in their defined order, computed here one float addition at a
// time: column c is ((0 + x[0][c]) + x[1][c]) + ... in f32.
std::vector<float> RowOrderSums(const Tensor& x) {
  const std::vector<double> v = x.ToDoubles();
  const int64_t R = x.size(0), C = x.size(1);
  std::vector<float> s(C, 0.0f);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < R; ++r) s[c] = s[c] + static_cast<float>(v[r * C + c]);
  return s;
}

// NOTE [column sums]: the kernel adds four rows per accumulator load, in
// column blocks of up to 1024; the shapes cover ragged row counts, several
// blocks and narrow matrices, in both ISA builds and for every input dtype
// (a bf16 block on AVX-512 in groups of 128 and 32 columns and a tail, on
// AVX2 in groups of 64, 32 and 16 and a tail: NOTE [bf16 column sums in even
// and odd lanes]; without AVX2 the generic loop). Each setting falls back to
// what the CPU has.
TEST(BiasGrad, SumsAreRowOrderFloatSumsInBothIsaBuilds) {
  const Tensor scale = Full({1}, 0.5);
  for (const Shape& s : {Shape{1, 1}, Shape{3, 5}, Shape{37, 2100}, Shape{130, 96}, Shape{64, 1030}, Shape{5, 17},
                         Shape{2048, 128}, Shape{301, 300}}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
      SCOPED_TRACE(::testing::Message() << Name(dtype) << " " << ShapeStr(s));
      const Tensor x = RandomTensor(s, 77, dtype, -40.0, 40.0);
      const std::vector<float> want = RowOrderSums(x);
      for (int isa : {0, 1, 2}) {
        const bool avx512 = isa == 2;
        internal::SetConverterIsaForTesting({avx512, avx512, avx512, isa >= 1});
        const QuantizeBiasGrad p = QuantizeWithBiasGrad(x, DType::kFloat8E5M2, scale);
        const std::vector<double> got = p.dbias.ToDoubles();
        ASSERT_EQ(got.size(), want.size());
        for (int64_t c = 0; c < s[1]; ++c)
          ASSERT_EQ(static_cast<float>(got[c]), want[c]) << "column " << c << " isa " << isa;
        const std::vector<double> sum = Sum(x.To(DType::kFloat32), {0}).ToDoubles();
        for (int64_t c = 0; c < s[1]; ++c) ASSERT_EQ(static_cast<float>(sum[c]), want[c]) << "Sum, column " << c;
      }
      internal::ForceScalarConvertersForTesting(false);
    }
  }
}

TEST(BiasGrad, ErrorsNameTheOp) {
  const Tensor scale = Full({1}, 1.0);
  EXPECT_NE(ErrorOf([&] { CastTransposeWithBiasGrad(Zeros({4}), DType::kFloat8E4M3, scale); })
                .find("cast_transpose_with_bias_grad"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { CastTransposeWithBiasGrad(Zeros({2, 2}), DType::kFloat32, scale); }).find("not an FP8"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { QuantizeWithBiasGrad(Zeros({4}), DType::kFloat8E4M3, scale); })
                .find("quantize_with_bias_grad"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { QuantizeWithBiasGrad(Zeros({2, 2}), DType::kFloat32, scale); }).find("not an FP8"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { CastTransposeWithBiasGrad(Zeros({2, 2}), DType::kFloat8E4M3, Full({2}, 1.0)); })
                .find("scale"),
            std::string::npos);
}

}  // namespace
}  // namespace octet
