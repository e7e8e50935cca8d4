#include <octet/nn/module.h>

#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <octet/autograd/grad_mode.h>
#include <octet/nn/amp_recipe.h>

namespace octet::nn {

Module::~Module() = default;

void Module::CheckNewName(const std::string& name, const char* what) const {
  OCTET_CHECK(!name.empty(), "Module::Register", what, ": empty name");
  OCTET_CHECK(name.find('.') == std::string::npos, "Module::Register", what, ": name \"", name,
              "\" contains '.', which separates path components");
  for (const Slot& s : params_) OCTET_CHECK(s.name != name, "Module::Register", what, ": \"", name, "\" is already a parameter");
  for (const Slot& s : buffers_) OCTET_CHECK(s.name != name, "Module::Register", what, ": \"", name, "\" is already a buffer");
  for (const auto& c : children_)
    OCTET_CHECK(c.first != name, "Module::Register", what, ": \"", name, "\" is already a child module");
}

Tensor& Module::RegisterParameter(const std::string& name, Tensor t) {
  CheckNewName(name, "Parameter");
  OCTET_CHECK(t.defined(), "Module::RegisterParameter(\"", name, "\"): undefined tensor");
  OCTET_CHECK(IsFloat(t.dtype()), "Module::RegisterParameter(\"", name, "\"): parameters must be float, got ",
              Describe(t));
  Tensor leaf = t.detach();
  leaf.requires_grad_(true);
  params_.push_back({name, std::make_unique<Tensor>(std::move(leaf)), true});
  return *params_.back().tensor;
}

Tensor& Module::RegisterBuffer(const std::string& name, Tensor t, bool persistent) {
  CheckNewName(name, "Buffer");
  OCTET_CHECK(t.defined(), "Module::RegisterBuffer(\"", name, "\"): undefined tensor");
  buffers_.push_back({name, std::make_unique<Tensor>(t.detach()), persistent});
  return *buffers_.back().tensor;
}

void Module::AddChild(const std::string& name, std::unique_ptr<Module> child) {
  CheckNewName(name, "Module");
  OCTET_CHECK(child != nullptr, "Module::RegisterModule(\"", name, "\"): null module");
  children_.emplace_back(name, std::move(child));
}

template <typename F>
void Module::ForEachSlot(const std::string& prefix, bool params, bool buffers, bool only_persistent, bool recurse,
                         F&& f) const {
  if (params)
    for (const Slot& s : params_) f(prefix + s.name, s);
  if (buffers)
    for (const Slot& s : buffers_)
      if (!only_persistent || s.persistent) f(prefix + s.name, s);
  if (!recurse) return;
  for (const auto& [name, child] : children_)
    child->ForEachSlot(prefix + name + ".", params, buffers, only_persistent, true, f);
}

NamedTensors Module::NamedParameters(bool recurse) const {
  NamedTensors out;
  ForEachSlot("", true, false, false, recurse, [&](std::string n, const Slot& s) { out.emplace_back(std::move(n), *s.tensor); });
  return out;
}

TensorList Module::Parameters(bool recurse) const {
  TensorList out;
  ForEachSlot("", true, false, false, recurse, [&](const std::string&, const Slot& s) { out.push_back(*s.tensor); });
  return out;
}

NamedTensors Module::NamedBuffers(bool recurse) const {
  NamedTensors out;
  ForEachSlot("", false, true, false, recurse, [&](std::string n, const Slot& s) { out.emplace_back(std::move(n), *s.tensor); });
  return out;
}

NamedTensors Module::StateDict() const {
  NamedTensors out;
  ForEachSlot("", true, true, true, true, [&](std::string n, const Slot& s) { out.emplace_back(std::move(n), *s.tensor); });
  return out;
}

void Module::CollectNamedModules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>* out) {
  out->emplace_back(prefix, this);
  for (auto& [name, child] : children_) child->CollectNamedModules(prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::NamedModules() {
  std::vector<std::pair<std::string, Module*>> out;
  CollectNamedModules("", &out);
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::NamedModules() const {
  std::vector<std::pair<std::string, Module*>> tmp;
  const_cast<Module*>(this)->CollectNamedModules("", &tmp);
  return {tmp.begin(), tmp.end()};
}

std::vector<std::pair<std::string, Module*>> Module::NamedChildren() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, child] : children_) out.emplace_back(name, child.get());
  return out;
}

int64_t Module::NumParameters() const {
  int64_t n = 0;
  for (const Tensor& p : Parameters()) n += p.numel();
  return n;
}

Tensor* Module::FindParameter(const std::string& name) {
  for (Slot& s : params_)
    if (s.name == name) return s.tensor.get();
  return nullptr;
}

Tensor* Module::FindBuffer(const std::string& name) {
  for (Slot& s : buffers_)
    if (s.name == name) return s.tensor.get();
  return nullptr;
}

void Module::LoadStateDict(const NamedTensors& state, bool strict) {
  // Slots by name.
  std::vector<std::pair<std::string, Tensor*>> slots;
  ForEachSlot("", true, true, true, true,
              [&](std::string n, const Slot& s) { slots.emplace_back(std::move(n), s.tensor.get()); });
  std::vector<std::string> missing, unexpected, mismatched, duplicated;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  std::set<std::string> seen;
  for (const auto& [name, t] : state) {
    if (!seen.insert(name).second) {
      duplicated.push_back(name);
      continue;
    }
    Tensor* slot = nullptr;
    for (auto& [n, s] : slots)
      if (n == name) {
        slot = s;
        break;
      }
    if (slot == nullptr) {
      unexpected.push_back(name);
      continue;
    }
    if (!t.defined() || t.shape() != slot->shape() || t.dtype() != slot->dtype()) {
      mismatched.push_back(absl::StrCat(name, " (expected ", Describe(*slot), ", got ",
                                        t.defined() ? Describe(t) : std::string("undefined"), ")"));
      continue;
    }
    copies.emplace_back(slot, &t);
  }
  if (strict)
    for (const auto& [n, s] : slots)
      if (!seen.count(n)) missing.push_back(n);
  if (!missing.empty() || !mismatched.empty() || !duplicated.empty() || (strict && !unexpected.empty())) {
    std::string msg = "LoadStateDict: state dict does not match the module; nothing was loaded.";
    if (!missing.empty()) absl::StrAppend(&msg, " Missing: ", absl::StrJoin(missing, ", "), ".");
    if (!unexpected.empty()) absl::StrAppend(&msg, " Unexpected: ", absl::StrJoin(unexpected, ", "), ".");
    if (!mismatched.empty()) absl::StrAppend(&msg, " Mismatched: ", absl::StrJoin(mismatched, "; "), ".");
    if (!duplicated.empty()) absl::StrAppend(&msg, " Duplicated: ", absl::StrJoin(duplicated, ", "), ".");
    OCTET_FAIL(msg);
  }
  NoGradGuard no_grad;
  for (auto& [slot, src] : copies) {
    Tensor dst = slot->detach();
    dst.CopyFrom_(*src);  // bumps the version: FP8 weight caches re-quantize
  }
}

void Module::Train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->Train(on);
}

void Module::To(Device device) {
  NoGradGuard no_grad;
  for (Slot& s : params_) {
    if (s.tensor->device() == device) continue;
    Tensor moved = s.tensor->detach().To(device);
    moved.requires_grad_(true);
    *s.tensor = moved;
  }
  for (Slot& s : buffers_)
    if (s.tensor->device() != device) *s.tensor = s.tensor->detach().To(device);
  for (auto& c : children_) c.second->To(device);
}

void Module::To(DType dtype) {
  OCTET_CHECK(IsUnscaledFloat(dtype), "Module::To: modules convert to float32/float64/bfloat16/float16, not ",
              Name(dtype));
  NoGradGuard no_grad;
  for (Slot& s : params_) {
    if (s.tensor->dtype() == dtype || !IsUnscaledFloat(s.tensor->dtype())) continue;
    Tensor converted = s.tensor->detach().To(dtype);
    converted.requires_grad_(true);
    *s.tensor = converted;
  }
  for (Slot& s : buffers_)
    if (IsUnscaledFloat(s.tensor->dtype()) && s.tensor->dtype() != dtype && s.persistent)
      *s.tensor = s.tensor->detach().To(dtype);
  for (auto& c : children_) c.second->To(dtype);
}

void Module::ZeroGrad() {
  for (Slot& s : params_) s.tensor->zero_grad();
  for (auto& c : children_) c.second->ZeroGrad();
}

void Module::SetAmp(amp::Level level, const amp::Recipe& recipe) {
  OCTET_CHECK(recipe.amax_history_len >= 1, "SetAmp: amax_history_len must be >= 1, got ", recipe.amax_history_len);
  OCTET_CHECK(IsFp8(recipe.forward_dtype) && IsFp8(recipe.backward_dtype),
              "SetAmp: recipe forward/backward dtypes must be FP8, got ", Name(recipe.forward_dtype), " and ",
              Name(recipe.backward_dtype));
  amp_set_ = true;
  amp_level_ = level;
  amp_recipe_ = recipe;
  for (auto& c : children_) c.second->SetAmp(level, recipe);
  OnAmpChanged();
}

void Module::SetFp8OptOut(bool opt_out) {
  fp8_opt_out_ = opt_out;
  for (auto& c : children_) c.second->SetFp8OptOut(opt_out);
  OnAmpChanged();
}

amp::Level Module::amp_level() const {
  const amp::AutocastState* ac = amp::ActiveAutocast();
  amp::Level level = ac ? ac->level : (amp_set_ ? amp_level_ : amp::Level::kO0);
  if (level == amp::Level::kO1 && fp8_opt_out_) level = amp::Level::kO2;
  return level;
}

const amp::Recipe& Module::amp_recipe() const {
  const amp::AutocastState* ac = amp::ActiveAutocast();
  return ac ? ac->recipe : amp_recipe_;
}

}  // namespace octet::nn
