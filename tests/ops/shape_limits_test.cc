// Shape and reduction ops at their limits: rank-0 inputs (an op that indexes a
// dim throws, one PyTorch defines on a scalar returns its value) and index
// arguments near int64's limits (checked without overflowing).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include <octet/core/random.h>
#include <octet/ops/reduce.h>
#include <octet/ops/shape.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::MessageOf;
using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

Tensor R(const Shape& shape) { return FromVector(std::vector<double>{0, 1, 2, 3}, shape); }

// ---- rank-0 inputs -----------------------------------------------------------------

TEST(ShapeLimits, IndexingOpsRejectARankZeroTensor) {
  EXPECT_THAT(MessageOf<Error>([] { Scalar(1).Select(0, 0); }),
              HasSubstr("select: cannot select from a rank-0 tensor float32[]"));
  EXPECT_THAT(MessageOf<Error>([] { Scalar(1).Narrow(0, 0, 1); }),
              HasSubstr("narrow: cannot narrow a rank-0 tensor float32[]"));
  EXPECT_THAT(MessageOf<Error>([] { Scalar(1).Slice(-1, 0, 1); }),
              HasSubstr("slice: cannot slice a rank-0 tensor float32[]"));
  EXPECT_THAT(MessageOf<Error>([] { Split(Scalar(1), {1}, 0); }),
              HasSubstr("split: cannot split a rank-0 tensor float32[]"));
  EXPECT_THAT(MessageOf<Error>([] { Chunk(Scalar(1), 1, 0); }),
              HasSubstr("chunk: cannot chunk a rank-0 tensor float32[]"));
  EXPECT_THAT(MessageOf<Error>([] { Cat({Scalar(1), Scalar(2)}, 0); }),
              HasSubstr("cat: tensor 0 is a rank-0 tensor float32[], which has no dim to concatenate along"));
  EXPECT_THAT(MessageOf<Error>([] { Cat({Zeros({1}), Scalar(2)}, 0); }),
              HasSubstr("cat: tensor 1 is float32[] but tensor 0 is float32[1]"));
  // Out-of-range dims still name the range.
  EXPECT_THAT(MessageOf<Error>([] { Sum(Scalar(1), {1}); }),
              HasSubstr("sum: dim 1 is out of range for a tensor of rank 0 (expected [-1, 0])"));
}

TEST(ShapeLimits, StackOfRankZeroTensorsConcatenates) {
  EXPECT_EQ(Stack({Scalar(1), Scalar(2)}, 0).ToDoubles(), (std::vector<double>{1, 2}));
}

TEST(ShapeLimits, SqueezeAndTransposeOfARankZeroTensorReturnIt) {
  const Tensor s = Scalar(3);
  EXPECT_EQ(s.Squeeze(0).shape(), Shape{});
  EXPECT_EQ(s.Squeeze(-1).Item(), 3);
  EXPECT_EQ(s.Transpose(0, -1).shape(), Shape{});
  EXPECT_EQ(s.Transpose(0, 0).Item(), 3);
}

TEST(ShapeLimits, ReductionsOverDimZeroOfARankZeroTensorReturnIt) {
  // NOTE [rank-0 reductions]: as PyTorch.
  const Tensor s = Scalar(2, {.requires_grad = true});
  const Tensor sum = Sum(s, {0});
  EXPECT_EQ(sum.shape(), Shape{});
  EXPECT_EQ(sum.Item(), 2);
  EXPECT_EQ(Sum(s, {-1}, /*keepdim=*/true).shape(), Shape{});
  EXPECT_EQ(Mean(s, {0}).Item(), 2);
  EXPECT_EQ(Max(s, {0}).Item(), 2);
  EXPECT_EQ(Min(s, {-1}).Item(), 2);
  EXPECT_EQ(AbsMax(Scalar(-2), {0}).Item(), 2);
  EXPECT_THAT(MessageOf<Error>([&] { Sum(s, {0, -1}); }), HasSubstr("sum: dim -1 given twice in [0, -1]"));
  Sum(Max(s, {0}), {0}).Backward();
  EXPECT_EQ(s.grad().Item(), 1);
  const Tensor am = ArgMax(Scalar(5), 0);
  EXPECT_EQ(am.shape(), Shape{});
  EXPECT_EQ(am.dtype(), DType::kInt64);
  EXPECT_EQ(am.Item(), 0);
  EXPECT_EQ(ArgMax(Scalar(5), -1, /*keepdim=*/true).shape(), Shape{});
  EXPECT_THAT(MessageOf<Error>([] { ArgMax(Scalar(5), 1); }), HasSubstr("argmax: dim 1 is out of range"));
}

// ---- arguments near int64's limits ---------------------------------------------------------

TEST(ShapeLimits, NarrowChecksStartAndLengthWithoutOverflow) {
  EXPECT_THAT(MessageOf<Error>([] { R({4}).Narrow(0, 2, kMax); }),
              HasSubstr("narrow: start 2 and length 9223372036854775807 are out of bounds for dim 0 of size 4"));
  EXPECT_THAT(MessageOf<Error>([] { R({4}).Narrow(0, kMin, 1); }),
              HasSubstr("narrow: start -9223372036854775808 and length 1 are out of bounds"));
  EXPECT_THAT(MessageOf<Error>([] { R({4}).Narrow(0, kMax, 0); }), HasSubstr("out of bounds"));
  EXPECT_EQ(R({4}).Narrow(0, 1, 3).ToDoubles(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(R({4}).Narrow(0, 4, 0).numel(), 0);
  // A negative start counts from the end, through the end of the dim.
  EXPECT_EQ(R({4}).Narrow(0, -2, 2).ToDoubles(), (std::vector<double>{2, 3}));
}

TEST(ShapeLimits, SliceWithAHugeStepKeepsOneElement) {
  const Tensor a = R({4});
  const Tensor s = a.Slice(0, 0, 4, kMax);
  EXPECT_EQ(s.shape(), Shape{1});
  EXPECT_EQ(s.ToDoubles(), (std::vector<double>{0}));
  EXPECT_EQ(a.Slice(0, 1, 4, kMax - 1).ToDoubles(), (std::vector<double>{1}));
  EXPECT_EQ(a.Slice(0, 2, 2, kMax).numel(), 0);
  // Stride 2 times a huge step overflows, yet one element needs no stride.
  const Tensor b = R({2, 2});
  EXPECT_EQ(b.Slice(0, 1, 2, kMax).ToDoubles(), (std::vector<double>{2, 3}));
  EXPECT_EQ(a.Slice(0, 0, 4, 3).ToDoubles(), (std::vector<double>{0, 3}));
  EXPECT_THAT(MessageOf<Error>([&] { a.Slice(0, kMin, kMax); }), HasSubstr("slice: range"));
}

TEST(ShapeLimits, SplitSizesAddUpWithoutOverflow) {
  EXPECT_THAT(MessageOf<Error>([] { Split(R({4}), {kMax, 5}, 0); }),
              HasSubstr("split: sizes [9223372036854775807, 5] add up past int64, more than dim 0 of float32[4] has"));
  EXPECT_THAT(MessageOf<Error>([] { Split(R({4}), {kMax, 0}, 0); }),
              HasSubstr("split: sizes add up to 9223372036854775807 but dim 0 of float32[4] has 4"));
  const TensorList parts = Split(R({4}), {1, 3}, 0);
  EXPECT_EQ(parts[1].ToDoubles(), (std::vector<double>{1, 2, 3}));
}

TEST(ShapeLimits, CatSizesAddUpWithoutOverflow) {
  const Tensor big = Zeros({1}).Expand({int64_t{1} << 62});
  EXPECT_THAT(MessageOf<Error>([&] { Cat({big, big}, 0); }), HasSubstr("cat: the sizes along dim 0 add up past"));
}

TEST(ShapeLimits, RandIntRejectsBoundsOutsideTheDtype) {
  EXPECT_THAT(MessageOf<Error>([] { RandInt({3}, int64_t{1} << 40, (int64_t{1} << 40) + 10,
                                            {.dtype = DType::kInt32}); }),
              HasSubstr("randint: value 1.09951e+12 cannot be represented in int32"));
  EXPECT_THAT(MessageOf<Error>([] { RandInt({3}, 0, 257, {.dtype = DType::kUInt8}); }),
              HasSubstr("randint: value 256 cannot be represented in uint8"));
  EXPECT_THAT(MessageOf<Error>([] { RandInt({3}, -1, 2, {.dtype = DType::kUInt8}); }),
              HasSubstr("randint: value -1 cannot be represented in uint8"));
  EXPECT_THAT(MessageOf<Error>([] { RandInt({3}, kMin, kMax); }),
              HasSubstr("randint: range [-9223372036854775808, 9223372036854775807) reaches past +-2^53"));
  EXPECT_THAT(MessageOf<Error>([] { RandInt({3}, 0, 10, {.dtype = DType::kFloat32}); }),
              HasSubstr("randint: needs an integer dtype, got float32"));
  for (double v : RandInt({64}, 0, 256, {.dtype = DType::kUInt8}).ToDoubles()) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 256);
  }
  for (double v : RandInt({64}, -2147483648LL, -2147483646LL, {.dtype = DType::kInt32}).ToDoubles()) {
    EXPECT_GE(v, -2147483648.0);
    EXPECT_LT(v, -2147483646.0);
  }
}

}  // namespace
}  // namespace octet
