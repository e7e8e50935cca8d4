// The CUDA runtime layer: device detection, streams, handles, workspaces, the
// caching allocator behind CUDA tensors and host<->device copies. The
// no-device behaviour is tested for real on machines without a GPU; the rest
// skips there.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <thread>

#include <octet/core/allocator.h>
#include <octet/core/tensor.h>
#include "tests/cuda/require_cuda.h"
#include "tests/scoped_env.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/copy_kernels.h>
#include <octet/ops/cuda/cuda_allocator.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/embedding_kernels.h>
#include <octet/ops/matmul.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/norm_kernels.h>
#include <octet/ops/pointwise_kernels.h>
#include <octet/ops/random_kernels.h>
#include <octet/ops/reduce_kernels.h>
#include <octet/ops/softmax_kernels.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(CudaRuntime, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using testing::ErrorOf;

#define SKIP_WITHOUT_DEVICE() OCTET_SKIP_WITHOUT_CUDA()

#define SKIP_WITH_DEVICE() \
  if (cuda::IsAvailable()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path"

// ---- no device: detection must degrade to CPU-only, with clear errors ----------

TEST(CudaRuntime, DetectionReportsNoDeviceWithTheRuntimeError) {
  SKIP_WITH_DEVICE();
  EXPECT_EQ(cuda::DeviceCount(), 0);
  EXPECT_FALSE(cuda::IsAvailable());
  EXPECT_FALSE(cuda::UnavailableReason().empty());
  EXPECT_EQ(cuda::DeviceCount(), 0);  // computed once, stable
}

TEST(CudaRuntime, CudaTensorsFailWithAClearErrorWithoutADevice) {
  SKIP_WITH_DEVICE();
  const std::string msg = ErrorOf([] { Empty({4}, {.device = CUDA(0)}); });
  EXPECT_NE(msg.find("cuda:0 is not available: no CUDA device ("), std::string::npos) << msg;
  EXPECT_NE(msg.find(cuda::UnavailableReason()), std::string::npos) << msg;
  const std::string copy = ErrorOf([] { Ones({2}).To(CUDA(0)); });
  EXPECT_NE(copy.find("no CUDA device"), std::string::npos) << copy;
  // The CPU keeps working.
  EXPECT_EQ(Ones({2}).ToDoubles(), (std::vector<double>{1, 1}));
}

TEST(CudaRuntime, DeviceQueriesThrowWithoutADevice) {
  SKIP_WITH_DEVICE();
  EXPECT_NE(ErrorOf([] { cuda::Props(0); }).find("cuda::Props: cuda:0 is not available"), std::string::npos);
  EXPECT_NE(ErrorOf([] { cuda::CurrentStream(0); }).find("no CUDA device"), std::string::npos);
  EXPECT_NE(ErrorOf([] { cuda::CublasLtHandle(0); }).find("no CUDA device"), std::string::npos);
  EXPECT_NE(ErrorOf([] { cuda::Workspace(0, 1024); }).find("no CUDA device"), std::string::npos);
}

// ---- NOTE [require cuda] and NOTE [cuda sync check] switches -------------------

void SkipWithoutCudaProbe() { OCTET_SKIP_WITHOUT_CUDA(); }

TEST(RequireCuda, ParsesTheVariable) {
  EXPECT_FALSE(testing::CudaRequiredByValue(nullptr));
  EXPECT_FALSE(testing::CudaRequiredByValue(""));
  EXPECT_FALSE(testing::CudaRequiredByValue("0"));
  EXPECT_TRUE(testing::CudaRequiredByValue("1"));
  EXPECT_TRUE(testing::CudaRequiredByValue("yes"));  // a typo asks for a device, loudly
}

TEST(RequireCuda, TurnsTheSkipWithoutADeviceIntoAFailure) {
  SKIP_WITH_DEVICE();
  EXPECT_NE(testing::NoCudaReason().find("no CUDA device: "), std::string::npos);
  testing::ScopedEnv env("OCTET_REQUIRE_CUDA", "1");
  EXPECT_FATAL_FAILURE(SkipWithoutCudaProbe(), "OCTET_REQUIRE_CUDA=1 but no CUDA device: ");
}

TEST(RequireCuda, NoReasonWhenADeviceIsUsable) {
  if (!cuda::IsAvailable()) GTEST_SKIP() << "checks the with-device path";
  EXPECT_EQ(testing::NoCudaReason(), "");
}

TEST(CudaSyncCheck, ParsesTheVariable) {
  EXPECT_FALSE(cuda::ParseSyncCheck(""));
  EXPECT_FALSE(cuda::ParseSyncCheck("0"));
  EXPECT_TRUE(cuda::ParseSyncCheck("1"));
  const std::string msg = ErrorOf([] { cuda::ParseSyncCheck("on"); });
  EXPECT_NE(msg.find("OCTET_CUDA_SYNC_CHECK='on' is not understood: use 0 (no check; the default) or 1"),
            std::string::npos)
      << msg;
}

TEST(Synchronize, CpuReturnsAndAMissingDeviceIsAnError) {
  Synchronize(kCPU);
  EXPECT_EQ(NativeStream(kCPU), nullptr);
  const std::string msg = ErrorOf([] { Synchronize(CUDA(cuda::DeviceCount())); });
  EXPECT_NE(msg.find("octet::Synchronize: cuda:" + std::to_string(cuda::DeviceCount())), std::string::npos) << msg;
}

TEST(CudaRuntime, KernelsAndAllocatorAreRegisteredForCuda) {
  EXPECT_TRUE(unary_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(binary_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(compare_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(where_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(reduce_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(argmax_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(copy_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(fill_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(random_fill_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(dropout_kernel.Has(DeviceType::kCUDA));
  EXPECT_TRUE(layer_norm_fwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(layer_norm_bwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(rms_norm_fwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(rms_norm_bwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(softmax_fwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(softmax_bwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(cross_entropy_fwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(cross_entropy_bwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(embedding_fwd.Has(DeviceType::kCUDA));
  EXPECT_TRUE(embedding_bwd.Has(DeviceType::kCUDA));
  EXPECT_EQ(ErrorOf([] { GetAllocator(DeviceType::kCUDA); }), "");
}

// ---- with a device ---------------------------------------------------------------

TEST(CudaRuntime, PropsDescribeARealDevice) {
  SKIP_WITHOUT_DEVICE();
  const cuda::DeviceProps& p = cuda::Props(0);
  EXPECT_GE(p.major, 5);
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.total_mem, size_t{1} << 30);
  EXPECT_FALSE(p.name.empty());
  EXPECT_EQ(&cuda::Props(0), &p);  // cached
  const std::string msg = ErrorOf([] { cuda::Props(cuda::DeviceCount()); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST(CudaRuntime, DefaultStreamIsNonBlockingAndCurrent) {
  SKIP_WITHOUT_DEVICE();
  const cudaStream_t s = cuda::DefaultStream(0);
  ASSERT_NE(s, nullptr);
  unsigned flags = 0;
  OCTET_CUDA_CHECK(cudaStreamGetFlags(s, &flags));
  EXPECT_EQ(flags & cudaStreamNonBlocking, cudaStreamNonBlocking);
  EXPECT_EQ(cuda::CurrentStream(0), s);
  EXPECT_EQ(cuda::DefaultStream(0), s);
}

TEST(CudaRuntime, StreamGuardSetsThisThreadsCurrentStream) {
  SKIP_WITHOUT_DEVICE();
  cudaStream_t side = nullptr;
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  {
    cuda::StreamGuard guard(0, side);
    EXPECT_EQ(cuda::CurrentStream(0), side);
    cudaStream_t other_thread = nullptr;
    std::thread([&] { other_thread = cuda::CurrentStream(0); }).join();
    EXPECT_EQ(other_thread, cuda::DefaultStream(0));
  }
  EXPECT_EQ(cuda::CurrentStream(0), cuda::DefaultStream(0));
  OCTET_CUDA_CHECK(cudaStreamDestroy(side));
}

TEST(CudaRuntime, DeviceGuardRestoresThePreviousDevice) {
  SKIP_WITHOUT_DEVICE();
  OCTET_CUDA_CHECK(cudaSetDevice(0));
  const int last = cuda::DeviceCount() - 1;
  {
    cuda::DeviceGuard guard(last);
    int d = -1;
    OCTET_CUDA_CHECK(cudaGetDevice(&d));
    EXPECT_EQ(d, last);
  }
  int d = -1;
  OCTET_CUDA_CHECK(cudaGetDevice(&d));
  EXPECT_EQ(d, 0);
}

TEST(CudaRuntime, CublasLtHandlesArePerThreadAndWorkFromANewThread) {
  SKIP_WITHOUT_DEVICE();
  // A thread that has made no CUDA runtime call has no current context;
  // creating the handle there failed with CUDA_ERROR_INVALID_CONTEXT on an
  // H100 until MakeContextCurrent. A GEMM from such a thread must work too.
  cublasLtHandle_t lt = cuda::CublasLtHandle(0);
  ASSERT_NE(lt, nullptr);
  EXPECT_EQ(cuda::CublasLtHandle(0), lt);
  cublasLtHandle_t other = nullptr;
  std::thread([&] { other = cuda::CublasLtHandle(0); }).join();
  EXPECT_NE(other, nullptr);
  EXPECT_NE(other, lt);
  std::vector<double> from_thread;
  std::thread([&] {
    const Tensor a = Full({16, 16}, 0.5, {.device = CUDA(0)}), b = Full({16, 16}, 2.0, {.device = CUDA(0)});
    from_thread = Matmul(a, b).To(kCPU).ToDoubles();
  }).join();
  EXPECT_EQ(from_thread, std::vector<double>(256, 16.0));  // 16 terms of 0.5 * 2
}

TEST(Synchronize, WaitsForOctetsStreamAndSyncCheckPasses) {
  SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(NativeStream(CUDA(0)), static_cast<void*>(cuda::CurrentStream(0)));
  cuda::SetSyncCheckForTesting(true);
  const Tensor x = Full({1 << 20}, 3.0, {.device = CUDA(0)});
  const Tensor y = Mul(x, x);  // launches checked synchronously now
  cuda::SetSyncCheckForTesting(false);
  Synchronize(CUDA(0));
  EXPECT_EQ(cudaStreamQuery(cuda::CurrentStream(0)), cudaSuccess);  // nothing left queued
  EXPECT_EQ(y.To(kCPU).ToDoubles()[12345], 9.0);
}

TEST(CudaRuntime, WorkspaceIsAlignedAndGrowsOnly) {
  SKIP_WITHOUT_DEVICE();
  void* a = cuda::Workspace(0, 1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % cuda::kWorkspaceAlignment, 0u);
  EXPECT_EQ(cuda::Workspace(0, 10), a);  // smaller request: same buffer
  void* b = cuda::Workspace(0, 32 << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % cuda::kWorkspaceAlignment, 0u);
  OCTET_CUDA_CHECK(cudaMemsetAsync(b, 0, 32 << 20, cuda::CurrentStream(0)));
  cuda::SynchronizeCurrentStream(0);
}

TEST(CudaRuntime, FreedTensorMemoryIsReusedFromTheCache) {
  SKIP_WITHOUT_DEVICE();
  void* first = nullptr;
  {
    const Tensor t = Empty({1000}, {.device = CUDA(0)});
    first = t.raw_data();
  }
  const CachingAllocatorStats before = cuda::MemoryStats(0);
  const Tensor t = Empty({1000}, {.device = CUDA(0)});
  EXPECT_EQ(t.raw_data(), first);
  const CachingAllocatorStats after = cuda::MemoryStats(0);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  EXPECT_EQ(after.num_segment_allocs, before.num_segment_allocs);
}

TEST(CudaRuntime, CopiesRoundTripBetweenHostAndDevice) {
  SKIP_WITHOUT_DEVICE();
  const Tensor h = testing::RandomTensor({37, 5}, 1, DType::kFloat32);
  const Tensor d = h.To(CUDA(0));
  EXPECT_TRUE(d.device().is_cuda());
  EXPECT_EQ(d.To(kCPU).ToDoubles(), h.ToDoubles());
  const Tensor d2 = d.Clone();  // device -> device
  EXPECT_EQ(d2.ToDoubles(), h.ToDoubles());
  const Tensor strided = d.T().Contiguous();  // strided copy kernel
  EXPECT_EQ(strided.ToDoubles(), h.T().Contiguous().ToDoubles());
  if (cuda::DeviceCount() > 1) {
    const Tensor other = d.To(CUDA(1));
    EXPECT_EQ(other.ToDoubles(), h.ToDoubles());
  }
}

TEST(CudaRuntime, RecordStreamDefersReuseUntilTheSideStreamIsDone) {
  SKIP_WITHOUT_DEVICE();
  cudaStream_t side = nullptr;
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  const CachingAllocatorStats before = cuda::MemoryStats(0);
  {
    const Tensor t = Empty({1 << 20}, {.device = CUDA(0)});
    cuda::RecordStream(t, side);
  }
  EXPECT_EQ(cuda::MemoryStats(0).num_pending_frees, before.num_pending_frees + 1);
  OCTET_CUDA_CHECK(cudaStreamSynchronize(side));
  const Tensor u = Empty({1 << 20}, {.device = CUDA(0)});  // processes the completed event
  EXPECT_GE(cuda::MemoryStats(0).cache_hits, before.cache_hits + 1);
  OCTET_CUDA_CHECK(cudaStreamDestroy(side));
}

TEST(CudaRuntime, EmptyCacheReturnsUnusedSegments) {
  SKIP_WITHOUT_DEVICE();
  { const Tensor t = Empty({int64_t{64} << 20}, {.dtype = DType::kUInt8, .device = CUDA(0)}); }
  const size_t reserved = cuda::MemoryStats(0).reserved_bytes;
  cuda::EmptyCache();
  EXPECT_LE(cuda::MemoryStats(0).reserved_bytes + (size_t{64} << 20), reserved);
}

TEST(CudaRuntime, OutOfMemoryIsAClearError) {
  SKIP_WITHOUT_DEVICE();
  const int64_t too_much = static_cast<int64_t>(cuda::Props(0).total_mem) * 2;
  const std::string msg = ErrorOf([&] { Empty({too_much}, {.dtype = DType::kUInt8, .device = CUDA(0)}); });
  EXPECT_NE(msg.find("out of memory on cuda:0: tried to allocate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed cudaMalloc left no sticky error
  // The device still works.
  EXPECT_EQ(Ones({3}, {.device = CUDA(0)}).ToDoubles(), (std::vector<double>{1, 1, 1}));
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
