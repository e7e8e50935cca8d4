// Tensor factories and conversions at their limits: element counts and byte
// sizes past int64, negative dims, float -> integer conversions of values the
// integer dtype cannot hold, -> bool, and the small argument checks (Arange,
// ToString, size on a rank-0 tensor). Each must be an octet::Error naming the
// call, or a defined value, never a wrapped size or undefined behaviour.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include <octet/core/dtype_traits.h>
#include <octet/core/tensor.h>
#include <octet/ops/shape.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::MessageOf;
using ::testing::HasSubstr;

constexpr int64_t k2e40 = int64_t{1} << 40;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- element count and byte size overflow -------------------------------------

TEST(TensorLimits, NumelOverflowThrowsAndAZeroDimWins) {
  EXPECT_THAT(MessageOf<Error>([] { Numel({k2e40, k2e40}); }),
              HasSubstr("shape [1099511627776, 1099511627776] has more elements than int64 can count"));
  int64_t n = -1;
  EXPECT_FALSE(TryNumel({k2e40, k2e40}, &n));
  EXPECT_TRUE(TryNumel({k2e40, k2e40, 0}, &n));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(Numel({k2e40, k2e40, 0}), 0);
  EXPECT_EQ(Numel({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
}

TEST(TensorLimits, EmptyRejectsElementCountsAndByteSizesPastInt64) {
  EXPECT_THAT(MessageOf<Error>([] { Empty({k2e40, k2e40}); }),
              HasSubstr("Empty: shape [1099511627776, 1099511627776] of float32 has more elements than int64"));
  // 2^62 elements fit int64, their 2^65 bytes do not (this wrapped to nbytes() == 0 before).
  EXPECT_THAT(MessageOf<Error>([] { Empty({int64_t{1} << 31, int64_t{1} << 31}, {.dtype = DType::kFloat64}); }),
              HasSubstr("Empty: shape [2147483648, 2147483648] of float64 (4611686018427387904 elements of 8 "
                        "bytes) has a byte size past int64"));
  EXPECT_THAT(MessageOf<Error>([] { Zeros({int64_t{1} << 62}); }),
              HasSubstr("Zeros: shape [4611686018427387904] of float32"));
  EXPECT_THAT(MessageOf<Error>([] { Ones({std::numeric_limits<int64_t>::max()}, {.dtype = DType::kInt64}); }),
              HasSubstr("Ones: shape [9223372036854775807] of int64"));
  EXPECT_THAT(MessageOf<Error>([] { Full({k2e40, k2e40}, 1.0); }), HasSubstr("Full: shape"));
  // A zero dim makes the tensor empty whatever follows, as long as the strides fit.
  EXPECT_EQ(Empty({k2e40, k2e40, 0}).numel(), 0);
  EXPECT_THAT(MessageOf<Error>([] { Empty({0, k2e40, k2e40}); }),
              HasSubstr("shape [0, 1099511627776, 1099511627776]: its strides overflow int64"));
}

TEST(TensorLimits, ViewsRejectShapesPastInt64) {
  EXPECT_THAT(MessageOf<Error>([] { Zeros({1}).Expand({k2e40, k2e40}); }),
              HasSubstr("expand: shape [1099511627776, 1099511627776] has more elements than int64 can count"));
  EXPECT_THAT(MessageOf<Error>([] { Zeros({4}).View({int64_t{1} << 32, int64_t{1} << 32, 4}); }),
              HasSubstr("view: shape [4294967296, 4294967296, 4] is invalid for 4 elements"));
  EXPECT_THAT(MessageOf<Error>([] { Zeros({4}).Reshape({int64_t{1} << 62, 4, -1}); }),
              HasSubstr("reshape: shape [4611686018427387904, 4, -1] is invalid for 4 elements"));
  EXPECT_THAT(MessageOf<Error>([] { Zeros({0}).View({0, k2e40, k2e40}); }),
              HasSubstr("shape [0, 1099511627776, 1099511627776]: its strides overflow int64"));
  EXPECT_EQ(Zeros({0}).View({k2e40, k2e40, 0}).numel(), 0);
  EXPECT_THAT(MessageOf<Error>([] { Empty({k2e40, k2e40, 0}).Flatten(0, 1); }),
              HasSubstr("flatten: dims 0 to 1 of float32[1099511627776, 1099511627776, 0] have more elements"));
}

TEST(TensorLimits, FromBlobRejectsNegativeDimsAndOverflow) {
  float x[2] = {1, 2};
  EXPECT_THAT(MessageOf<Error>([&] { FromBlob(x, {-2}, DType::kFloat32); }),
              HasSubstr("FromBlob: negative dimension in shape [-2]"));
  EXPECT_THAT(MessageOf<Error>([&] { FromBlob(x, {k2e40, k2e40}, DType::kFloat32); }),
              HasSubstr("FromBlob: shape [1099511627776, 1099511627776] of float32 has more elements"));
  EXPECT_THAT(MessageOf<Error>([] { FromVector(std::vector<float>{1, 2}, {-1, -2}); }),
              HasSubstr("FromVector: negative dimension in shape [-1, -2]"));
}

// ---- float -> integer ------------------------------------------------------------

template <typename T>
T Opaque(T v) {
  volatile T x = v;
  return x;
}

TEST(TensorLimits, ToIntegerRejectsNaNInfinityAndOutOfRangeValues) {
  const Tensor nan = FromVector(std::vector<float>{1.5f, NAN, 1e30f}, {3});
  EXPECT_THAT(MessageOf<Error>([&] { nan.To(DType::kInt32); }),
              HasSubstr("To(int32): float32[3] holds nan at index [1], which int32 cannot represent"));
  const Tensor big = FromVector(std::vector<double>{-2.5, 3e9}, {1, 2}, {.dtype = DType::kFloat64});
  EXPECT_THAT(MessageOf<Error>([&] { big.To(DType::kInt32); }),
              HasSubstr("To(int32): float64[1, 2] holds 3e+09 at index [0, 1]"));
  EXPECT_THAT(MessageOf<Error>([] { FromVector(std::vector<float>{-1, 0}, {2}).To(DType::kUInt8); }),
              HasSubstr("To(uint8): float32[2] holds -1 at index [0], which uint8 cannot represent (finite values "
                        "whose integer part lies in [0, 255])"));
  EXPECT_THAT(MessageOf<Error>([] { Full({2}, kInf).To(DType::kInt64); }), HasSubstr("holds inf at index [0]"));
  // The index names the element in the tensor's own order, through strides.
  const Tensor t = FromVector(std::vector<float>{0, 1, 2, 1e20f, 4, 5}, {2, 3}).T();
  EXPECT_THAT(MessageOf<Error>([&] { t.To(DType::kInt64); }), HasSubstr("holds 1e+20 at index [0, 1]"));
  // FP8 dequantizes first; its value is what is checked.
  const Tensor fp8 = FromVector(std::vector<float>{448}, {1}).To(DType::kFloat8E4M3);
  EXPECT_THAT(MessageOf<Error>([&] { fp8.To(DType::kUInt8); }), HasSubstr("To(uint8): float32[1] holds 448"));
}

TEST(TensorLimits, ToIntegerTruncatesValuesInRange) {
  const Tensor x = FromVector(std::vector<double>{-2147483648.9, 2147483647.9, -2.7, 2.7, -0.5},
                              {5}, {.dtype = DType::kFloat64});
  EXPECT_EQ(x.To(DType::kInt32).ToDoubles(), (std::vector<double>{-2147483648, 2147483647, -2, 2, 0}));
  EXPECT_EQ(FromVector(std::vector<float>{-0.9f, 255.9f}, {2}).To(DType::kUInt8).ToDoubles(),
            (std::vector<double>{0, 255}));
  EXPECT_EQ(FromVector(std::vector<double>{-0x1p63}, {1}, {.dtype = DType::kFloat64}).To(DType::kInt64).Item(),
            -0x1p63);
  EXPECT_THAT(MessageOf<Error>([] { FromVector(std::vector<double>{0x1p63}, {1}).To(DType::kInt64); }),
              HasSubstr("holds 9.22337e+18"));
}

TEST(TensorLimits, FromVectorIntoAnIntegerDtypeChecksTheValues) {
  EXPECT_THAT(MessageOf<Error>([] { FromVector(std::vector<double>{1, NAN}, {2}, {.dtype = DType::kInt32}); }),
              HasSubstr("FromVector: float64[2] holds nan at index [1], which int32 cannot represent"));
  EXPECT_EQ(FromVector(std::vector<double>{1.9, -3}, {2}, {.dtype = DType::kInt64}).ToDoubles(),
            (std::vector<double>{1, -3}));
}

TEST(TensorLimits, FullRejectsValuesTheDtypeCannotHold) {
  EXPECT_THAT(MessageOf<Error>([] { Full({2}, 300, {.dtype = DType::kUInt8}); }),
              HasSubstr("Full: value 300 cannot be represented in uint8 (finite values whose integer part lies in "
                        "[0, 255])"));
  EXPECT_THAT(MessageOf<Error>([] { Full({2}, kNaN, {.dtype = DType::kInt32}); }),
              HasSubstr("Full: value nan cannot be represented in int32"));
  EXPECT_THAT(MessageOf<Error>([] { Scalar(-kInf, {.dtype = DType::kInt64}); }),
              HasSubstr("Scalar: value -inf cannot be represented in int64"));
  EXPECT_EQ(Full({1}, 255.5, {.dtype = DType::kUInt8}).Item(), 255);
  EXPECT_EQ(Full({1}, -2147483648.0, {.dtype = DType::kInt32}).Item(), -2147483648.0);
  EXPECT_EQ(Full({1}, 2.5, {.dtype = DType::kBool}).Item(), 1);
  EXPECT_EQ(Full({1}, kNaN, {.dtype = DType::kBool}).Item(), 1);
}

TEST(TensorLimits, BoolIsNonzeroInTheSourceType) {
  // 1e-300 went through float (0) and gave false.
  EXPECT_EQ(Full({1}, 1e-300, {.dtype = DType::kFloat64}).To(DType::kBool).Item(), 1);
  EXPECT_EQ(Full({1}, 1e-300, {.dtype = DType::kBool}).Item(), 1);
  EXPECT_EQ(Full({1}, 0.0, {.dtype = DType::kFloat64}).To(DType::kBool).Item(), 0);
  EXPECT_EQ(Full({1}, -0.0, {.dtype = DType::kFloat64}).To(DType::kBool).Item(), 0);
  EXPECT_EQ(ConvertElement<bool>(int64_t{1} << 62), true);
  EXPECT_EQ(ConvertElement<bool>(bfloat16(0.0f)), false);
}

TEST(TensorLimits, ElementConversionSaturatesFloatToInteger) {
  // NOTE [float to integer]: the element-level floor every kernel gets. Opaque: a
  // constant the compiler folds would hide what the code does at run time.
  EXPECT_EQ(ConvertElement<int32_t>(Opaque(kNaN)), 0);
  EXPECT_EQ(ConvertElement<int32_t>(Opaque(kInf)), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(ConvertElement<int32_t>(Opaque(-1e30f)), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(ConvertElement<int32_t>(Opaque(-2147483648.0f)), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(ConvertElement<int32_t>(Opaque(-2147483648.9)), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(ConvertElement<int32_t>(Opaque(2147483647.9)), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(ConvertElement<int64_t>(Opaque(1e19f)), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ConvertElement<int64_t>(Opaque(-0x1p63)), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ConvertElement<int64_t>(Opaque(0x1p62)), int64_t{1} << 62);
  EXPECT_EQ(ConvertElement<uint8_t>(Opaque(300.0)), 255);
  EXPECT_EQ(ConvertElement<uint8_t>(Opaque(-0.5f)), 0);
  EXPECT_EQ(ConvertElement<uint8_t>(Opaque(-1.0f)), 0);
  EXPECT_EQ(ConvertElement<int32_t>(Opaque(-2.7)), -2);
  EXPECT_EQ(ConvertElement<int32_t>(float16(Opaque(-kInf))), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(ConvertElement<uint8_t>(bfloat16(Opaque(1e10f))), 255);
  EXPECT_EQ(ConvertElement<int32_t>(bfloat16(Opaque(-7.5f))), -7);
}

// ---- small argument checks -----------------------------------------------------------

TEST(TensorLimits, ArangeRejectsANegativeCount) {
  EXPECT_THAT(MessageOf<Error>([] { Arange(-3); }), HasSubstr("Arange: n must be >= 0, got -3"));
  EXPECT_THAT(MessageOf<Error>([] { Arange(int64_t{1} << 62); }), HasSubstr("Arange: shape [4611686018427387904]"));
  EXPECT_EQ(Arange(0).numel(), 0);
}

TEST(TensorLimits, ToStringRejectsANegativeCount) {
  EXPECT_THAT(MessageOf<Error>([] { Zeros({3}).ToString(-5); }),
              HasSubstr("ToString: max_elements must be >= 0, got -5"));
  EXPECT_THAT(Zeros({3}).ToString(0), HasSubstr("... (3 more)"));
}

TEST(TensorLimits, SizeAndStrideOfARankZeroTensorThrow) {
  EXPECT_THAT(MessageOf<Error>([] { Scalar(1).size(0); }),
              HasSubstr("size: dim 0 given for a rank-0 tensor float32[], which has no dims"));
  EXPECT_THAT(MessageOf<Error>([] { Scalar(1).stride(-1); }), HasSubstr("stride: dim -1 given for a rank-0"));
  EXPECT_EQ(Zeros({2, 3}).size(-1), 3);
}

}  // namespace
}  // namespace octet
