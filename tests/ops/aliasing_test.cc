// Copies and in-place ops whose operand shares memory with the destination
// (NOTE [overlapping operands] in ops/op_checks.h): the result is the one a
// copy through a temporary gives, the operand's values from before the op.
#include <gtest/gtest.h>

#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/shape.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;

Tensor Range(int64_t n, DType dtype = DType::kFloat32) {
  return Arange(n, {.dtype = dtype});
}

TEST(OverlappingCopy, ShiftRightReadsTheSourceAsItWas) {
  // memcpy on these ranges was undefined behaviour (ASan: memcpy-param-overlap)
  // and a forward loop would smear a[0] over everything.
  Tensor a = Range(6);
  Tensor dst = a.Slice(0, 1, 6);
  dst.CopyFrom_(a.Slice(0, 0, 5));
  EXPECT_TRUE(AllClose(a, {0, 0, 1, 2, 3, 4}, 0, 0));
}

TEST(OverlappingCopy, ShiftLeftReadsTheSourceAsItWas) {
  Tensor a = Range(6);
  Tensor dst = a.Slice(0, 0, 5);
  dst.CopyFrom_(a.Slice(0, 1, 6));
  EXPECT_TRUE(AllClose(a, {1, 2, 3, 4, 5, 5}, 0, 0));
}

TEST(OverlappingCopy, StridedAndTransposedViews) {
  // A strided source overlapping a strided destination (no memcpy path).
  Tensor a = Range(8, DType::kFloat64);
  Tensor dst = a.Slice(0, 2, 8, 2);  // 2 4 6
  dst.CopyFrom_(a.Slice(0, 0, 6, 2));  // 0 2 4
  EXPECT_TRUE(AllClose(a, {0, 1, 0, 3, 2, 5, 4, 7}, 0, 0));
  // In-place transpose of a square matrix: every element reads its mirror.
  Tensor m = Range(9).View({3, 3});
  m.CopyFrom_(m.T());
  EXPECT_TRUE(AllClose(m.Reshape({9}), {0, 3, 6, 1, 4, 7, 2, 5, 8}, 0, 0));
}

TEST(OverlappingCopy, BroadcastSourceInsideTheDestination) {
  // a[1:3] broadcast over both rows of a (2, 2) view of a: writing row 0
  // changes a[1], which row 1 must still read as it was (a forward copy gave
  // [1 2 2 2]).
  Tensor a = FromVector(std::vector<float>{0, 1, 2, 3}, {4});
  Tensor dst = a.View({2, 2});
  dst.CopyFrom_(a.Slice(0, 1, 3));
  EXPECT_TRUE(AllClose(a, {1, 2, 1, 2}, 0, 0));
}

TEST(OverlappingCopy, ConvertingCopyBetweenViewsOfOneBuffer) {
  // Two storages over the same memory (FromBlob) count as overlapping too.
  std::vector<float> buf = {0, 1, 2, 3, 4, 5};
  Tensor a = FromBlob(buf.data(), {6}, DType::kFloat32);
  Tensor b = FromBlob(buf.data(), {6}, DType::kFloat32);
  Tensor dst = a.Slice(0, 1, 6);
  dst.CopyFrom_(b.Slice(0, 0, 5));
  EXPECT_EQ(buf, (std::vector<float>{0, 0, 1, 2, 3, 4}));
}

TEST(OverlappingCopy, IdenticalViewIsANoOpThatStillBumpsTheVersion) {
  Tensor a = Range(5);
  const uint64_t before = a.storage()->version();
  a.CopyFrom_(a);
  EXPECT_TRUE(AllClose(a, {0, 1, 2, 3, 4}, 0, 0));
  EXPECT_GT(a.storage()->version(), before);
}

TEST(OverlappingCopy, DisjointViewsOfOneStorageCopyDirectly) {
  Tensor a = Range(6);
  Tensor dst = a.Slice(0, 3, 6);
  dst.CopyFrom_(a.Slice(0, 0, 3));
  EXPECT_TRUE(AllClose(a, {0, 1, 2, 0, 1, 2}, 0, 0));
}

TEST(OverlapTest, PartialOverlapIsTheOnlyCaseThatNeedsACopy) {
  Tensor a = Range(8);
  EXPECT_TRUE(PartiallyOverlaps(a.Slice(0, 1, 6), a.Slice(0, 0, 5)));
  EXPECT_TRUE(PartiallyOverlaps(a.View({2, 4}), a.View({4, 2}).T()));
  EXPECT_FALSE(PartiallyOverlaps(a, a));
  EXPECT_FALSE(PartiallyOverlaps(a.Slice(0, 0, 4), a.Slice(0, 4, 8)));
  EXPECT_FALSE(PartiallyOverlaps(a, Range(8)));
  EXPECT_FALSE(PartiallyOverlaps(a.Slice(0, 0, 0), a));
  // Size-1 dims may have any stride and still name the same elements.
  EXPECT_TRUE(SameElements(a.View({1, 8}), a.Unsqueeze(0)));
  // The same bytes read as another dtype are not the same elements.
  Tensor bits = FromBlob(a.raw_data(), {8}, DType::kInt32);
  EXPECT_FALSE(SameElements(a, bits));
  EXPECT_TRUE(PartiallyOverlaps(a, bits));
}

TEST(OverlappingInPlace, AddReadsTheOperandAsItWas) {
  // Was a running sum [0 1 3 6 10 15]: each element read the one just written.
  Tensor a = Range(6);
  Tensor x = a.Slice(0, 1, 6);
  AddInPlace(x, a.Slice(0, 0, 5));
  EXPECT_TRUE(AllClose(a, {0, 1, 3, 5, 7, 9}, 0, 0));
}

TEST(OverlappingInPlace, AddWithAlphaAndMaximumLikewise) {
  Tensor a = Range(6);
  Tensor x = a.Slice(0, 1, 6);
  AddInPlace(x, a.Slice(0, 0, 5), 2.0);
  EXPECT_TRUE(AllClose(a, {0, 1, 4, 7, 10, 13}, 0, 0));

  Tensor b = FromVector(std::vector<float>{9, 1, 1, 1, 1}, {5});
  Tensor y = b.Slice(0, 1, 5);
  MaximumInPlace(y, b.Slice(0, 0, 4));  // each takes the max with its left neighbour as it was
  EXPECT_TRUE(AllClose(b, {9, 9, 1, 1, 1}, 0, 0));
}

TEST(OverlappingInPlace, BroadcastOperandInsideTheTarget) {
  Tensor a = FromVector(std::vector<float>{1, 10, 100}, {3});
  AddInPlace(a, a.Slice(0, 0, 1));  // += old a[0] everywhere
  EXPECT_TRUE(AllClose(a, {2, 11, 101}, 0, 0));
}

TEST(OverlappingInPlace, SelfIsElementwiseSafe) {
  Tensor a = Range(4);
  AddInPlace(a, a);
  EXPECT_TRUE(AllClose(a, {0, 2, 4, 6}, 0, 0));
}

}  // namespace
}  // namespace octet
