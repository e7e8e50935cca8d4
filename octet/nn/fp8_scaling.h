// The scaling state of one FP8 tensor slot (one operand of one Linear:
// its input, its weight or its output gradient) and the per-slot telemetry.
// The slots of a model are updated together by its amp::Fp8State
// (nn/fp8_state.h), which keeps their tensors in contiguous buffers.
//
// NOTE [amax history layout]: the history is a float32 tensor [H] with the
// newest amax at index 0; an update shifts the older ones right and drops the
// oldest (Transformer Engine's roll). No ring index is needed, so the two
// tensors (amax_history, scale) are the whole state: saving and restoring them
// after an update resumes delayed scaling bit-identically.
//
// NOTE [delayed scaling order]: every quantization during optimizer step t
// uses the scale computed by the update after step t-1; the amaxes of step
// t's quantizations of a slot (one per micro-batch) are max-combined, and the
// update after step t (amp::Fp8State::Update) pushes that one amax into the
// history and recomputes the scale for step t+1:
//   scale = ComputeScale(Reduce(history), fp8_max, margin, previous, pow2)
// (core/scaling_math.h: (fp8_max / amax) / 2^margin, previous kept when amax
// is 0 or not finite). A slot that has not been updated with an amax yet (the
// first step of a run) uses current scaling, so step 0 is not quantized with
// an arbitrary scale of 1 — that would flush most of a small gradient to zero
// in E5M2 (NOTE [initialised on the host]).
//
// Recording happens only when the caller says so: a Linear records in
// training mode and not in eval mode, so evaluation and sampling leave the
// scaling state (and hence the training run) unchanged.
#pragma once

#include <functional>

#include <cstdint>
#include <memory>
#include <string>

#include <octet/core/tensor.h>
#include <octet/nn/amp_recipe.h>

namespace octet::nn::amp {

// Saturation and underflow counts of quantizing x with `scale` to fp8_dtype,
// computed as the cast does (one float32 multiply per element):
//   saturated: the cast clamps |x * scale|: it would round, to nearest even,
//              past the max finite value (> 464 for E4M3, whose max is 448;
//              >= 61440 for E5M2, max 57344). Values just above the max
//              that round to it anyway are not counted;
//   underflow: x != 0 and |x * scale| <= half the smallest subnormal (the cast
//              rounds it to zero).
// x: any shape and device, float32/float64/bfloat16/float16 (the CUDA
// backend counts on the host: ops/cuda/fp8_stats_cuda.cc).
struct ClipCounts {
  int64_t saturated = 0;
  int64_t underflow = 0;
  int64_t numel = 0;
};
ClipCounts CountFp8Clipping(const Tensor& x, float scale, DType fp8_dtype);
// The clip counts of map(x), with x taken as rows of its last dim and map a
// row-wise function to float32 (a fused kernel's float32 values, recomputed
// for telemetry), evaluated kRowsPerBlock rows at a time so that no float32
// copy of the whole tensor is made.
ClipCounts CountFp8ClippingOfRows(const Tensor& x, const std::function<Tensor(const Tensor& rows)>& map, float scale,
                                  DType fp8_dtype);

// The scale current scaling gives a tensor whose max |x| is `amax` (float32
// [1]) for the FP8 dtype `fp8`: ComputeScale (core/scaling_math.h) with the
// recipe's margin and power-of-two rule, `previous` (float32 [1], amax's
// device) kept when amax is 0 or not finite. A new float32 [1] tensor on
// amax's device; no host sync. Errors: fp8 not an FP8 dtype, tensors of
// another dtype, size or device (octet::Error naming the update).
Tensor CurrentScale(const Recipe& recipe, DType fp8, const Tensor& amax, const Tensor& previous);

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

// NOTE [slot state on the device]: a slot's history, scale and pending amax
// live on the device of the module that owns them, and every step of the
// scaling recipe is a tensor op on that device: the amax comes out of the
// quantize kernel, current scaling computes its scale from that amax tensor,
// Record max-combines it into the slot's pending amax, and the model's
// amp::Fp8State rolls every history and computes every next scale in one
// fused update per optimizer step (nn/fp8_state.h; the same
// core/delayed_scaling.h function on the CPU and in the CUDA kernel, so both
// backends produce the same bits). A training step therefore never waits for
// the device to learn a scale.
//
// NOTE [initialised on the host]: whether a slot has seen an amax yet (and so
// may use delayed scaling) is a host-side flag, never a read of the device:
// it is set by the first Fp8State::Update after a Record, and by
// LoadScalingState from the loaded history (a load reads the histories once,
// outside any training step). A slot whose first recorded amax was exactly
// zero therefore counts as initialised with its previous scale (1.0 at
// start); it only matters for a tensor that is exactly zero on step 0 (what
// Transformer Engine does for every slot). Once initialised, a slot stays
// initialised: a history whose nonzero entries have all rolled out keeps the
// last scale (ComputeScale keeps the previous scale when the reduced amax is
// 0). Only observation() and scale() read the device (telemetry, tests).
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
  // The max of the amaxes recorded since the last update: float32 [1] on
  // device(), kNoAmaxRecorded when none (NOTE [unrecorded slot] in
  // core/delayed_scaling.h).
  const Tensor& pending_amax() const;
  // NOTE [initialised on the host].
  bool initialized() const { return initialized_; }
  bool NeedsAmaxFirst(const Recipe& recipe) const {
    return recipe.scaling == Scaling::kCurrent || !initialized_;
  }

  // The scale to quantize a tensor whose max |x| is `amax` (float32 [1] on
  // device()), as a new float32 [1] tensor on device(): when
  // NeedsAmaxFirst(recipe), current scaling from amax (ComputeScale with the
  // recipe's margin and power-of-two rule; the slot's scale when amax is 0 or
  // not finite); otherwise a copy of the slot's scale. No host sync.
  Tensor ScaleFor(const Recipe& recipe, const Tensor& amax) const;
  // Current scaling from `amax` alone (what ScaleFor does when NeedsAmaxFirst).
  Tensor CurrentScale(const Recipe& recipe, const Tensor& amax) const;

  // Max-combines `amax` (float32 [1] on device()) into pending_amax(); the
  // history and scale change at the model's next Fp8State::Update. No host
  // sync. Errors: a tensor of the wrong dtype, size or device (naming the slot).
  void Record(const Tensor& amax);
  // True when Record was called since the last MarkUpdated.
  bool recorded() const { return recorded_; }

  // Notes a quantization of `numel` elements with `scale` whose amax was
  // `amax` (device tensors, read only when observation() is called), and its
  // clip counts when `clip` is given.
  void Observe(const Tensor& amax, const Tensor& scale, int64_t numel, const ClipCounts* clip);
  // Telemetry of the last quantization (reads the pending device values).
  const SlotObservation& observation() const;

  // ---- for amp::Fp8State and LoadScalingState ----
  // Points the slot's history, scale and pending amax at `history` [H],
  // `scale` [1] and `amax` [1] (views into the model's contiguous buffers,
  // already holding the slot's values). The module buffers become the views.
  void Bind(const Tensor& history, const Tensor& scale, const Tensor& amax);
  // After an update: initialised if an amax was recorded since the last one.
  void MarkUpdated();
  void SetInitialized(bool on) { initialized_ = on; }
  // Forgets the pending amax (after a load).
  void ResetPendingAmax();

 private:
  void CheckOnDevice(const Tensor& t, const char* what) const;
  void EnsurePendingOnDevice() const;

  std::string name_;
  DType dtype_;
  Tensor* history_;
  Tensor* scale_;
  mutable Tensor amax_;  // pending amax [1]; follows the history to another device
  bool initialized_ = false;
  bool recorded_ = false;
  mutable SlotObservation obs_;
  mutable Tensor pending_amax_, pending_scale_;
};

}  // namespace octet::nn::amp
