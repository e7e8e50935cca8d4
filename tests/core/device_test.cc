// Device names and the device-count hook: ParseDevice accepts exactly
// cpu / cuda / cuda:N; CheckDeviceExists explains a missing device.
#include <octet/core/device.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace octet
