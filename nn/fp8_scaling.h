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
#include <memory>
#include <string>

#include "core/tensor.h"
#include "nn/amp_recipe.h"

namespace octet::nn::amp {

// Saturation and underflow counts of quantizing x with `scale` to fp8_dtype,
// computed as the cast does (one float32 multiply per element):
//   saturated: the cast clamps |x * scale|: it would round, to nearest even,
//              past the max finite value (> 464 for E4M3, whose max is 448;
//              >= 61440 for E5M2, max 57344). Values just above the max
//              that round to it anyway are not counted;
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

// The last quantization seen by a slot. amax and scale are read from the
// device lazily, when Fp8Slot::observation() is asked for them (NOTE [slot
// state on the device]).
struct SlotObservation {
  float amax = 0.0f;   // max |x| of the quantized tensor
  float scale = 1.0f;  // the scale it was quantized with
  double saturated = 0.0;  // fractions of numel; only when telemetry was on
  double underflow = 0.0;
  int64_t numel = 0;
  int64_t count = 0;  // quantizations observed since construction
  bool has_clip_stats = false;
};

// NOTE [slot state on the device]: a slot's history and scale live on the
// device of the module that owns them, and every step of the scaling recipe
// is a tensor op on that device: the amax comes out of the quantize kernel,
// current scaling computes its scale from that amax tensor, and Record is
// one UpdateDelayedScaling launch (ops/delayed_scaling.h; the same
// core/delayed_scaling.h function on the CPU and in the CUDA kernel, so both
// backends produce the same bits). A training step therefore never waits for
// the GPU to learn a scale. Two things still read the device:
//   - initialized(), until the slot has once seen a nonzero amax: the answer
//     is then remembered for as long as nobody but the slot writes the
//     history (a checkpoint load or a move to another device re-checks it,
//     through the storage and its version counter). A slot whose tensors are
//     all zero (e.g. a layer whose gradient is exactly zero) keeps asking.
//   - observation() and scale(), which telemetry and tests call.
// Once initialised, a slot stays initialised: a history whose nonzero
// entries have all rolled out keeps the last scale (ComputeScale keeps the
// previous scale when the reduced amax is 0) instead of going back to
// current scaling.
class Fp8Slot {
 public:
  // `history` and `scale` point at tensors the owner keeps (module buffers:
  // see NOTE [module slots] in nn/module.h); they must outlive the slot.
  // Initialises them to zeros [H] and [1.0] on `device`.
  Fp8Slot(std::string name, DType dtype, Tensor* history, Tensor* scale, int history_len, Device device = kCPU);

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  Device device() const { return history_->device(); }
  const Tensor& amax_history() const { return *history_; }
  // The scale the next delayed-scaling quantization uses: float32 [1] on
  // device(). scale() is its value (a device sync for a GPU slot).
  const Tensor& scale_tensor() const { return *scale_; }
  float scale() const;
  // False until a nonzero amax has been recorded (NOTE [delayed scaling
  // order], NOTE [slot state on the device]).
  bool initialized() const;
  bool NeedsAmaxFirst(const Recipe& recipe) const {
    return recipe.scaling == Scaling::kCurrent || !initialized();
  }

  // The scale to quantize a tensor whose max |x| is `amax` (float32 [1] on
  // device()), as a new float32 [1] tensor on device(): when
  // NeedsAmaxFirst(recipe), current scaling from amax (ComputeScale with the
  // recipe's margin and power-of-two rule; the slot's scale when amax is 0 or
  // not finite); otherwise a copy of the slot's scale. No host sync.
  Tensor ScaleFor(const Recipe& recipe, const Tensor& amax) const;
  // Current scaling from `amax` alone (what ScaleFor does when
  // NeedsAmaxFirst): for a caller that has already asked NeedsAmaxFirst,
  // which reads the device while the slot is uninitialised.
  Tensor CurrentScale(const Recipe& recipe, const Tensor& amax) const;

  // Pushes `amax` (float32 [1] on device()) into the history; for delayed
  // scaling recomputes the next scale from the history, for current scaling
  // stores `used_scale` (float32 [1]). No host sync. Errors: a tensor of the
  // wrong dtype, size or device (naming the slot).
  void Record(const Recipe& recipe, const Tensor& amax, const Tensor& used_scale);

  // Notes a quantization of `numel` elements with `scale` whose amax was
  // `amax` (device tensors, read only when observation() is called), and its
  // clip counts when `clip` is given.
  void Observe(const Tensor& amax, const Tensor& scale, int64_t numel, const ClipCounts* clip);
  // Telemetry of the last quantization (reads the pending device values).
  const SlotObservation& observation() const;

 private:
  void CheckOnDevice(const Tensor& t, const char* what) const;
  bool KnownInitialized() const;  // without reading the history

  std::string name_;
  DType dtype_;
  Tensor* history_;
  Tensor* scale_;
  // NOTE [slot state on the device]: the storage and version at which the
  // history was last seen nonzero.
  mutable std::weak_ptr<Storage> known_storage_;
  mutable uint64_t known_version_ = 0;
  mutable SlotObservation obs_;
  mutable Tensor pending_amax_, pending_scale_;
};

}  // namespace octet::nn::amp
