// The delayed-scaling update of one FP8 slot, written once for host and
// device: the CUDA kernel that updates every slot of a model in one launch
// (ops/cuda/cast.cu, LaunchDelayedScalingUpdate) and the CPU path call this
// same function, so both backends produce bit-identical scales.
//
// History layout and order follow nn/fp8_scaling.h (NOTE [amax history
// layout], NOTE [delayed scaling order]): the history is float32 [H] with the
// newest amax at index 0; an update shifts the older entries right (dropping
// the oldest), stores the new amax at 0, reduces the history (max or most
// recent) and computes
//   scale = ComputeScale(reduced, fp8_max, margin, previous_scale, pow2)
//         = (fp8_max / reduced) / 2^margin, or previous_scale when reduced is
//           0 or not finite (core/scaling_math.h),
//   scale_inv = 1 / scale.
#pragma once

#include <octet/core/macros.h>
#include <octet/core/scaling_math.h>

namespace octet {

// Recipe-wide settings of a delayed-scaling update.
struct DelayedScalingConfig {
  int margin = 0;
  AmaxAlgo algo = AmaxAlgo::kMax;
  bool power_of_two = false;
};

// history: float32 [length], newest first, updated in place (length >= 1).
// amax: the amax observed by this step's quantization.
// fp8_max: max finite value of the slot's FP8 format (448 for E4M3, 57344 for E5M2).
// scale, scale_inv: in/out; *scale is the previous scale on entry.
OCTET_HOST_DEVICE inline void UpdateDelayedScalingSlot(float* history, int length, float amax, float fp8_max,
                                                       const DelayedScalingConfig& config, float* scale,
                                                       float* scale_inv) {
  for (int i = length - 1; i > 0; --i) history[i] = history[i - 1];
  history[0] = amax;
  const float reduced = ReduceAmaxHistory(history, length, 0, config.algo);
  const float next = ComputeScale(reduced, fp8_max, config.margin, *scale, config.power_of_two);
  *scale = next;
  *scale_inv = 1.0f / next;
}

}  // namespace octet

namespace octet {

// Every delayed-scaling slot of a model in contiguous buffers (the layout of
// nn/fp8_state.h's amp::Fp8State), as UpdateDelayedScalingBuffers and the
// CUDA kernel see them. Slot i owns history[i*length .. i*length+length),
// amax[i], scale[i], scale_inv[i], fp8_max[i] and algo[i] (an AmaxAlgo).
//
// NOTE [unrecorded slot]: amax[i] < 0 (the reset value, kNoAmaxRecorded)
// means nothing was quantized with slot i since the last update; its history
// and scale are then left alone. Every quantization max-combines its amax
// into amax[i] (so the micro-batches of one optimizer step count once), and
// the update resets amax[i] to kNoAmaxRecorded. A NaN amax stays NaN through
// the max-combine and goes into the history (ComputeScale then keeps the
// previous scale).
inline constexpr float kNoAmaxRecorded = -1.0f;

struct DelayedScalingBuffers {
  float* history = nullptr;
  float* amax = nullptr;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  const float* fp8_max = nullptr;
  const uint8_t* algo = nullptr;
  int slots = 0;
  int length = 0;
};

// Slot i of `b` (0 <= i < b.slots): one UpdateDelayedScalingSlot with the
// slot's own amax algorithm, then amax[i] = kNoAmaxRecorded. config.algo is
// ignored (each slot carries its own).
OCTET_HOST_DEVICE inline void UpdateDelayedScalingBufferSlot(const DelayedScalingBuffers& b, int i,
                                                             DelayedScalingConfig config) {
  const float amax = b.amax[i];
  if (!(amax < 0.0f)) {  // NOTE [unrecorded slot]; NaN is a recorded amax
    config.algo = static_cast<AmaxAlgo>(b.algo[i]);
    UpdateDelayedScalingSlot(b.history + static_cast<int64_t>(i) * b.length, b.length, amax, b.fp8_max[i], config,
                             b.scale + i, b.scale_inv + i);
  }
  b.amax[i] = kNoAmaxRecorded;
}

}  // namespace octet
