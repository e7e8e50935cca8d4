// FP8 scaling math, written once for host and device (the CUDA delayed-scaling
// kernel and the CPU recipe both call these).
//
// NOTE [scale direction]: `scale` multiplies a real value before the cast to
// FP8; `scale_inv` = 1/scale multiplies an FP8 value after it to recover the
// real value. A per-tensor scale maps the observed amax to the format's max
// finite value, divided by 2^margin for headroom.
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

namespace octet {

OCTET_HOST_DEVICE inline bool IsFiniteFloat(float x) {
  // x - x is 0 for finite x and NaN for inf/NaN; works without <cmath> on device.
  return (x - x) == 0.0f;
}

// The larger of two amaxes, NaN winning wherever it appears (NOTE [amax
// combine order] in ops/cpu/cast_cpu.cc): how the CPU FP8 kernels and the
// bf16 row converters combine the amaxes of their blocks or rows.
OCTET_HOST_DEVICE inline float MaxNaN(float a, float b) { return (b > a || b != b) ? b : a; }

// Power of two at or below x (x > 0, finite).
OCTET_HOST_DEVICE inline float RoundDownToPowerOfTwo(float x) {
  uint32_t bits;
  __builtin_memcpy(&bits, &x, 4);
  bits &= 0xFF800000u;  // keep sign and exponent
  float r;
  __builtin_memcpy(&r, &bits, 4);
  return r;
}

// The scale that maps `amax` to `fp8_max / 2^margin`. When amax is zero or not
// finite the previous scale is kept (nothing to learn from this observation);
// when the result would overflow float, the previous scale is kept too.
OCTET_HOST_DEVICE inline float ComputeScale(float amax, float fp8_max, int margin, float previous_scale,
                                            bool power_of_two) {
  if (!(amax > 0.0f) || !IsFiniteFloat(amax)) return previous_scale;
  float scale = fp8_max / amax;
  for (int i = 0; i < margin; ++i) scale *= 0.5f;
  for (int i = 0; i > margin; --i) scale *= 2.0f;
  if (!IsFiniteFloat(scale) || scale == 0.0f) return previous_scale;
  if (power_of_two) scale = RoundDownToPowerOfTwo(scale);
  return scale;
}

enum class AmaxAlgo : uint8_t { kMax = 0, kMostRecent = 1 };

// Reduces an amax history ring (newest at `newest`) to the amax that sets the
// next scale.
OCTET_HOST_DEVICE inline float ReduceAmaxHistory(const float* history, int length, int newest, AmaxAlgo algo) {
  if (algo == AmaxAlgo::kMostRecent) return history[newest];
  float m = 0.0f;
  for (int i = 0; i < length; ++i) {
    const float h = history[i];
    m = (h > m || h != h) ? h : m;  // NaN wins so it is noticed, then rejected by ComputeScale
  }
  return m;
}

}  // namespace octet
