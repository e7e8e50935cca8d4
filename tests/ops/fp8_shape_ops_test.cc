// FP8 tensors through Cat, Stack, CopyFrom_ and Fill_ keep their values, not
// their codes: equal scales are joined or copied exactly, different scales
// are an error that names both (NOTE [fp8 cat], NOTE [fp8 copies] in
// ops/shape.cc), and Fill_ stores the code of value * scale.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/shape.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::testing::HasSubstr;

constexpr DType kE4 = DType::kFloat8E4M3;
constexpr DType kE5 = DType::kFloat8E5M2;

Tensor V(const std::vector<float>& v) { return FromVector(v, {static_cast<int64_t>(v.size())}); }

TEST(Fp8Cat, EqualScalesKeepTheValuesAndTheScale) {
  const Tensor a = Quantize(V({1, 2}), kE4, 4.0f);
  const Tensor b = Quantize(V({3, -1}), kE4, 4.0f);  // another ScaleMeta, the same value
  const Tensor c = Cat({a, b}, 0);
  EXPECT_TRUE(AllClose(Dequantize(c), {1, 2, 3, -1}, 0, 0));
  EXPECT_EQ(ScaleInvValue(c), 0.25f);
  ASSERT_NE(c.scale_meta(), nullptr);
  EXPECT_EQ(c.scale_meta()->amax.Item(), 3.0);  // the largest of the inputs' amax

  const Tensor s = Stack({a, b}, 0);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_TRUE(AllClose(Dequantize(s).Reshape({4}), {1, 2, 3, -1}, 0, 0));
  EXPECT_EQ(ScaleInvValue(s), 0.25f);
}

TEST(Fp8Cat, PiecesOfOneTensorShareItsMetadata) {
  const Tensor q = Quantize(V({1, 2, 3, 4}), kE5, 8.0f);
  const TensorList parts = Chunk(q, 2, 0);
  const Tensor c = Cat({parts[1], parts[0]}, 0);
  EXPECT_EQ(c.scale_meta(), q.scale_meta());
  EXPECT_TRUE(AllClose(Dequantize(c), {3, 4, 1, 2}, 0, 0));
}

TEST(Fp8Cat, UnscaledFp8StaysUnscaled) {
  const Tensor a = V({1, 2}).To(kE4);  // scale 1
  const Tensor b = Ones({2}, {.dtype = kE4});  // no metadata at all: scale 1 as well
  const Tensor c = Cat({a, b}, 0);
  EXPECT_TRUE(AllClose(Dequantize(c), {1, 2, 1, 1}, 0, 0));
  EXPECT_EQ(ScaleInvValue(c), 1.0f);
}

TEST(Fp8Cat, DifferentScalesAreAnErrorNamingBoth) {
  // Was [4 8 1 2]: the codes joined under no scale at all.
  const Tensor a = Quantize(V({1, 2}), kE4, 4.0f);
  const Tensor b = Quantize(V({1, 2}), kE4, 1.0f);
  const Tensor c = Quantize(V({1, 2}), kE4, 4.0f);
  const std::string cat = ErrorOf([&] { Cat({a, c, b}, 0); });
  EXPECT_THAT(cat, HasSubstr("cat: FP8 tensors with different scales"));
  EXPECT_THAT(cat, HasSubstr("tensors[0] fp8_e4m3[2] has scale_inv 0.25"));
  EXPECT_THAT(cat, HasSubstr("tensors[2] fp8_e4m3[2] has scale_inv 1"));
  EXPECT_THAT(cat, HasSubstr("Dequantize"));
  const std::string stack = ErrorOf([&] { Stack({a, b}, 0); });
  EXPECT_THAT(stack, HasSubstr("stack: FP8 tensors with different scales"));
  EXPECT_THAT(stack, HasSubstr("tensors[1]"));
}

TEST(Fp8CopyFrom, EqualScalesCopyTheCodes) {
  Tensor a = Quantize(V({1, 2}), kE4, 4.0f);
  a.CopyFrom_(Quantize(V({3, 0.5f}), kE4, 4.0f));
  EXPECT_TRUE(AllClose(Dequantize(a), {3, 0.5}, 0, 0));
  // Between the two formats: the codes convert, the shared scale stays.
  Tensor e5 = Quantize(V({1, 1}), kE5, 4.0f);
  e5.CopyFrom_(Quantize(V({2, -4}), kE4, 4.0f));
  EXPECT_TRUE(AllClose(Dequantize(e5), {2, -4}, 0, 0));
  // Clone and To keep copying raw codes under the source's own scale.
  EXPECT_TRUE(AllClose(Dequantize(a.Clone()), {3, 0.5}, 0, 0));
  EXPECT_TRUE(AllClose(a.To(DType::kFloat32), {3, 0.5}, 0, 0));
}

TEST(Fp8CopyFrom, DifferentScalesAreAnError) {
  // Was 0.75 for a 3: the scale-1 codes read under scale 4.
  Tensor a = Quantize(V({1, 2}), kE4, 4.0f);
  const Tensor b = Quantize(V({3, 3}), kE4, 1.0f);
  const std::string msg = ErrorOf([&] { a.CopyFrom_(b); });
  EXPECT_THAT(msg, HasSubstr("copy_: src fp8_e4m3[2] has scale_inv 1 but dst fp8_e4m3[2] has scale_inv 0.25"));
  EXPECT_THAT(msg, HasSubstr("Dequantize src, or Quantize it with dst's scale"));
  EXPECT_TRUE(AllClose(Dequantize(a), {1, 2}, 0, 0));  // untouched
}

TEST(Fp8CopyFrom, PlainToScaledFp8AndBackNeedScaleOne) {
  Tensor scaled = Quantize(V({1, 2}), kE4, 4.0f);
  EXPECT_THAT(ErrorOf([&] { scaled.CopyFrom_(V({3, 3})); }),
              HasSubstr("copy_: dst fp8_e4m3[2] has scale_inv 0.25 but src float32[2] is not FP8"));
  Tensor f = Zeros({2});
  EXPECT_THAT(ErrorOf([&] { f.CopyFrom_(scaled); }),
              HasSubstr("copy_: src fp8_e4m3[2] has scale_inv 0.25 but dst float32[2] is not FP8"));
  // With scale 1 (or none) the raw conversion is the value: allowed, as before.
  Tensor unscaled = Zeros({2}, {.dtype = kE4});
  unscaled.CopyFrom_(V({3, -0.5f}));
  EXPECT_TRUE(AllClose(Dequantize(unscaled), {3, -0.5}, 0, 0));
  f.CopyFrom_(unscaled);
  EXPECT_TRUE(AllClose(f, {3, -0.5}, 0, 0));
}

TEST(Fp8Fill, StoresTheCodeOfValueTimesScale) {
  // Was 0.25: the code of 1 read under scale_inv 0.25.
  Tensor a = Quantize(V({1, 2}), kE4, 4.0f);
  a.Fill_(1.0);
  EXPECT_TRUE(AllClose(Dequantize(a), {1, 1}, 0, 0));
  EXPECT_EQ(a.At({0}), 1.0);
  // Saturates to the largest finite code, as Quantize does: 448 for E4M3.
  a.Fill_(1e6);
  EXPECT_TRUE(AllClose(Dequantize(a), {448 * 0.25, 448 * 0.25}, 0, 0));
  // Without metadata the scale is 1.
  Tensor u = Zeros({2}, {.dtype = kE5});
  u.Fill_(3.0);
  EXPECT_TRUE(AllClose(Dequantize(u), {3, 3}, 0, 0));
}

}  // namespace
}  // namespace octet
