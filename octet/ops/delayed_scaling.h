// The delayed-scaling update of many FP8 slots at once, on the slots' device
// without a host sync: for each slot, the amax observed this step is pushed
// into its history and the next scale and scale_inv are computed from it by
// core/delayed_scaling.h's UpdateDelayedScalingSlot (the same function on
// the CPU and inside the CUDA kernel, so both give bit-identical scales).
#pragma once

#include <vector>

#include <octet/core/delayed_scaling.h>
#include <octet/core/tensor.h>

namespace octet {

// One slot's state. Every tensor is float32, contiguous, on one device:
//   history   [H] (H >= 1), newest first, updated in place
//   amax      [1] this step's amax (read)
//   scale     [1] previous scale on entry, next scale on return
//   scale_inv [1] written: 1 / scale
// fp8_max: the slot format's max finite value (448 for E4M3, 57344 for E5M2).
struct DelayedScalingSlot {
  Tensor history;
  Tensor amax;
  Tensor scale;
  Tensor scale_inv;
  float fp8_max = 448.0f;
};

// Updates every slot; slots on several devices are grouped per device (one
// kernel launch per group on CUDA). Throws octet::Error naming the slot for a
// tensor of the wrong dtype, shape or device.
void UpdateDelayedScaling(const std::vector<DelayedScalingSlot>& slots, const DelayedScalingConfig& config);

// The fused update of every slot of a model at once (amp::Fp8State): one
// UpdateDelayedScalingBufferSlot per slot over contiguous buffers — a single
// kernel launch on CUDA, the host loop on the CPU, the same bits on both.
// All tensors contiguous, on one device:
//   history   float32 [S, H] (S >= 0, H >= 1), updated in place
//   amax      float32 [S]    read, then reset to kNoAmaxRecorded
//   scale     float32 [S]    previous scale on entry, next scale on return
//   scale_inv float32 [S]    written for the updated slots
//   fp8_max   float32 [S]    each slot format's max finite value (> 0)
//   algo      uint8   [S]    each slot's AmaxAlgo
// config.algo is ignored. Throws octet::Error naming the tensor that is wrong.
void UpdateDelayedScalingBuffers(const Tensor& history, const Tensor& amax, const Tensor& scale,
                                 const Tensor& scale_inv, const Tensor& fp8_max, const Tensor& algo,
                                 const DelayedScalingConfig& config);

}  // namespace octet
