// amp::Fp8State: the one FP8 scaling-state manager of a model. It keeps the
// state of every FP8 slot of every FP8 GEMM in the model (nn/fp8_linear.h,
// three slots per Linear) in contiguous buffers on the model's device:
//
//   amax        float32 [S]     the amax recorded this step (max over the
//                               micro-batches), kNoAmaxRecorded when none
//   amax_history float32 [S, H] newest first (NOTE [amax history layout])
//   scale       float32 [S]     the scale the next quantization uses
//   scale_inv   float32 [S]
//
// and updates all of them in one fused delayed-scaling update per optimizer
// step (ops/delayed_scaling.h, UpdateDelayedScalingBuffers: one kernel launch
// on CUDA; core/delayed_scaling.h's math, so CPU and CUDA give the same bits).
// The slots stay visible per Linear: each slot's module buffers
// (<prefix>fp8_<slot>_amax_history, <prefix>fp8_<slot>_scale) become views of
// row i of these buffers, so the checkpoint names (amp::ScalingState) and
// amp::Telemetry are unchanged.
//
// NOTE [who updates the FP8 state]: the training loop, explicitly, once per
// optimizer step, after the optimizer step:
//
//   nn::amp::Fp8State fp8(model);              // after SetAmp and To(device)
//   for (...) {
//     for (micro-batch) model.Loss(x, y).Backward();   // quantizations record amaxes
//     optimizer.Step();
//     fp8.Update();                             // roll histories, next scales
//   }
//
// Why explicit and not an optimizer hook: the optimizer knows nothing of amp
// (optim never includes nn), a model can be trained by several optimizers
// (one update per step, not per optimizer), and a captured CUDA graph needs
// the update as one more device op inside the step. Without an Fp8State (or
// without Update calls) every slot stays uninitialised, i.e. delayed scaling
// degrades to current scaling: correct, one extra amax pass per quantization.
//
// NOTE [fp8 amax all-reduce]: data-parallel training must give every rank the
// same scales, so the ranks' amaxes are combined with MAX before the update.
// The one place to do it is between the last backward of the step and
// Update(): all-reduce amax() (float32 [S] on the model's device) with MAX
// in place, or register the reduction with SetAmaxReduceHook, which Update()
// calls first. Unrecorded entries hold kNoAmaxRecorded (-1), which MAX keeps
// below any real amax, so a slot recorded on any rank is updated on all.
//
// Layout changes (a Linear created lazily at its first O1 forward, a recipe
// whose history length or formats changed, Module::To(device)) are found at
// the next Update()/amax(): the buffers are then rebuilt from the slots'
// current values (host bookkeeping and small copies, no device read).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <octet/core/delayed_scaling.h>
#include <octet/core/tensor.h>
#include <octet/nn/fp8_linear.h>
#include <octet/nn/module.h>

namespace octet::nn::amp {

class Fp8State {
 public:
  // Manages the FP8 slots of `model` and its descendants (module order, then
  // input, weight, grad_output). The model must outlive this object.
  explicit Fp8State(Module& model);
  Fp8State(const Fp8State&) = delete;
  Fp8State& operator=(const Fp8State&) = delete;

  // NOTE [who updates the FP8 state]: calls the amax reduce hook, then one
  // fused update of every slot (kernels enqueued; no host sync). Errors: FP8
  // GEMMs whose recipes disagree on amax_history_len, margin or
  // power_of_two_scales, or that live on different devices.
  void Update();

  // NOTE [fp8 amax all-reduce]: the amax buffer, float32 [S] on the model's
  // device (rebinds the slots first if the layout changed). Write into it in
  // place; the next Update() reads it.
  Tensor amax();
  void SetAmaxReduceHook(std::function<void(Tensor& amax)> hook) { reduce_hook_ = std::move(hook); }

  // The contiguous state (after Bind; empty before the first Update/amax).
  const Tensor& amax_history() const { return history_; }
  const Tensor& scale() const { return scale_; }
  const Tensor& scale_inv() const { return scale_inv_; }
  int64_t num_slots() const { return static_cast<int64_t>(entries_.size()); }
  // Number of Update() calls so far, and of (re)binds of the buffers.
  int64_t updates() const { return updates_; }
  int64_t binds() const { return binds_; }

 private:
  struct Entry {
    Fp8Slot* slot = nullptr;
    uint8_t algo = 0;
    float fp8_max = 0.0f;
  };
  std::vector<Entry> Collect() const;
  bool IsBound(const std::vector<Entry>& entries) const;
  void Bind(std::vector<Entry> entries);
  void Sync();

  Module* model_;
  std::vector<Entry> entries_;
  Tensor amax_, history_, scale_, scale_inv_, fp8_max_, algo_;
  DelayedScalingConfig config_;
  std::function<void(Tensor&)> reduce_hook_;
  int64_t updates_ = 0;
  int64_t binds_ = 0;
};

}  // namespace octet::nn::amp
