// The optimizer base class: a list of named parameters, a step counter, a
// learning rate, and a state dict for checkpoints.
//
//   optim::AdamW opt(model.NamedParameters(), {.lr = 6e-4, .beta2 = 0.95, .weight_decay = 0.1});
//   for (...) {
//     opt.ZeroGrad();
//     loss.Backward();
//     optim::ClipGradNorm(opt.params(), 1.0);
//     opt.set_lr(schedule.LrAt(opt.step_count()));
//     opt.Step();
//   }
//
// Parameters are leaf tensors that require grad, contiguous, on one device, of
// a float dtype (f32, f64, bf16, f16; FP8 parameters are rejected: train the
// high-precision master and quantize copies of it). Step() skips parameters
// whose grad is undefined. Step() runs without recording autograd history and
// bumps each updated parameter's version counter.
//
// NOTE [optimizer state dict]: StateDict() returns every state tensor under a
// name "<kind>.<slot>.<param name>" (e.g. "adamw.m.h.0.attn.qkv.weight") plus
// string scalars ("type", "step", "lr", ...). The tensors are the optimizer's
// own state (not copies): save them, don't write into them. LoadStateDict()
// checks everything first — the type, that the names match exactly (missing
// and unexpected entries are listed by name), each shape and dtype — and only
// then copies, so a failed load leaves the optimizer unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <octet/core/tensor.h>

namespace octet::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct OptimizerState {
  NamedTensors tensors;
  std::map<std::string, std::string> scalars;
};

class Optimizer {
 public:
  // kind: short lower-case name used as the state-dict prefix ("adamw", "sgd").
  // Throws octet::Error when a parameter is undefined, not a leaf requiring
  // grad, not contiguous, FP8 or not float, when names repeat, when the
  // parameters are on different devices, or when lr is not finite and >= 0.
  Optimizer(std::string kind, NamedTensors params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; increments step_count().
  virtual void Step() = 0;
  // Drops every parameter's gradient (sets it undefined, so the next backward
  // allocates it fresh).
  void ZeroGrad();

  double lr() const { return lr_; }
  // lr: finite and >= 0, as the constructor and LoadStateDict require
  // (octet::Error otherwise, naming the optimizer).
  void set_lr(double lr);
  // Number of Step() calls so far (restored by LoadStateDict).
  int64_t step_count() const { return step_count_; }
  const NamedTensors& params() const { return params_; }
  const std::string& kind() const { return kind_; }

  // See NOTE [optimizer state dict]; LoadStateDict throws octet::Error.
  OptimizerState StateDict() const;
  void LoadStateDict(const OptimizerState& state);

 protected:
  // A state tensor of the subclass, registered under "<kind>.<slot>.<param>"
  // (or any name the subclass chooses). Registered once, in the constructor.
  void RegisterState(const std::string& name, Tensor* tensor);
  // Extra string scalars (beyond type/step/lr) for StateDict, and the hook
  // that validates/applies them on load (throws octet::Error to refuse; must
  // not change anything before it throws).
  virtual void SaveScalars(std::map<std::string, std::string>* /*scalars*/) const {}
  virtual void CheckScalars(const std::map<std::string, std::string>& /*scalars*/) const {}
  virtual void LoadScalars(const std::map<std::string, std::string>& /*scalars*/) {}
  // Called after the state tensors were copied in (e.g. to re-derive caches).
  virtual void AfterLoad() {}

  void IncrementStep() { ++step_count_; }

  // Throws octet::Error "<what>: <name> must be finite and >= 0, got <value>"
  // unless it is: the learning rate here, the subclasses' own options.
  static void CheckFiniteNonNegative(std::string_view what, const char* name, double value);

 private:
  std::string kind_;
  NamedTensors params_;
  double lr_;
  int64_t step_count_ = 0;
  std::vector<std::pair<std::string, Tensor*>> state_;  // in registration order
};

// Parses a scalar written by StateDict (helpers for subclasses and tests).
bool ParseInt64(const std::string& text, int64_t* out);
bool ParseDouble(const std::string& text, double* out);
// Prints a double so that ParseDouble gives back the same bits (%.17g).
std::string DoubleToString(double v);

}  // namespace octet::optim
