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

#include "core/macros.h"
#include "core/scaling_math.h"

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
