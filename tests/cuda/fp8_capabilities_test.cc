// The FP8 GEMM capability table (ops/cuda/fp8_capabilities.h, NOTE [fp8
// capabilities]) for the GPUs that matter, without needing any of them.
#include <octet/ops/cuda/fp8_capabilities.h>

#include <gtest/gtest.h>

namespace octet::cuda {
namespace {

constexpr int kCublasLt128 = 120800;  // 12.8.0: before block scaling
constexpr int kCublasLt129 = 120900;
constexpr int kCublasLt131 = 130100;  // the one installed here

TEST(Fp8Capabilities, AmpereAndOlderHaveNoFp8Gemm) {
  for (auto [major, minor] : {std::pair{7, 0}, {8, 0}, {8, 6}, {8, 7}}) {
    const Fp8GemmCaps c = Fp8CapsFor(major, minor, kCublasLt131);
    EXPECT_FALSE(c.fp8) << major << "." << minor;
    EXPECT_FALSE(c.block_scaling);
    EXPECT_FALSE(c.mxfp8);
  }
  EXPECT_EQ(Describe(Fp8CapsFor(8, 0, kCublasLt131)), "no FP8 GEMM (needs compute capability 8.9 or newer)");
}

TEST(Fp8Capabilities, AdaIsTnOnlyWithoutBlockScaling) {
  const Fp8GemmCaps c = Fp8CapsFor(8, 9, kCublasLt131);
  EXPECT_TRUE(c.fp8);
  EXPECT_TRUE(c.tn_only);
  EXPECT_FALSE(c.block_scaling);
  EXPECT_FALSE(c.mxfp8);
  EXPECT_EQ(Describe(c), "FP8 GEMM, TN layout only");
}

TEST(Fp8Capabilities, HopperIsTnOnlyAndGetsBlockScalingFromCublasLt129) {
  Fp8GemmCaps c = Fp8CapsFor(9, 0, kCublasLt128);
  EXPECT_TRUE(c.fp8);
  EXPECT_TRUE(c.tn_only);
  EXPECT_FALSE(c.block_scaling);
  c = Fp8CapsFor(9, 0, kCublasLt129);
  EXPECT_TRUE(c.block_scaling);
  EXPECT_FALSE(c.mxfp8);
  EXPECT_EQ(Describe(Fp8CapsFor(9, 0, kCublasLt131)), "FP8 GEMM, TN layout only; 1x128/128x128 block scaling");
}

TEST(Fp8Capabilities, BlackwellDataCentreTakesAnyLayoutAndMxfp8) {
  for (int minor : {0, 3}) {
    const Fp8GemmCaps c = Fp8CapsFor(10, minor, kCublasLt131);
    EXPECT_TRUE(c.fp8);
    EXPECT_FALSE(c.tn_only);
    EXPECT_TRUE(c.mxfp8);
    EXPECT_FALSE(c.block_scaling);
  }
  EXPECT_EQ(Describe(Fp8CapsFor(10, 0, kCublasLt131)), "FP8 GEMM, any layout; MXFP8");
}

TEST(Fp8Capabilities, BlackwellWorkstationKeepsTheTnRestriction) {
  const Fp8GemmCaps c = Fp8CapsFor(12, 0, kCublasLt131);
  EXPECT_TRUE(c.fp8);
  EXPECT_TRUE(c.tn_only);
  EXPECT_FALSE(c.mxfp8);
  EXPECT_FALSE(Fp8CapsFor(11, 0, kCublasLt131).tn_only);
  EXPECT_FALSE(Fp8CapsFor(13, 0, kCublasLt131).tn_only);
}

}  // namespace
}  // namespace octet::cuda
