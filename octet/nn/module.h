// nn::Module: the base of every layer. A module owns named parameters (leaf
// tensors that require grad), named buffers (state that is not trained) and
// named child modules; names compose into dotted paths ("h.0.attn.qkv.weight")
// so the state dict comes for free.
//
//   class Mlp : public nn::Module {
//    public:
//     struct Options { int64_t dim; int64_t hidden; };
//     explicit Mlp(const Options& o)
//         : fc_(RegisterModule<nn::Linear>("fc", {.in = o.dim, .out = o.hidden})),
//           proj_(RegisterModule<nn::Linear>("proj", {.in = o.hidden, .out = o.dim})) {}
//     Tensor Forward(const Tensor& x) { return proj_(Gelu(fc_(x))); }
//     Tensor operator()(const Tensor& x) { return Forward(x); }
//    private:
//     nn::Linear& fc_;
//     nn::Linear& proj_;
//   };
//
// NOTE [module slots]: RegisterParameter/RegisterBuffer return a reference to
// a slot that lives as long as the module. To(dtype)/To(device) and
// LoadStateDict update the slot (To replaces the tensor, LoadStateDict copies
// into it), so members holding the reference always see the current tensor.
// Anything that copied the Tensor handle earlier (an optimizer) keeps the old
// one: convert a model before building its optimizer.
//
// Order: NamedParameters/NamedBuffers/NamedModules list a module's own entries
// in registration order, then each child's (recursively) in registration
// order. The order is deterministic, so optimizer state can be matched by
// position as well as by name.
//
// amp: every module carries an amp level (nn/amp_recipe.h). SetAmp sets it on
// a module and its descendants; an active amp::Autocast scope overrides it;
// SetFp8OptOut makes a subtree compute in BF16 where the level says FP8.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <octet/core/error.h>
#include <octet/core/tensor.h>
#include <octet/nn/amp_recipe.h>

namespace octet::nn {

namespace amp {
class Fp8LinearState;  // nn/fp8_linear.h
}  // namespace amp

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration ---------------------------------------------------------
  // Makes t a leaf that requires grad (a float tensor; an existing autograd
  // history is dropped) and stores it as `name`. Errors: empty name, a '.' in
  // the name, a name already used by a parameter, buffer or child, non-float t.
  Tensor& RegisterParameter(const std::string& name, Tensor t);
  // A tensor that is part of the module's state but not trained. Persistent
  // buffers are in StateDict(); non-persistent ones (e.g. FP8 amax histories)
  // are listed by NamedBuffers() only.
  Tensor& RegisterBuffer(const std::string& name, Tensor t, bool persistent = true);
  // Constructs T(options), owned by this module, and returns it.
  template <typename T>
  T& RegisterModule(const std::string& name, const typename T::Options& options = {}) {
    return AdoptModule<T>(name, std::make_unique<T>(options));
  }
  // Takes ownership of an already built module.
  template <typename T>
  T& AdoptModule(const std::string& name, std::unique_ptr<T> module) {
    T& ref = *module;
    AddChild(name, std::move(module));
    return ref;
  }

  // ---- introspection ----------------------------------------------------------
  NamedTensors NamedParameters(bool recurse = true) const;
  TensorList Parameters(bool recurse = true) const;
  NamedTensors NamedBuffers(bool recurse = true) const;
  // This module (name "") and every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> NamedModules();
  std::vector<std::pair<std::string, const Module*>> NamedModules() const;
  std::vector<std::pair<std::string, Module*>> NamedChildren();
  int64_t NumParameters() const;
  // Slots by name (this module only); nullptr when absent.
  Tensor* FindParameter(const std::string& name);
  Tensor* FindBuffer(const std::string& name);

  // ---- state dict ---------------------------------------------------------------
  // Parameters and persistent buffers by dotted name (aliases, no copies).
  NamedTensors StateDict() const;
  // Copies `state` into the parameters and persistent buffers by name. Every
  // entry must match a slot in shape and dtype, every slot must be present
  // (strict) and no name may repeat; otherwise nothing is changed and the
  // octet::Error thrown names every missing, unexpected and mismatched entry.
  void LoadStateDict(const NamedTensors& state, bool strict = true);

  // ---- modes, devices, gradients ------------------------------------------------------
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer (see NOTE [module slots]).
  void To(Device device);
  // Converts float parameters and persistent float buffers (not integer or FP8
  // ones; FP8 scaling state stays float32).
  void To(DType dtype);
  // Drops every parameter's gradient.
  void ZeroGrad();

  // ---- amp --------------------------------------------------------------------------------
  // Sets the amp level and recipe of this module and its descendants (then
  // calls OnAmpChanged on each, e.g. so a Linear allocates its FP8 state).
  void SetAmp(amp::Level level, const amp::Recipe& recipe = {});
  // opt_out: this module and its descendants compute in BF16 where their level
  // says FP8 (O1 -> O2 for them). GPT uses it for the embedding and lm_head.
  void SetFp8OptOut(bool opt_out = true);
  bool fp8_opt_out() const { return fp8_opt_out_; }
  // The level this module computes at now: an active amp::Autocast scope's,
  // else the one set by SetAmp (O0 if never set), with the opt-out applied.
  amp::Level amp_level() const;
  const amp::Recipe& amp_recipe() const;
  // The FP8 GEMM states this module owns itself (not its children's): a
  // Linear in O1 has one; amp::Telemetry and amp::ScalingState walk them.
  virtual std::vector<amp::Fp8LinearState*> Fp8States() { return {}; }

 protected:
  // Called after SetAmp (and after SetFp8OptOut) on every module it reached.
  virtual void OnAmpChanged() {}

 private:
  struct Slot {
    std::string name;
    std::unique_ptr<Tensor> tensor;
    bool persistent = true;
  };
  void AddChild(const std::string& name, std::unique_ptr<Module> child);
  void CheckNewName(const std::string& name, const char* what) const;
  void CollectNamedModules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>* out);
  template <typename F>
  void ForEachSlot(const std::string& prefix, bool params, bool buffers, bool only_persistent, bool recurse,
                   F&& f) const;

  std::vector<Slot> params_;
  std::vector<Slot> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
  bool amp_set_ = false;
  amp::Level amp_level_ = amp::Level::kO0;
  amp::Recipe amp_recipe_;
  bool fp8_opt_out_ = false;
};

// A list of child modules named "0", "1", ... (GPT's blocks).
class ModuleList : public Module {
 public:
  struct Options {};
  explicit ModuleList(const Options& = {}) {}
  template <typename T>
  T& Append(const typename T::Options& options) {
    T& m = RegisterModule<T>(std::to_string(items_.size()), options);
    items_.push_back(&m);
    return m;
  }
  size_t size() const { return items_.size(); }
  // Errors (both): i >= size().
  Module& operator[](size_t i) const { return *items_[CheckIndex(i)]; }
  template <typename T>
  T& at(size_t i) const {
    return static_cast<T&>(*items_[CheckIndex(i)]);
  }

 private:
  size_t CheckIndex(size_t i) const {
    OCTET_CHECK(i < items_.size(), "ModuleList: index ", i, " is out of range for ", items_.size(), " modules");
    return i;
  }
  std::vector<Module*> items_;
};

}  // namespace octet::nn
