// The one way a device test skips.
//
// NOTE [require cuda]: without a usable CUDA device (no GPU, no driver, or a
// build without the CUDA backend) a device test skips, so CI and every
// machine without a GPU stay green. On a GPU machine that would let a broken
// driver set-up pass vacuously, so there OCTET_REQUIRE_CUDA=1 (exported by
// shared/gpu/on_device.sh) turns each such skip into a failure that says why
// no device was usable.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>

#if OCTET_WITH_CUDA
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet::testing {

// OCTET_REQUIRE_CUDA's value: unset, "" or "0" -> false; "1" -> true.
// Anything else is taken as true (asking for a device by mistake fails loudly
// rather than skipping quietly).
inline bool CudaRequiredByValue(const char* value) {
  if (value == nullptr) return false;
  const std::string_view v(value);
  return !(v.empty() || v == "0");
}
inline bool CudaRequired() { return CudaRequiredByValue(std::getenv("OCTET_REQUIRE_CUDA")); }

// "" when a CUDA device is usable here, else why not.
inline std::string NoCudaReason() {
#if OCTET_WITH_CUDA
  if (::octet::cuda::IsAvailable()) return "";
  return "no CUDA device: " + ::octet::cuda::UnavailableReason();
#else
  return "no CUDA device: octet was built without the CUDA backend";
#endif
}

}  // namespace octet::testing

// Skips the test (or fails it under OCTET_REQUIRE_CUDA=1) when no CUDA device
// is usable. A statement: use it as `OCTET_SKIP_WITHOUT_CUDA();` at the top of
// a test body or a fixture's SetUp.
#define OCTET_SKIP_WITHOUT_CUDA()                                                                  \
  if (const std::string octet_no_cuda_ = ::octet::testing::NoCudaReason(); octet_no_cuda_.empty()) { \
  } else if (::octet::testing::CudaRequired())                                                     \
    GTEST_FAIL() << "OCTET_REQUIRE_CUDA=1 but " << octet_no_cuda_;                                 \
  else                                                                                             \
    GTEST_SKIP() << octet_no_cuda_
