// Automatic mixed precision: levels O0 (FP32), O1 (FP8 compute) and O2 (BF16
// compute) — see nn/amp_recipe.h for what each level does — set either on a
// model (model.SetAmp(level, recipe)) or for a scope:
//
//   {
//     nn::amp::Autocast scope(nn::amp::Level::kO1, {.scaling = nn::amp::Scaling::kCurrent});
//     Tensor loss = model.Loss(idx, targets);   // every module computes at O1
//   }
//
// An active scope overrides the level set with SetAmp; scopes nest. In O1
// each Linear keeps an FP8 state (nn/fp8_linear.h) with three scaling slots
// whose amax histories are non-persistent module buffers: they are not in
// StateDict() (an O1 checkpoint loads into an O0 model), and ScalingState()
// lists them for the training-state file so a resumed run continues
// bit-identically.
//
// NOTE [o2 master weights]: at O1 and O2 the parameters stay float32 — they
// are the master weights the optimizer updates — and each forward casts them
// to bfloat16 where a kernel wants bf16 (Tensor::To, differentiable: the
// gradient comes back as float32 into the float32 .grad). The alternative,
// bf16 parameters with an optimizer-held float32 copy, halves parameter
// memory but needs the optimizer and the checkpoint to agree on which copy is
// the truth; here the checkpoint simply holds the float32 parameters, so a
// resumed run is bit-identical at every level. The per-forward casts cost one
// pass over the weights (small next to the GEMMs: each weight element is
// reused B·T times); an O2 Linear on the CPU skips even that, its GEMMs
// rounding the float32 weight as they pack it (NOTE [cast linear] in
// ops/matmul.h); at O1 the FP8 weight copy is cached per weight version
// instead (NOTE [weight scaling] in nn/fp8_linear.h).
#pragma once

#include <string>
#include <vector>

#include <octet/nn/amp_recipe.h>
#include <octet/nn/fp8_linear.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/module.h>

namespace octet::nn::amp {

// RAII: sets the amp level (and recipe) of this thread for its lifetime.
class Autocast {
 public:
  explicit Autocast(Level level, const Recipe& recipe = {});
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  AutocastState state_;
  const AutocastState* previous_;
};

// One record per FP8 slot of every FP8 GEMM in `model` (module order, then
// input, weight, grad_output). Values describe the slot's last quantization.
struct SlotStats {
  std::string module;  // dotted module path, plus "/<label>" for labelled GEMMs (GPT's lm_head)
  std::string slot;    // "input" | "weight" | "grad_output"
  DType dtype = DType::kFloat8E4M3;
  float amax = 0.0f;    // max |x| of the last quantized tensor
  float scale = 1.0f;   // the scale it was quantized with
  float next_scale = 1.0f;  // the scale the next quantization will use (delayed)
  double saturated = 0.0;   // fraction of elements clamped to ± fp8 max
  double underflow = 0.0;   // fraction of elements that were nonzero and became 0
  int64_t numel = 0;
  int64_t count = 0;            // quantizations so far
  bool has_clip_stats = false;  // saturated/underflow measured (telemetry on)
};
std::vector<SlotStats> Telemetry(Module& model);
// Turns the saturation/underflow counting of every FP8 GEMM in model on or off
// (amax and scale are always recorded).
void SetTelemetry(Module& model, bool enabled);
// NOTE [fp8 weight copy lifetime] (nn/fp8_linear.cc): keep (true) or release
// (false, the default) every FP8 Linear's cached FP8 weight copy after a
// backward that computed the weight's gradient. Keep it for the backwards of
// all micro-batches but the last of a gradient-accumulation step, so the
// next micro-batch's forward reuses the copy instead of quantizing again:
//
//   for (micro = 0; micro < accum; ++micro) {
//     amp::KeepFp8WeightCopies(model, micro + 1 < accum);
//     model.Loss(x[micro], y[micro]).Backward();
//   }
//
// Applies to the FP8 Linears model has now.
void KeepFp8WeightCopies(Module& model, bool keep);
// The largest `saturated` among the records with clip stats (0 if none).
double WorstSaturation(const std::vector<SlotStats>& stats);

// The FP8 scaling state of `model` (every FP8 buffer: amax histories and
// scales, by dotted name). Tensors are the live buffers, not copies.
NamedTensors ScalingState(Module& model);
// Copies a ScalingState back; names, shapes and dtypes must match exactly, else
// nothing changes and the octet::Error thrown lists the differences. The
// values must be what LoadTrainingState accepts (finite; amax histories >= 0;
// scales > 0 with a finite reciprocal), else nothing changes and the error
// names the first bad entry, element and value.
void LoadScalingState(Module& model, const NamedTensors& state);
// True for the buffer names ScalingState() returns.
bool IsScalingStateName(const std::string& name);

}  // namespace octet::nn::amp
