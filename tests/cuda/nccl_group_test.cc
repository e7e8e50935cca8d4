// NcclProcessGroup on a machine without a GPU: the dtype and reduction maps
// that keep FP8 sums out of NCCL (NOTE [nccl fp8]), and a clear error instead
// of a crash when there is no device. With a device, a 1-rank group reduces
// every dtype (the multi-rank runs need the H100: CUDA_NOTES.md §6).
#include <octet/distributed/cuda/nccl_group.h>

#include <gtest/gtest.h>

#include <filesystem>

#include <octet/core/scaling.h>
#include <octet/ops/cuda/device_context.h>
#include "tests/distributed/file_store_fixture.h"

namespace octet::dist {
namespace {

TEST(NcclMaps, Fp8MovesAsNcclFp8AndIsNeverReducedByNccl) {
  EXPECT_EQ(internal::NcclMoveType(DType::kFloat8E4M3), ncclFloat8e4m3);
  EXPECT_EQ(internal::NcclMoveType(DType::kFloat8E5M2), ncclFloat8e5m2);
  EXPECT_EQ(internal::NcclMoveType(DType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(internal::NcclMoveType(DType::kUInt8), ncclUint8);
  EXPECT_EQ(internal::NcclReduceOp(ReduceOp::kSum, DType::kFloat32), ncclSum);
  EXPECT_EQ(internal::NcclReduceOp(ReduceOp::kMax, DType::kFloat32), ncclMax);
  EXPECT_EQ(internal::NcclReduceOp(ReduceOp::kMin, DType::kFloat32), ncclMin);
  for (DType dt : {DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kBFloat16}) {
    EXPECT_THROW(internal::NcclReduceOp(ReduceOp::kSum, dt), Error) << Name(dt);
  }
}

using NcclGroupTest = testing::FileStoreFixture;

TEST_F(NcclGroupTest, NoDeviceIsAClearErrorOrASingleRankGroupWorks) {
  auto group = CreateNcclProcessGroup(*store_, 0, 1, {.timeout = std::chrono::seconds(20)});
  if (!cuda::IsAvailable()) {
    ASSERT_FALSE(group.ok());
    EXPECT_NE(group.status().message().find("no CUDA device"), std::string::npos) << group.status();
    return;
  }
  ASSERT_TRUE(group.ok()) << group.status();
  const Device dev{DeviceType::kCUDA, 0};
  Tensor t = FromVector(std::vector<float>{1.5f, -2.0f, 3.0f}, {3}).To(dev);
  (*group)->AllReduce(t)->Wait();
  EXPECT_EQ(t.ToFloats(), (std::vector<float>{1.5f, -2.0f, 3.0f}));
  Tensor b = FromVector(std::vector<float>{1.5f, -2.0f}, {2}).To(DType::kBFloat16).To(dev);
  (*group)->AllReduce(b)->Wait();
  EXPECT_EQ(b.ToFloats(), (std::vector<float>{1.5f, -2.0f}));
  // FP8: comes back re-quantized with current scaling (448 / amax 3).
  Tensor q = FromVector(std::vector<float>{1.0f, -3.0f}, {2}).To(DType::kFloat8E4M3).To(dev);
  (*group)->AllReduce(q)->Wait();
  EXPECT_EQ(q.ToFloats(), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_FLOAT_EQ(ScaleValue(q), 448.0f / 3.0f);
  (*group)->Barrier()->Wait();
}


}  // namespace
}  // namespace octet::dist
