// The host-side launch decisions of the CUDA kernels (ops/cuda/launch_math.h):
// plain C++, so these run on any machine, with or without CUDA.
#include <octet/ops/cuda/launch_math.h>

#include <gtest/gtest.h>

#include <vector>

namespace octet::cuda {
namespace {

using Dims = std::vector<int64_t>;

template <int N>
StridedLayout<N> Layout(const Dims& shape, const std::array<Dims, N>& strides) {
  std::array<const Dims*, N> ptrs;
  for (int k = 0; k < N; ++k) ptrs[k] = &strides[k];
  StridedLayout<N> l;
  EXPECT_TRUE(Coalesce<N>(shape, ptrs, &l));
  return l;
}

TEST(LaunchMath, CoalesceMergesContiguousDimsIntoOne) {
  const auto l = Layout<2>({2, 3, 4}, {Dims{12, 4, 1}, Dims{12, 4, 1}});
  ASSERT_EQ(l.rank, 1);
  EXPECT_EQ(l.sizes[0], 24);
  EXPECT_EQ(l.strides[0][0], 1);
  EXPECT_EQ(l.strides[1][0], 1);
}

TEST(LaunchMath, CoalesceKeepsATransposedOperandApart) {
  // out (2,3) contiguous, x = a (3,2) tensor transposed: strides (1, 2).
  const auto l = Layout<2>({2, 3}, {Dims{3, 1}, Dims{1, 2}});
  ASSERT_EQ(l.rank, 2);
  EXPECT_EQ(l.sizes[0], 2);
  EXPECT_EQ(l.sizes[1], 3);
  EXPECT_EQ(l.strides[1][0], 1);
  EXPECT_EQ(l.strides[1][1], 2);
}

TEST(LaunchMath, CoalesceDropsSizeOneDimsAndKeepsBroadcastStrides) {
  // (4,1,5) out, b broadcast along dim 0 (stride 0).
  const auto l = Layout<2>({4, 1, 5}, {Dims{5, 5, 1}, Dims{0, 5, 1}});
  ASSERT_EQ(l.rank, 2);
  EXPECT_EQ(l.sizes[0], 4);
  EXPECT_EQ(l.sizes[1], 5);
  EXPECT_EQ(l.strides[1][0], 0);
  EXPECT_EQ(l.strides[1][1], 1);
}

TEST(LaunchMath, CoalesceOfAScalarIsOneElementAndOfAnEmptyShapeIsZero) {
  auto l = Layout<1>({}, {Dims{}});
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.sizes[0], 1);
  l = Layout<1>({1, 1}, {Dims{1, 1}});
  EXPECT_EQ(l.sizes[0], 1);
  l = Layout<1>({3, 0}, {Dims{0, 1}});
  EXPECT_EQ(l.sizes[0] * (l.rank > 1 ? l.sizes[1] : 1), 0);
}

TEST(LaunchMath, CoalesceRefusesMoreThanMaxDims) {
  // Every other dim sliced: nothing merges.
  Dims shape(kMaxDims + 1, 2), strides(kMaxDims + 1);
  int64_t s = 1;
  for (int d = kMaxDims; d >= 0; --d) {
    strides[d] = 2 * s;
    s *= 4;
  }
  std::array<const Dims*, 1> ptrs{&strides};
  StridedLayout<1> l;
  EXPECT_FALSE(Coalesce<1>(shape, ptrs, &l));
  shape.pop_back();
  strides.pop_back();
  EXPECT_TRUE(Coalesce<1>(shape, ptrs, &l));
  EXPECT_EQ(l.rank, kMaxDims);
}

TEST(LaunchMath, FitsInt32LooksAtElementCountAndReach) {
  EXPECT_TRUE(FitsInt32(Layout<1>({1 << 20}, {Dims{1}})));
  EXPECT_FALSE(FitsInt32(Layout<1>({int64_t{1} << 31}, {Dims{1}})));
  // Few elements, but a stride that reaches past 2^31.
  EXPECT_FALSE(FitsInt32(Layout<2>({4, 2}, {Dims{2, 1}, Dims{int64_t{1} << 30, 1}})));
  EXPECT_TRUE(FitsInt32(Layout<2>({2, 2}, {Dims{2, 1}, Dims{int64_t{1} << 30, 1}})));
}

TEST(LaunchMath, VectorWidthIsSixteenBytesOfTheWidestOperandWhenAligned) {
  const int f32[2] = {4, 4};
  uintptr_t aligned[2] = {0x1000, 0x2000};
  EXPECT_EQ(PickVectorWidth(aligned, f32, 2), 4);
  const int bf16[1] = {2};
  EXPECT_EQ(PickVectorWidth(aligned, bf16, 1), 8);
  const int f64[1] = {8};
  EXPECT_EQ(PickVectorWidth(aligned, f64, 1), 2);
  const int fp8[1] = {1};
  EXPECT_EQ(PickVectorWidth(aligned, fp8, 1), 16);
  // float -> bf16 copy: 4 elements (16 bytes read, 8 written).
  const int mixed[2] = {4, 2};
  EXPECT_EQ(PickVectorWidth(aligned, mixed, 2), 4);
}

TEST(LaunchMath, VectorWidthShrinksForMisalignedPointers) {
  const int f32[2] = {4, 4};
  uintptr_t p[2] = {0x1000, 0x1008};  // second one 8-byte aligned: 2 floats
  EXPECT_EQ(PickVectorWidth(p, f32, 2), 2);
  p[1] = 0x1004;  // a tensor sliced by one float
  EXPECT_EQ(PickVectorWidth(p, f32, 2), 1);
  const int mixed[2] = {4, 2};
  uintptr_t q[2] = {0x1000, 0x2004};  // bf16 side 4-byte aligned: 2 elements
  EXPECT_EQ(PickVectorWidth(q, mixed, 2), 2);
}

TEST(LaunchMath, GridSizeCoversTheWorkUpToEightBlocksPerSm) {
  EXPECT_EQ(GridSize(1, 256, 132), 1);
  EXPECT_EQ(GridSize(256, 256, 132), 1);
  EXPECT_EQ(GridSize(257, 256, 132), 2);
  EXPECT_EQ(GridSize(int64_t{1} << 30, 256, 132), 132 * kBlocksPerSm);
  EXPECT_EQ(GridSize(0, 256, 132), 1);
  EXPECT_EQ(GridSize(1000, 256, 0), 4);  // unknown SM count: still a valid grid
}

TEST(LaunchMath, ReduceOverTheLastDimsIsRows) {
  const ReducePlan p = PlanReduce({4, 5, 6}, true, {false, true, true});
  EXPECT_EQ(p.kind, ReducePlan::kOuterRInner);
  EXPECT_EQ(p.outer, 4);
  EXPECT_EQ(p.r, 30);
  EXPECT_EQ(p.inner, 1);
}

TEST(LaunchMath, ReduceOverLeadingDimsIsColumns) {
  // Bias gradient: (B,T,C) -> (C).
  const ReducePlan p = PlanReduce({8, 16, 768}, true, {true, true, false});
  EXPECT_EQ(p.kind, ReducePlan::kOuterRInner);
  EXPECT_EQ(p.outer, 1);
  EXPECT_EQ(p.r, 128);
  EXPECT_EQ(p.inner, 768);
}

TEST(LaunchMath, ReduceOverAMiddleDimKeepsOuterAndInner) {
  const ReducePlan p = PlanReduce({3, 7, 1, 5}, true, {false, true, true, false});
  EXPECT_EQ(p.kind, ReducePlan::kOuterRInner);
  EXPECT_EQ(p.outer, 3);
  EXPECT_EQ(p.r, 7);
  EXPECT_EQ(p.inner, 5);
}

TEST(LaunchMath, ReduceOfEverythingIsOneRow) {
  const ReducePlan p = PlanReduce({10, 20}, true, {true, true});
  EXPECT_EQ(p.outer, 1);
  EXPECT_EQ(p.r, 200);
  EXPECT_EQ(p.inner, 1);
}

TEST(LaunchMath, ReducedDimsOfSizeOneAreIgnored) {
  const ReducePlan p = PlanReduce({1, 6, 1}, true, {true, false, true});
  EXPECT_EQ(p.kind, ReducePlan::kOuterRInner);
  EXPECT_EQ(p.outer * p.inner, 6);
  EXPECT_EQ(p.r, 1);
}

TEST(LaunchMath, ScatteredOrStridedReductionsArePermutedFirst) {
  ReducePlan p = PlanReduce({2, 3, 4}, true, {true, false, true});
  EXPECT_EQ(p.kind, ReducePlan::kPermute);
  EXPECT_EQ(p.perm, (Dims{1, 0, 2}));
  EXPECT_EQ(p.outer, 3);
  EXPECT_EQ(p.r, 8);
  p = PlanReduce({4, 5}, /*contiguous=*/false, {false, true});
  EXPECT_EQ(p.kind, ReducePlan::kPermute);
  EXPECT_EQ(p.perm, (Dims{0, 1}));
  EXPECT_EQ(p.outer, 4);
  EXPECT_EQ(p.r, 5);
}

TEST(LaunchMath, SplitsFillTheDeviceOnlyWhenOutputsAreFewAndLong) {
  // Many outputs: no split.
  EXPECT_EQ(ChooseSplits(10000, 1 << 20, 132, kMinElementsPerSplit), 1);
  // One huge reduction: up to 4 blocks per SM.
  EXPECT_EQ(ChooseSplits(1, int64_t{1} << 30, 132, kMinElementsPerSplit), 528);
  // One reduction that is merely long: bounded by kMinElementsPerSplit.
  EXPECT_EQ(ChooseSplits(1, 10 * kMinElementsPerSplit, 132, kMinElementsPerSplit), 10);
  // Short: no split.
  EXPECT_EQ(ChooseSplits(1, kMinElementsPerSplit, 132, kMinElementsPerSplit), 1);
  // Bias gradient (8192 rows, 24 column tiles): rows split 22 ways.
  EXPECT_EQ(ChooseSplits(24, 8192, 132, kMinRowsPerSplit), 22);
}

TEST(LaunchMath, RowThreadsGiveAboutFourElementsPerThread) {
  EXPECT_EQ(RowThreads(1), 32);     // at least one warp
  EXPECT_EQ(RowThreads(128), 32);
  EXPECT_EQ(RowThreads(129), 64);
  EXPECT_EQ(RowThreads(768), 256);  // GPT-2 width: 3 elements per thread
  EXPECT_EQ(RowThreads(50257), 512);  // capped
  for (int64_t n : {1, 33, 1000, 4096, 1 << 20}) EXPECT_EQ(RowThreads(n) % 32, 0) << n;
}

TEST(LaunchMath, ParameterGradientSplitsDependOnTheRowCountOnly) {
  EXPECT_EQ(ParamGradSplits(0), 1);
  EXPECT_EQ(ParamGradSplits(255), 1);
  EXPECT_EQ(ParamGradSplits(3000), 11);
  EXPECT_EQ(ParamGradSplits(8192), 32);
  EXPECT_EQ(ParamGradSplits(1 << 20), kMaxParamSplits);
}

}  // namespace
}  // namespace octet::cuda
