// Public device control (core/device_control.h) on a CUDA device: octet::StreamGuard
// runs octet on the caller's stream, memory statistics follow allocations,
// EmptyCache releases cached segments. Uses only the public header and the
// CUDA runtime; skips without a device (NOTE [require cuda]).
#include <octet/core/device_control.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

#include <octet/core/tensor.h>
#include <octet/ops/pointwise.h>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace octet {
namespace {

#if OCTET_WITH_CUDA

// A cudaError_t that is not cudaSuccess fails the test.
#define EXPECT_CUDA_OK(expr) EXPECT_EQ((expr), cudaSuccess) << #expr

TEST(DeviceControlCuda, StreamGuardQueuesOctetOnTheCallersStream) {
  OCTET_SKIP_WITHOUT_CUDA();
  cudaStream_t mine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), cudaSuccess);
  void* const octets = NativeStream(CUDA(0));
  ASSERT_NE(octets, nullptr);
  {
    StreamGuard guard(CUDA(0), mine);
    EXPECT_EQ(NativeStream(CUDA(0)), static_cast<void*>(mine));
    void* other_thread = nullptr;
    std::thread([&] { other_thread = NativeStream(CUDA(0)); }).join();
    EXPECT_EQ(other_thread, octets);  // per thread
    {
      StreamGuard own(CUDA(0), nullptr);  // nullptr: octet's own stream
      EXPECT_EQ(NativeStream(CUDA(0)), octets);
    }
    EXPECT_EQ(NativeStream(CUDA(0)), static_cast<void*>(mine));
    // Work queued under the guard is ordered on `mine`: synchronising that
    // stream alone makes the result ready.
    const Tensor x = Full({1 << 16}, 1.5f).To(CUDA(0));
    const Tensor y = Mul(x, x);
    EXPECT_CUDA_OK(cudaStreamSynchronize(mine));
    EXPECT_EQ(y.To(kCPU).ToDoubles()[12345], 2.25);
  }
  EXPECT_EQ(NativeStream(CUDA(0)), octets);
  Synchronize(CUDA(0));
  EXPECT_CUDA_OK(cudaStreamDestroy(mine));
}

TEST(DeviceControlCuda, MemoryStatsFollowAllocationsAndEmptyCacheReleases) {
  OCTET_SKIP_WITHOUT_CUDA();
  const MemoryStats before = GetMemoryStats(CUDA(0));
  {
    const Tensor t = Empty({int64_t{64} << 20}, {.dtype = DType::kUInt8, .device = CUDA(0)});
    const MemoryStats during = GetMemoryStats(CUDA(0));
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + (int64_t{64} << 20));
    EXPECT_EQ(during.num_allocs, before.num_allocs + 1);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
  }
  const MemoryStats freed = GetMemoryStats(CUDA(0));
  EXPECT_EQ(freed.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(freed.num_frees, before.num_frees + 1);
  EXPECT_GE(freed.cached_bytes, int64_t{64} << 20);
  ResetPeakMemoryStats(CUDA(0));
  EXPECT_EQ(GetMemoryStats(CUDA(0)).peak_allocated_bytes, freed.allocated_bytes);
  EmptyCache(CUDA(0));
  EXPECT_LE(GetMemoryStats(CUDA(0)).reserved_bytes + (int64_t{64} << 20), freed.reserved_bytes);
}

#else

TEST(DeviceControlCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#endif

}  // namespace
}  // namespace octet
