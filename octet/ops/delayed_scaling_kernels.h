// Kernel signatures of the delayed-scaling update (internal: shared by
// ops/delayed_scaling.cc and the backends; the public API is
// ops/delayed_scaling.h).
#pragma once

#include <vector>

#include <octet/core/delayed_scaling.h>
#include <octet/ops/delayed_scaling.h>
#include <octet/ops/registry.h>

namespace octet {

// Raw pointers of one slot, as the kernels see them.
struct DelayedScalingSlotPtrs {
  float* history = nullptr;
  const float* amax = nullptr;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  int length = 0;
  float fp8_max = 448.0f;
};

// All slots on `device` (already checked).
using DelayedScalingUpdateFn = void(Device device, const std::vector<DelayedScalingSlotPtrs>& slots,
                                    const DelayedScalingConfig& config);
OCTET_DECLARE_KERNEL(delayed_scaling_update, DelayedScalingUpdateFn);

// The raw buffers (already checked), all on `device`.
using DelayedScalingBuffersFn = void(Device device, const DelayedScalingBuffers& buffers,
                                     const DelayedScalingConfig& config);
OCTET_DECLARE_KERNEL(delayed_scaling_buffers_update, DelayedScalingBuffersFn);

}  // namespace octet
