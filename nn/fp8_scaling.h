// The scaling state of one FP8 tensor slot (one operand of one Linear:
// its input, its weight or its output gradient) and the per-slot telemetry.
//
// NOTE [amax history layout]: the history is a float32 tensor [H] with the
// newest amax at index 0; recording shifts the older ones right and drops the
// oldest (Transformer Engine's roll). No ring index is needed, so the two
// tensors (amax_history, scale) are the whole state: saving and restoring them
// resumes delayed scaling bit-identically.
//
// NOTE [delayed scaling order]: a quantization at step t uses the scale
// computed after step t-1's record; its own amax is then recorded and the
// scale for step t+1 is recomputed from the history:
//   scale = ComputeScale(Reduce(history), fp8_max, margin, previous, pow2)
// (core/scaling_math.h: (fp8_max / amax) / 2^margin, previous kept when amax
// is 0 or not finite). A slot that has never seen a nonzero amax (history all
// zero: the first step of a run) uses current scaling for that quantization,
// so step 0 is not quantized with an arbitrary scale of 1 — that would flush
// most of a small gradient to zero in E5M2.
//
// Recording happens only when the caller says so: a Linear records in
// training mode and not in eval mode, so evaluation and sampling leave the
// scaling state (and hence the training run) unchanged.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/amp_recipe.h"

namespace octet::nn::amp {

// Saturation and underflow counts of quantizing x with `scale` to fp8_dtype,
// computed as the cast does (one float32 multiply per element):
//   saturated: |x * scale| > fp8 max finite (the cast clamps it);
//   underflow: x != 0 and |x * scale| <= half the smallest subnormal (the cast
//              rounds it to zero).
// x: any shape, float32/float64/bfloat16/float16, CPU (other devices are
// copied to the CPU).
struct ClipCounts {
  int64_t saturated = 0;
  int64_t underflow = 0;
  int64_t numel = 0;
};
ClipCounts CountFp8Clipping(const Tensor& x, float scale, DType fp8_dtype);

// The last quantization seen by a slot.
struct SlotObservation {
  float amax = 0.0f;   // max |x| of the quantized tensor
  float scale = 1.0f;  // the scale it was quantized with
  double saturated = 0.0;  // fractions of numel; only when telemetry was on
  double underflow = 0.0;
  int64_t numel = 0;
  int64_t count = 0;  // quantizations observed since construction
  bool has_clip_stats = false;
};

class Fp8Slot {
 public:
  // `history` and `scale` point at tensors the owner keeps (module buffers:
  // see NOTE [module slots] in nn/module.h); they must outlive the slot.
  // Initialises them to zeros [H] and [1.0].
  Fp8Slot(std::string name, DType dtype, Tensor* history, Tensor* scale, int history_len);

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Tensor& amax_history() const { return *history_; }
  float scale() const;
  // False until a nonzero amax has been recorded (NOTE [delayed scaling order]).
  bool initialized() const;

  // The scale for quantizing a tensor whose amax is `amax` (needed only for
  // current scaling or an uninitialised slot: see NeedsAmaxFirst).
  float ScaleFor(const Recipe& recipe, float amax) const;
  bool NeedsAmaxFirst(const Recipe& recipe) const {
    return recipe.scaling == Scaling::kCurrent || !initialized();
  }
  // Pushes `amax` into the history; for delayed scaling recomputes the next
  // scale from it, for current scaling stores `used_scale`.
  void Record(const Recipe& recipe, float amax, float used_scale);
  // Telemetry of the last quantization (filled by the owner).
  SlotObservation& observation() { return obs_; }
  const SlotObservation& observation() const { return obs_; }

 private:
  std::string name_;
  DType dtype_;
  Tensor* history_;
  Tensor* scale_;
  SlotObservation obs_;
};

}  // namespace octet::nn::amp
