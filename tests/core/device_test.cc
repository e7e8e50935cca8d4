// Device names and the device-count hook: ParseDevice accepts exactly
// cpu / cuda / cuda:N; CheckDeviceExists explains a missing device.
#include <octet/core/device.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <octet/core/allocator.h>
#include <octet/core/device_control.h>
#include <octet/core/caching_allocator.h>
#include <octet/core/tensor.h>

#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::testing::HasSubstr;

TEST(Device, ParsesTheNamesToStringPrints) {
  EXPECT_EQ(ParseDevice("cpu"), kCPU);
  EXPECT_EQ(ParseDevice("cuda"), CUDA(0));
  EXPECT_EQ(ParseDevice("cuda:3"), CUDA(3));
  for (Device d : {kCPU, CUDA(0), CUDA(12)}) EXPECT_EQ(ParseDevice(ToString(d)), d);
  for (const char* bad : {"", "CPU", "gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999999999", " cpu", "cuda1"}) {
    EXPECT_THAT(ErrorOf([&] { ParseDevice(bad); }),
                HasSubstr("unknown device '" + std::string(bad) + "' (expected cpu, cuda or cuda:N)"));
  }
}

TEST(Device, CountsAndExplainsMissingDevices) {
  EXPECT_EQ(DeviceCount(DeviceType::kCPU), 1);
  EXPECT_EQ(DeviceUnavailableReason(DeviceType::kCPU), "");
  EXPECT_NO_THROW(CheckDeviceExists(kCPU, "test"));
  EXPECT_THAT(ErrorOf([] { CheckDeviceExists(Device(DeviceType::kCPU, 1), "test"); }),
              HasSubstr("test: cpu does not exist (this machine has 1 cpu device)"));
  const int n = DeviceCount(DeviceType::kCUDA);
  if (n == 0) {
    // Either no backend in this build, or the driver's reason (no GPU here).
    EXPECT_FALSE(DeviceUnavailableReason(DeviceType::kCUDA).empty());
    EXPECT_THAT(ErrorOf([] { CheckDeviceExists(CUDA(0), "--device"); }),
                HasSubstr("--device: cuda:0 is not available: " + DeviceUnavailableReason(DeviceType::kCUDA)));
#if !OCTET_WITH_CUDA
    EXPECT_THAT(DeviceUnavailableReason(DeviceType::kCUDA), HasSubstr("no CUDA backend"));
#endif
  } else {
    EXPECT_NO_THROW(CheckDeviceExists(CUDA(n - 1), "test"));
    EXPECT_THAT(ErrorOf([&] { CheckDeviceExists(CUDA(n), "test"); }), HasSubstr("does not exist"));
  }
}

// ---- public device control on the CPU (CUDA: tests/cuda/device_control_test.cc) ----

// Sizes as the CPU allocator counts them: cached blocks (64 KiB and more)
// rounded by the caching allocator, smaller ones to 64 bytes.
int64_t CountedSize(int64_t nbytes, bool caching) {
  if (caching && nbytes >= (int64_t{64} << 10)) return static_cast<int64_t>(CachingAllocator::RoundSize(nbytes));
  return (nbytes + 63) / 64 * 64;
}

TEST(DeviceControl, CpuStatsFollowAllocationsAndFrees) {
  const bool caching = GetCpuMemoryStats().caching_enabled;  // OCTET_CPU_CACHING=0 turns it off
  const MemoryStats before = GetMemoryStats(kCPU);
  EXPECT_EQ(before.cached_bytes, before.reserved_bytes - before.allocated_bytes);
  const int64_t big = CountedSize(int64_t{300000} * 4, caching), small = CountedSize(1000 * 4, caching);
  {
    Tensor a = Empty({300000});  // float32: 1.2 MB
    Tensor b = Empty({1000});    // 4000 bytes
    const MemoryStats during = GetMemoryStats(kCPU);
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + big + small);
    EXPECT_EQ(during.num_allocs, before.num_allocs + 2);
    EXPECT_EQ(during.num_frees, before.num_frees);
    EXPECT_GE(during.reserved_bytes, during.allocated_bytes);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
  }
  const MemoryStats after = GetMemoryStats(kCPU);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.num_allocs, before.num_allocs + 2);
  EXPECT_EQ(after.num_frees, before.num_frees + 2);
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + big + small);
}

TEST(DeviceControl, ResetPeakStartsFromWhatIsInUse) {
  { Tensor t = Empty({500000}); }
  const MemoryStats high = GetMemoryStats(kCPU);
  EXPECT_GE(high.peak_allocated_bytes, high.allocated_bytes + 2000000);
  ResetPeakMemoryStats(kCPU);
  const MemoryStats reset = GetMemoryStats(kCPU);
  EXPECT_EQ(reset.peak_allocated_bytes, reset.allocated_bytes);
  Tensor t = Empty({1000});
  EXPECT_EQ(GetMemoryStats(kCPU).peak_allocated_bytes, reset.allocated_bytes + 4032);  // 4000 rounded to 64
}

TEST(DeviceControl, EmptyCacheReleasesTheCachedBlocks) {
  if (!GetCpuMemoryStats().caching_enabled) GTEST_SKIP() << "OCTET_CPU_CACHING=0: nothing is cached";
  { Tensor t = Empty({int64_t{3} << 20}); }  // 12 MiB: its own segment, cached after the free
  const MemoryStats cached = GetMemoryStats(kCPU);
  EXPECT_GE(cached.cached_bytes, int64_t{12} << 20);
  EmptyCache(kCPU);
  const MemoryStats emptied = GetMemoryStats(kCPU);
  EXPECT_EQ(emptied.allocated_bytes, cached.allocated_bytes);
  EXPECT_LE(emptied.reserved_bytes, cached.reserved_bytes - (int64_t{12} << 20));
  // Blocks in use stay: only free, unsplit segments go back.
  Tensor kept = Empty({int64_t{3} << 20});
  EmptyCache(kCPU);
  EXPECT_GE(GetMemoryStats(kCPU).reserved_bytes, int64_t{12} << 20);
}

// The resident set of this process in KiB (VmRSS), 0 where unreadable.
int64_t ResidentKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  return 0;
}

// NOTE [arena segments]: a free block inside an arena that still holds live
// blocks gives its pages back on EmptyCache, and only its own: the blocks
// around it keep their bytes even where they share a page with it.
TEST(DeviceControl, CpuEmptyCacheGivesBackTheFreeBlocksOfALiveArena) {
  if (!GetCpuMemoryStats().caching_enabled) GTEST_SKIP() << "OCTET_CPU_CACHING=0: nothing is cached";
  EmptyCache(kCPU);
  // Sizes that are not multiples of a page, so neighbours can share pages.
  Tensor before = Full({300100}, 1.5);
  Tensor middle = Full({int64_t{3} << 20}, 2.5);  // 12 MiB, written: resident
  Tensor after = Full({100003}, 3.5);
  middle = Tensor();
  const CpuMemoryStats cached = GetCpuMemoryStats();
  const int64_t rss_cached = ResidentKiB();
  EmptyCache(kCPU);
  const CpuMemoryStats emptied = GetCpuMemoryStats();
  EXPECT_LE(emptied.cached_committed_bytes + (size_t{12} << 20) - 8192, cached.cached_committed_bytes);
  EXPECT_EQ(emptied.cached_allocated_bytes, cached.cached_allocated_bytes);
  if (rss_cached > 0) EXPECT_LE(ResidentKiB(), rss_cached - 11 * 1024) << "the 12 MiB block's pages stayed resident";
  auto count = [](const Tensor& t, float value) {
    const float* p = t.data<float>();
    return std::count(p, p + t.numel(), value);
  };
  EXPECT_EQ(count(before, 1.5f), 300100);
  EXPECT_EQ(count(after, 3.5f), 100003);
  // The memory is still the allocator's to hand out again.
  Tensor again = Full({int64_t{3} << 20}, 4.0);
  EXPECT_EQ(count(again, 4.0f), int64_t{3} << 20);
}

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer the CPU cache's free memory is poisoned (NOTE [cpu
// caching] in core/allocator.cc): a write just past a cached tensor, into
// the rounding of its block, is reported.
TEST(DeviceControlDeathTest, AsanReportsAWritePastACachedCpuTensor) {
  if (!GetCpuMemoryStats().caching_enabled) GTEST_SKIP() << "OCTET_CPU_CACHING=0: nothing is cached";
  EXPECT_DEATH(
      {
        Tensor t = Empty({16385});  // 65540 bytes: cached, in a block of 66048
        volatile float* p = t.data<float>();
        p[16385] = 1.0f;
      },
      "AddressSanitizer");
}
#endif

TEST(DeviceControl, CpuStreamGuardIsANoOp) {
  { StreamGuard guard(kCPU, nullptr); }
  Synchronize(kCPU);
#if !OCTET_WITH_CUDA
  int not_a_stream = 0;
  EXPECT_THAT(ErrorOf([&] { StreamGuard guard(kCPU, &not_a_stream); }),
              HasSubstr("this build of octet has no CUDA backend"));
#endif
}

TEST(DeviceControl, MissingDevicesAreErrors) {
  const Device bad_cpu(DeviceType::kCPU, 1);
  EXPECT_THAT(ErrorOf([&] { GetMemoryStats(bad_cpu); }), HasSubstr("octet::GetMemoryStats: cpu does not exist"));
  EXPECT_THAT(ErrorOf([&] { ResetPeakMemoryStats(bad_cpu); }), HasSubstr("octet::ResetPeakMemoryStats"));
  EXPECT_THAT(ErrorOf([&] { EmptyCache(bad_cpu); }), HasSubstr("octet::EmptyCache"));
  EXPECT_THAT(ErrorOf([&] { StreamGuard guard(bad_cpu, nullptr); }), HasSubstr("octet::StreamGuard"));
  const Device missing = CUDA(DeviceCount(DeviceType::kCUDA));  // one past the last
  EXPECT_EQ(NativeStream(kCPU), nullptr);  // the CPU has no stream
  for (auto call : {+[](Device d) { GetMemoryStats(d); }, +[](Device d) { ResetPeakMemoryStats(d); },
                    +[](Device d) { EmptyCache(d); }, +[](Device d) { StreamGuard g(d, nullptr); },
                    +[](Device d) { Synchronize(d); }, +[](Device d) { NativeStream(d); }}) {
    const std::string msg = ErrorOf([&] { call(missing); });
    EXPECT_THAT(msg, HasSubstr(ToString(missing))) << msg;
    EXPECT_THAT(msg, ::testing::AnyOf(HasSubstr("is not available"), HasSubstr("does not exist"))) << msg;
  }
}

}  // namespace
}  // namespace octet
