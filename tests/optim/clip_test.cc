// Gradient clipping by global norm: the norm value, scaling, skipped
// parameters, bf16 gradients, the non-finite case, and ScaleGrads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include <octet/core/host_reads.h>
#include <octet/optim/clip.h>
#include "tests/test_util.h"

namespace octet::optim {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomValues;

Tensor WithGrad(const std::vector<double>& g, const Shape& shape, DType dtype = DType::kFloat32) {
  Tensor p = Zeros(shape, {.dtype = dtype, .requires_grad = true});
  p.set_grad(FromVector(g, shape, {.dtype = dtype}));
  return p;
}

TEST(ClipGradNorm, ReturnsTheGlobalNormAndScalesAboveMax) {
  // Norm of (3, 4) and (12) = 13.
  Tensor a = WithGrad({3.0, 4.0}, {2}), b = WithGrad({12.0}, {1});
  Tensor no_grad = Zeros({3}, {.requires_grad = true});  // skipped
  const double norm = ClipGradNorm({{"a", a}, {"b", b}, {"c", no_grad}}, 1.0);
  EXPECT_DOUBLE_EQ(norm, 13.0);
  const double c = 1.0 / (13.0 + 1e-6);
  EXPECT_TRUE(AllClose(a.grad(), {3 * c, 4 * c}, 1e-7, 0));
  EXPECT_TRUE(AllClose(b.grad(), {12 * c}, 1e-7, 0));
  EXPECT_NEAR(GradNorm({{"a", a}, {"b", b}}), 1.0, 1e-6);
}

TEST(ScaleGrads, MultipliesEachDefinedGradientInItsDtype) {
  Tensor a = WithGrad({3.0, -0.5}, {2});
  Tensor b = WithGrad({1.0, 3.0}, {2}, DType::kBFloat16);
  Tensor d = WithGrad({0.1}, {1}, DType::kFloat64);
  Tensor none = Zeros({3}, {.requires_grad = true});  // no gradient: skipped
  ScaleGrads({{"a", a}, {"b", b}, {"d", d}, {"none", none}, {"undefined", Tensor()}}, 0.1);
  // f32: the product of 3 and 0.1f rounded once.
  EXPECT_EQ(a.grad().ToFloats(), (std::vector<float>{3.0f * 0.1f, -0.5f * 0.1f}));
  // bf16: computed in f32, rounded to bf16 (0.3f = 0x3E99999A -> 0x3E9A = 0.30078125).
  EXPECT_EQ(b.grad().dtype(), DType::kBFloat16);
  EXPECT_EQ(b.grad().ToDoubles(), (std::vector<double>{0.10009765625, 0.30078125}));
  EXPECT_EQ(d.grad().ToDoubles(), (std::vector<double>{0.1 * 0.1}));
  EXPECT_FALSE(none.grad().defined());
}

TEST(ClipGradNorm, LeavesGradientsBelowMaxUntouched) {
  Tensor a = WithGrad({0.375, 0.5}, {2});
  EXPECT_DOUBLE_EQ(ClipGradNorm(TensorList{a}, 1.0), 0.625);
  EXPECT_TRUE(AllClose(a.grad(), {0.375, 0.5}, 0, 0));
}

TEST(ClipGradNorm, LargeTensorMatchesFloat64Reference) {
  // Several accumulation blocks; f64 reference.
  const std::vector<double> g = RandomValues(100003, 3);
  Tensor a = WithGrad(g, {100003}, DType::kFloat64);
  double ref = 0;
  for (double x : g) ref += x * x;
  ref = std::sqrt(ref);
  EXPECT_NEAR(ClipGradNorm({{"a", a}}, 2.0), ref, 1e-10 * ref);
  std::vector<double> scaled = g;
  for (double& x : scaled) x *= 2.0 / (ref + 1e-6);
  EXPECT_TRUE(AllClose(a.grad(), scaled, 1e-13, 0));
}

TEST(ClipGradNorm, Bf16Gradients) {
  Tensor a = WithGrad({3.0, 4.0}, {2}, DType::kBFloat16);
  EXPECT_DOUBLE_EQ(ClipGradNorm({{"a", a}}, 2.5), 5.0);
  EXPECT_EQ(a.grad().dtype(), DType::kBFloat16);
  EXPECT_TRUE(AllClose(a.grad(), {1.5, 2.0}, 1e-2, 0));  // bf16 rounding of 1.5, 2.0 (exact here)
}

TEST(ClipGradNorm, Float16Gradients) {
  Tensor a = WithGrad({3.0, 4.0}, {2}, DType::kFloat16), b = WithGrad({0.0, -12.0}, {2}, DType::kFloat16);
  EXPECT_DOUBLE_EQ(ClipGradNorm({{"a", a}, {"b", b}}, 6.5), 13.0);
  EXPECT_EQ(a.grad().dtype(), DType::kFloat16);
  // 3, 4 and -12 times 6.5 / (13 + 1e-6) in f32, rounded to f16: 1.5, 2, -6.
  EXPECT_EQ(a.grad().ToDoubles(), (std::vector<double>{1.5, 2.0}));
  EXPECT_EQ(b.grad().ToDoubles(), (std::vector<double>{0.0, -6.0}));
}

TEST(ClipGradNorm, NonFiniteNormIsReturnedAndGradientsUntouched) {
  Tensor a = WithGrad({1.0, std::numeric_limits<double>::infinity()}, {2}), b = WithGrad({100.0}, {1});
  const double norm = ClipGradNorm({{"a", a}, {"b", b}}, 1.0);
  EXPECT_TRUE(std::isinf(norm));
  EXPECT_TRUE(AllClose(b.grad(), {100.0}, 0, 0));
  Tensor n = WithGrad({std::nan("")}, {1});
  EXPECT_TRUE(std::isnan(ClipGradNorm({{"n", n}, {"b", b}}, 1.0)));
  const std::string err = ErrorOf([&] { ClipGradNorm({{"a", a}, {"b", b}}, 1.0, /*error_if_nonfinite=*/true); });
  EXPECT_NE(err.find("total gradient norm is inf"), std::string::npos) << err;
  EXPECT_NE(err.find("non-finite gradients in 'a'"), std::string::npos) << err;
}

TEST(ClipGradNorm, RejectsBadArguments) {
  Tensor a = WithGrad({1.0}, {1});
  EXPECT_NE(ErrorOf([&] { ClipGradNorm({{"a", a}}, 0.0); }).find("max_norm must be > 0"), std::string::npos);
}

// NOTE [clipping without a host read]: the device-side clipping makes the
// same bits as ClipGradNorm, clipping or not, for f32, f64 and bf16
// gradients; a non-finite norm leaves the gradients alone; no host read.
TEST(ClipGradNormTensor, SameBitsAsClipGradNormAndNoHostRead) {
  for (double max_norm : {0.5, 1e3}) {
    NamedTensors a, b;
    const DType dtypes[3] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16};
    for (int i = 0; i < 3; ++i) {
      const std::vector<double> g = RandomValues(37 + i, 80 + i, -1.0, 1.0);
      a.emplace_back("p" + std::to_string(i), WithGrad(g, {37 + i}, dtypes[i]));
      b.emplace_back("p" + std::to_string(i), WithGrad(g, {37 + i}, dtypes[i]));
    }
    const double want = ClipGradNorm(a, max_norm);
    const int64_t reads = HostReadCount();
    const Tensor got = ClipGradNormTensor(b, max_norm);
    EXPECT_EQ(HostReadCount(), reads);
    EXPECT_EQ(got.dtype(), DType::kFloat64);
    EXPECT_EQ(got.Item(), want);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b[i].second.grad().ToDoubles(), a[i].second.grad().ToDoubles()) << i;
  }
  Tensor bad = WithGrad({1.0, std::numeric_limits<double>::infinity()}, {2});
  EXPECT_TRUE(std::isinf(ClipGradNormTensor({{"bad", bad}}, 1.0).Item()));
  EXPECT_EQ(bad.grad().ToDoubles()[0], 1.0);
  EXPECT_THAT(ErrorOf([&] { ClipGradNormTensor({{"bad", bad}}, 0.0); }),
              ::testing::HasSubstr("max_norm must be > 0"));
}

}  // namespace
}  // namespace octet::optim
