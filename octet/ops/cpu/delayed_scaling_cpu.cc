// CPU kernel of the delayed-scaling update: the host loop over
// core/delayed_scaling.h's UpdateDelayedScalingSlot.
#include <octet/ops/delayed_scaling_kernels.h>

namespace octet {
namespace {

void DelayedScalingUpdateCpu(Device, const std::vector<DelayedScalingSlotPtrs>& slots,
                             const DelayedScalingConfig& config) {
  for (const DelayedScalingSlotPtrs& s : slots) {
    UpdateDelayedScalingSlot(s.history, s.length, *s.amax, s.fp8_max, config, s.scale, s.scale_inv);
  }
}

}  // namespace

OCTET_REGISTER_KERNEL(delayed_scaling_update, DeviceType::kCPU, &DelayedScalingUpdateCpu);


namespace {
void DelayedScalingBuffersUpdateCpu(Device, const DelayedScalingBuffers& b, const DelayedScalingConfig& config) {
  for (int i = 0; i < b.slots; ++i) UpdateDelayedScalingBufferSlot(b, i, config);
}
}  // namespace

OCTET_REGISTER_KERNEL(delayed_scaling_buffers_update, DeviceType::kCPU, &DelayedScalingBuffersUpdateCpu);

}  // namespace octet
