// LayerNormFp8 (ops/norm.h, NOTE [layer norm to fp8] in ops/norm.cc): the
// FP8 bytes against core/float8.h's scalar conversion (bit-exact with
// cuda_fp8.h's host functions, tests/core/float8_cuda_oracle_test.cc) of a
// float64 reference LayerNorm rounded to float32 and multiplied by the scale;
// amax and scale_inv as Quantize sets them; one rounding (the same bytes as
// Quantize of the float32 LayerNorm); backward equal to LayerNorm's given the
// same output gradient and to a float64 finite-difference reference; and
// TransposeFp8 / WithColumnwiseForGemm, the byte transpose an FP8 Linear
// takes of a pre-quantized input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul.h>
#include <octet/ops/matmul_testing.h>
#include <octet/ops/norm.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

constexpr DType kE4M3 = DType::kFloat8E4M3;
constexpr DType kE5M2 = DType::kFloat8E5M2;

using ::octet::testing::Bytes;

uint8_t Encode(float v, DType fp8) {
  return fp8 == kE4M3 ? FloatToE4M3Bits(v, Fp8Saturation::kSatFinite) : FloatToE5M2Bits(v, Fp8Saturation::kSatFinite);
}

float ScalarOf(const Tensor& t) { return static_cast<float>(t.ToDoubles().at(0)); }
Tensor F32Scalar(float v) { return Full({1}, v, {.dtype = DType::kFloat32}); }

// float64 LayerNorm of rows of length c; w/b empty: no affine part.
std::vector<double> RefLayerNorm(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& b, int64_t c, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r * c < x.size(); ++r) {
    const double* xr = x.data() + r * c;
    double mu = 0, var = 0;
    for (int64_t i = 0; i < c; ++i) mu += xr[i];
    mu /= c;
    for (int64_t i = 0; i < c; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var /= c;
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < c; ++i)
      y[r * c + i] = (xr[i] - mu) * rs * (w.empty() ? 1.0 : w[i]) + (b.empty() ? 0.0 : b[i]);
  }
  return y;
}

// Rows whose LayerNorm is exact in float32 (and in bfloat16 inputs): each row
// is an offset plus a shuffle of {-3, -1, 1, 3} (equal counts), so mean and
// variance (5) are exact sums, and eps = 11 makes var + eps = 16, rstd = 1/4.
// The weight and bias are bfloat16 values, so y = xhat * w + b is exact in
// float32. The float64 reference rounded to float32 is then the kernel's y.
struct ExactCase {
  Tensor x, w, b;
  double eps = 11.0;
};
ExactCase MakeExact(int64_t n, int64_t c, DType dtype) {
  std::mt19937_64 rng(17);
  std::vector<double> x(n * c);
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> d(c);
    for (int64_t i = 0; i < c; ++i) d[i] = static_cast<double>(2 * (i % 4) - 3);
    std::shuffle(d.begin(), d.end(), rng);
    const double offset = 0.5 * static_cast<double>(r % 11) - 2.0;
    for (int64_t i = 0; i < c; ++i) x[r * c + i] = offset + d[i];
  }
  ExactCase e;
  e.x = FromVector(x, {n, c}).To(dtype);
  // Weight in [0.5, 2), bias in [-1, 1), both bfloat16 values.
  e.w = RandomTensor({c}, 5, DType::kBFloat16, 0.5, 2.0).To(dtype);
  e.b = RandomTensor({c}, 6, DType::kBFloat16, -1.0, 1.0).To(dtype);
  return e;
}

class LayerNormFp8Exact : public ::testing::TestWithParam<DType> {};

TEST_P(LayerNormFp8Exact, BytesEqualTheFp8OfTheFloat64ReferenceTimesTheScale) {
  const DType xdt = GetParam();
  const int64_t n = 37, c = 64;
  const ExactCase e = MakeExact(n, c, xdt);
  const std::vector<double> ref = RefLayerNorm(e.x.ToDoubles(), e.w.ToDoubles(), e.b.ToDoubles(), c, e.eps);
  float ref_amax = 0.0f;
  for (double v : ref) ref_amax = std::max(ref_amax, std::abs(static_cast<float>(v)));
  // 600 saturates E4M3 (|y| reaches 3.7: 3.7 * 600 > 448); 0.37 is not a power of two.
  for (DType fp8 : {kE4M3, kE5M2}) {
    for (float scale : {1.0f, 0.37f, 37.5f, 600.0f}) {
      const Tensor q = LayerNormFp8(e.x, e.w, e.b, fp8, F32Scalar(scale), e.eps);
      ASSERT_EQ(q.dtype(), fp8);
      ASSERT_EQ(q.shape(), e.x.shape());
      const std::vector<uint8_t> got = Bytes(q);
      int bad = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const uint8_t want = Encode(static_cast<float>(ref[i]) * scale, fp8);
        if (got[i] != want && bad++ < 3)
          ADD_FAILURE() << Name(xdt) << "->" << Name(fp8) << " scale " << scale << " [" << i << "] y=" << ref[i]
                        << " got " << int(got[i]) << " want " << int(want);
      }
      EXPECT_EQ(bad, 0);
      const ScaleMeta* meta = q.scale_meta();
      ASSERT_NE(meta, nullptr);
      EXPECT_EQ(meta->granularity, ScaleGranularity::kPerTensor);
      EXPECT_EQ(ScalarOf(meta->scale), scale);
      EXPECT_EQ(ScalarOf(meta->scale_inv), 1.0f / scale);
      EXPECT_EQ(ScalarOf(meta->amax), ref_amax);
      // As a Quantize result says it: the same scale_inv for the same scale.
      const Tensor qq = Quantize(e.x.To(DType::kFloat32), fp8, scale);
      EXPECT_EQ(ScalarOf(qq.scale_meta()->scale_inv), ScalarOf(meta->scale_inv));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerNormFp8Exact,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat64),
                         [](const auto& info) { return std::string(Name(info.param)); });

// Random inputs: the float32 kernel's y differs from the float64 reference by
// a few float32 ulps, which changes the FP8 byte only where the scaled value
// lies that close to a rounding boundary. Every mismatch must be one of the
// two codes of the reference value moved by 1e-5 relative, and they must be rare.
TEST(LayerNormFp8, RandomInputsMatchTheFloat64ReferenceUpToFloat32Rounding) {
  const int64_t n = 45, c = 200;
  for (DType xdt : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = RandomTensor({3, 15, c}, 21, xdt, -3.0, 5.0);
    const Tensor w = RandomTensor({c}, 22, xdt, -1.5, 1.5);
    const Tensor b = RandomTensor({c}, 23, xdt, -0.5, 0.5);
    const std::vector<double> ref = RefLayerNorm(x.ToDoubles(), w.ToDoubles(), b.ToDoubles(), c, 1e-5);
    for (DType fp8 : {kE4M3, kE5M2}) {
      const float scale = 53.0f;
      const Tensor q = LayerNormFp8(x, w, b, fp8, F32Scalar(scale));
      ASSERT_EQ(q.shape(), x.shape());
      const std::vector<uint8_t> got = Bytes(q);
      int mismatches = 0;
      double ref_amax = 0.0;
      for (int64_t i = 0; i < n * c; ++i) {
        ref_amax = std::max(ref_amax, std::abs(ref[i]));
        const float v = static_cast<float>(ref[i]) * scale;
        if (got[i] == Encode(v, fp8)) continue;
        ++mismatches;
        EXPECT_TRUE(got[i] == Encode(v * (1.0f - 1e-5f), fp8) || got[i] == Encode(v * (1.0f + 1e-5f), fp8))
            << Name(xdt) << " [" << i << "] y=" << ref[i] << " got " << int(got[i]);
      }
      EXPECT_LE(mismatches, n * c / 1000) << Name(xdt) << " " << Name(fp8);
      EXPECT_NEAR(ScalarOf(q.scale_meta()->amax), ref_amax, 1e-5 * ref_amax);
    }
  }
}

// One rounding: the bytes and amax of Quantize applied to the float32
// LayerNorm of the same values (for bfloat16 x: of x, weight and bias widened
// to float32, which is what the kernel computes with).
TEST(LayerNormFp8, EqualsQuantizeOfTheFloat32LayerNorm) {
  const int64_t c = 96;
  for (DType xdt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const Tensor x = RandomTensor({4, 33, c}, 31, xdt, -2.0, 6.0);
    const Tensor w = RandomTensor({c}, 32, xdt, 0.2, 2.0);
    const Tensor b = RandomTensor({c}, 33, xdt, -1.0, 1.0);
    const DType f32 = DType::kFloat32;
    const Tensor y32 = LayerNorm(x.To(f32), w.To(f32), b.To(f32));
    for (DType fp8 : {kE4M3, kE5M2}) {
      const Tensor q = LayerNormFp8(x, w, b, fp8, F32Scalar(91.0f));
      const Tensor want = Quantize(y32, fp8, 91.0f);
      EXPECT_EQ(Bytes(q), Bytes(want)) << Name(xdt) << " " << Name(fp8);
      EXPECT_EQ(ScalarOf(q.scale_meta()->amax), ScalarOf(want.scale_meta()->amax));
      if (xdt == DType::kBFloat16 && fp8 == kE4M3) {
        // The unfused path rounds to bfloat16 first; somewhere that moves a
        // value across an E4M3 boundary (else this test would not tell).
        const Tensor twice = Quantize(LayerNorm(x, w, b), fp8, 91.0f);
        EXPECT_NE(Bytes(q), Bytes(twice));
      }
    }
  }
  // Without weight and bias, and without bias.
  const Tensor x = RandomTensor({7, c}, 34, DType::kFloat32, -1.0, 1.0);
  const Tensor w = RandomTensor({c}, 35, DType::kFloat32, 0.5, 1.5);
  EXPECT_EQ(Bytes(LayerNormFp8(x, Tensor(), Tensor(), kE4M3, F32Scalar(8.0f))),
            Bytes(Quantize(LayerNorm(x, Tensor(), Tensor()), kE4M3, 8.0f)));
  EXPECT_EQ(Bytes(LayerNormFp8(x, w, Tensor(), kE4M3, F32Scalar(8.0f))),
            Bytes(Quantize(LayerNorm(x, w, Tensor()), kE4M3, 8.0f)));
}

// The scale in the metadata is a copy: changing the caller's scale tensor
// afterwards (delayed scaling updates it in place) leaves it alone.
TEST(LayerNormFp8, MetadataOwnsACopyOfTheScale) {
  const Tensor x = RandomTensor({5, 16}, 41, DType::kFloat32);
  Tensor scale = F32Scalar(4.0f);
  const Tensor q = LayerNormFp8(x, Tensor(), Tensor(), kE4M3, scale);
  scale.Fill_(9.0);
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale), 4.0f);
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale_inv), 0.25f);
}

// Backward is LayerNorm's: the same bits as LayerNorm's backward given the
// same output gradient (in x's dtype), whatever float dtype reaches the FP8
// output.
TEST(LayerNormFp8, BackwardEqualsLayerNormBackward) {
  const int64_t c = 48;
  for (DType xdt : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    for (DType gdt : {DType::kFloat32, DType::kBFloat16}) {
      const Tensor x0 = RandomTensor({6, 11, c}, 51, xdt, -2.0, 3.0);
      const Tensor w0 = RandomTensor({c}, 52, xdt, 0.5, 1.5), b0 = RandomTensor({c}, 53, xdt, -0.5, 0.5);
      const Tensor dy = RandomTensor({6, 11, c}, 54, gdt, -1.0, 1.0);
      Tensor xa = x0.detach().requires_grad_(), wa = w0.detach().requires_grad_(), ba = b0.detach().requires_grad_();
      Tensor xb = x0.detach().requires_grad_(), wb = w0.detach().requires_grad_(), bb = b0.detach().requires_grad_();
      // The gradient reaches the FP8 tensor through Dequantize (identity for gradients).
      const Tensor q = LayerNormFp8(xa, wa, ba, kE4M3, F32Scalar(16.0f));
      ASSERT_TRUE(q.requires_grad());
      Dequantize(q, gdt).Backward(dy);
      LayerNorm(xb, wb, bb).Backward(dy.To(xdt));
      EXPECT_EQ(xa.grad().dtype(), xdt);
      EXPECT_EQ(xa.grad().ToDoubles(), xb.grad().ToDoubles()) << Name(xdt) << " dy " << Name(gdt);
      EXPECT_EQ(wa.grad().ToDoubles(), wb.grad().ToDoubles()) << Name(xdt) << " dy " << Name(gdt);
      EXPECT_EQ(ba.grad().ToDoubles(), bb.grad().ToDoubles()) << Name(xdt) << " dy " << Name(gdt);
    }
  }
}

// The analytic gradients (float64) against central differences of the
// float64 reference LayerNorm contracted with dy: the straight-through
// gradient of the quantized output is the LayerNorm's own.
TEST(LayerNormFp8, GradientsMatchFiniteDifferencesOfTheReference) {
  const int64_t n = 3, c = 7;
  const double eps = 1e-5, h = 1e-6;
  const Tensor x0 = RandomTensor({n, c}, 61, DType::kFloat64, -1.0, 2.0);
  const Tensor w0 = RandomTensor({c}, 62, DType::kFloat64, 0.5, 1.5), b0 = RandomTensor({c}, 63, DType::kFloat64);
  const std::vector<double> dy = ::octet::testing::RandomValues(n * c, 64);
  Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
  Dequantize(LayerNormFp8(x, w, b, kE4M3, F32Scalar(1.0f), eps), DType::kFloat64)
      .Backward(FromVector(dy, {n, c}).To(DType::kFloat64));
  std::vector<double> xv = x0.ToDoubles(), wv = w0.ToDoubles(), bv = b0.ToDoubles();
  auto objective = [&] {
    const std::vector<double> y = RefLayerNorm(xv, wv, bv, c, eps);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * dy[i];
    return s;
  };
  auto check = [&](std::vector<double>& v, const Tensor& grad, const char* what) {
    const std::vector<double> g = grad.ToDoubles();
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + h;
      const double up = objective();
      v[i] = keep - h;
      const double down = objective();
      v[i] = keep;
      EXPECT_NEAR(g[i], (up - down) / (2 * h), 1e-6 * std::max(1.0, std::abs(g[i]))) << what << "[" << i << "]";
    }
  };
  check(xv, x.grad(), "dx");
  check(wv, w.grad(), "dweight");
  check(bv, b.grad(), "dbias");
}

TEST(LayerNormFp8, EmptyRowsGiveScaleInvAndZeroAmax) {
  const Tensor q = LayerNormFp8(Empty({0, 8}), Tensor(), Tensor(), kE5M2, F32Scalar(2.0f));
  EXPECT_EQ(q.shape(), (Shape{0, 8}));
  EXPECT_EQ(ScalarOf(q.scale_meta()->scale_inv), 0.5f);
  EXPECT_EQ(ScalarOf(q.scale_meta()->amax), 0.0f);
}

TEST(LayerNormFp8, BadCallsNameTheProblem) {
  const Tensor x = RandomTensor({4, 8}, 71, DType::kFloat32);
  EXPECT_THAT(ErrorOf([&] { LayerNormFp8(x, Tensor(), Tensor(), DType::kBFloat16, F32Scalar(1.0f)); }),
              HasSubstr("is not an FP8 dtype"));
  EXPECT_THAT(ErrorOf([&] { LayerNormFp8(x, Tensor(), Tensor(), kE4M3, Full({2}, 1.0)); }),
              HasSubstr("scale must be a float32 tensor with one element"));
  EXPECT_THAT(ErrorOf([&] { LayerNormFp8(x, Tensor(), Tensor(), kE4M3, Tensor()); }), HasSubstr("scale"));
  EXPECT_THAT(ErrorOf([&] { LayerNormFp8(Quantize(x, kE4M3, 1.0f), Tensor(), Tensor(), kE4M3, F32Scalar(1.0f)); }),
              HasSubstr("layer_norm_fp8"));
  EXPECT_THAT(ErrorOf([&] { LayerNormFp8(x, Ones({7}), Tensor(), kE4M3, F32Scalar(1.0f)); }),
              HasSubstr("must have shape [C] = [8]"));
}

// ---- the byte transpose of an FP8 matrix --------------------------------------------------

TEST(TransposeFp8, MovesTheBytesAndKeepsTheScale) {
  // Sizes around the 16x16 register tiles and the 64-row bands.
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 1}, {16, 16}, {37, 50}, {130, 64}, {64, 129}, {3, 200}};
  for (const auto& [R, C] : sizes) {
    const Tensor q = Quantize(RandomTensor({R, C}, 81 + R, DType::kFloat32, -300, 300), kE4M3, 1.0f);
    const Tensor qt = TransposeFp8(q);
    ASSERT_EQ(qt.shape(), (Shape{C, R}));
    ASSERT_TRUE(qt.is_contiguous());
    const std::vector<uint8_t> a = Bytes(q), t = Bytes(qt);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(t[c * R + r], a[r * C + c]) << R << "x" << C << " at " << r << "," << c;
    ASSERT_NE(qt.scale_meta(), nullptr);
    EXPECT_EQ(qt.scale_meta()->scale_inv.storage(), q.scale_meta()->scale_inv.storage());
    // A strided view is read as it is: the transpose of q.T() is q.
    EXPECT_EQ(Bytes(TransposeFp8(q.T())), a);
  }
  const Tensor x = RandomTensor({4, 8}, 91, DType::kFloat32);
  EXPECT_THAT(ErrorOf([&] { TransposeFp8(x); }), HasSubstr("expects an FP8 tensor"));
  EXPECT_THAT(ErrorOf([&] { TransposeFp8(Quantize(RandomTensor({2, 3, 4}, 1, DType::kFloat32), kE4M3, 1.0f)); }),
              HasSubstr("transpose_fp8"));
}

struct ForcedTransposedCopies {
  explicit ForcedTransposedCopies(bool v) { SetFp8TransposedCopiesForTesting(v); }
  ~ForcedTransposedCopies() { SetFp8TransposedCopiesForTesting(std::nullopt); }
};

// An already-FP8 matrix gets the column-wise copy QuantizeForGemm would have
// made (the same bytes, as the byte transpose of its own), only where FP8
// GEMMs want one, and the GEMMs read it: the same product either way.
TEST(WithColumnwiseForGemm, GivesTheCopyQuantizeForGemmMakes) {
  const Tensor x = RandomTensor({40, 24}, 95, DType::kBFloat16, -4, 4);
  const Tensor scale = F32Scalar(32.0f);
  const Tensor q = Quantize(x, kE4M3, scale);
  {
    ForcedTransposedCopies off(false);
    const Tensor same = WithColumnwiseForGemm(q);
    EXPECT_FALSE(same.scale_meta()->columnwise.defined());
  }
  ForcedTransposedCopies on(true);
  const Tensor with = WithColumnwiseForGemm(q);
  const Tensor want = QuantizeForGemm(x, kE4M3, scale, /*columnwise=*/true);
  ASSERT_TRUE(with.scale_meta()->columnwise.defined());
  EXPECT_FALSE(q.scale_meta()->columnwise.defined()) << "q's own metadata must not change";
  EXPECT_EQ(Bytes(with), Bytes(want));
  EXPECT_EQ(Bytes(with.scale_meta()->columnwise), Bytes(want.scale_meta()->columnwise));
  EXPECT_EQ(ForTransposedUse(with).storage(), with.scale_meta()->columnwise.storage());
  const Tensor w = Quantize(RandomTensor({16, 24}, 96, DType::kFloat32), kE4M3, 8.0f);
  // wgrad-like product Xᵀ·(something): q.T() read through the copy.
  const Tensor dy = Quantize(RandomTensor({40, 16}, 97, DType::kFloat32), kE5M2, 64.0f);
  EXPECT_EQ(ScaledMatmul(dy.T(), with, DType::kFloat32).ToDoubles(),
            ScaledMatmul(dy.T(), want, DType::kFloat32).ToDoubles());
  EXPECT_EQ(ScaledMatmul(with, w.T(), DType::kFloat32).ToDoubles(),
            ScaledMatmul(want, w.T(), DType::kFloat32).ToDoubles());
  EXPECT_THAT(ErrorOf([&] { WithColumnwiseForGemm(x); }), HasSubstr("expects an FP8 tensor with scale metadata"));
}

}  // namespace
}  // namespace octet
