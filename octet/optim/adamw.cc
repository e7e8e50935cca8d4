#include <octet/optim/adamw.h>

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include <octet/autograd/grad_mode.h>
#include <octet/core/amax_note.h>
#include <octet/core/graph.h>
#include <octet/core/graph_internal.h>
#include <octet/ops/optim_kernels.h>

namespace octet::optim {

const char* Name(StateDType s) {
  switch (s) {
    case StateDType::kFloat32: return "fp32";
    case StateDType::kBFloat16: return "bf16";
    case StateDType::kFp8Fp16: return "fp8_fp16";
  }
  return "?";
}

namespace {

std::shared_ptr<ScaleMeta> NewScale(Device device) {
  auto meta = std::make_shared<ScaleMeta>();
  meta->granularity = ScaleGranularity::kPerTensor;
  meta->scale = Full({1}, 1.0, {.device = device});
  meta->scale_inv = Full({1}, 1.0, {.device = device});
  meta->amax = Full({1}, 0.0, {.device = device});
  return meta;
}

}  // namespace

AdamW::AdamW(NamedTensors params, Options options) : Optimizer("adamw", std::move(params), options.lr),
                                                     options_(std::move(options)) {
  const Options& o = options_;
  OCTET_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, "adamw: beta1 must be in [0, 1), got ", o.beta1);
  OCTET_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, "adamw: beta2 must be in [0, 1), got ", o.beta2);
  CheckFiniteNonNegative(kind(), "eps", o.eps);
  CheckFiniteNonNegative(kind(), "weight_decay", o.weight_decay);
  std::set<std::string> names;
  for (const auto& [name, p] : this->params()) names.insert(name);
  for (const std::string& n : o.no_decay) {
    OCTET_CHECK(names.count(n), "adamw: no_decay names '", n, "', which is not a parameter");
  }
  const std::set<std::string> no_decay(o.no_decay.begin(), o.no_decay.end());

  states_.reserve(this->params().size());
  for (const auto& [name, p] : this->params()) {
    ParamState s;
    const Device dev = p.device();
    const bool low_precision = p.dtype() == DType::kBFloat16 || p.dtype() == DType::kFloat16;
    if (low_precision && o.master_weights) {
      NoGradGuard no_grad;
      s.master = p.detach().To(DType::kFloat32).Contiguous();
      if (s.master.is_same(p)) s.master = s.master.Clone();
    }
    const DType full = p.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
    // Zeros: all-zero bits, +0 in every state format (the fp8 m included).
    switch (o.state_dtype) {
      case StateDType::kFloat32:
        s.m = Zeros(p.shape(), {.dtype = full, .device = dev});
        s.v = Zeros(p.shape(), {.dtype = full, .device = dev});
        break;
      case StateDType::kBFloat16:
        s.m = Zeros(p.shape(), {.dtype = DType::kBFloat16, .device = dev});
        s.v = Zeros(p.shape(), {.dtype = DType::kBFloat16, .device = dev});
        break;
      case StateDType::kFp8Fp16:
        s.m_meta = NewScale(dev);
        s.v_meta = NewScale(dev);
        s.m = Zeros(p.shape(), {.dtype = DType::kFloat8E4M3, .device = dev}).WithScaleMeta(s.m_meta);
        s.v = Zeros(p.shape(), {.dtype = DType::kFloat16, .device = dev});
        break;
    }
    const bool decay = (o.decay_filter ? o.decay_filter(name, p) : p.dim() >= 2) && !no_decay.count(name);
    s.weight_decay = decay ? o.weight_decay : 0.0;
    states_.push_back(std::move(s));
  }
  if (!this->params().empty()) {
    scalars_ = Zeros({3}, {.dtype = DType::kFloat64, .device = this->params().front().second.device()});
  }
  // Register after states_ is complete: the registered pointers must stay valid.
  for (size_t i = 0; i < states_.size(); ++i) {
    const std::string& name = this->params()[i].first;
    ParamState& s = states_[i];
    RegisterState("adamw.m." + name, &s.m);
    RegisterState("adamw.v." + name, &s.v);
    if (s.v_meta) RegisterState("adamw.v." + name + ".scale_inv", &s.v_meta->scale_inv);
    if (s.master.defined()) RegisterState("adamw.master." + name, &s.master);
  }
}

size_t AdamW::IndexOf(const std::string& name) const {
  for (size_t i = 0; i < params().size(); ++i)
    if (params()[i].first == name) return i;
  OCTET_FAIL("adamw: no parameter named '", name, "'");
}

void AdamW::SyncMasterFromParams() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < states_.size(); ++i) {
    if (states_[i].master.defined()) states_[i].master.CopyFrom_(params()[i].second.detach());
  }
}

AdamWHyper AdamW::Hyper() const {
  const int64_t t = step_count() + 1;
  AdamWHyper h;
  h.lr = lr();
  h.beta1 = options_.beta1;
  h.beta2 = options_.beta2;
  h.eps = options_.eps;
  h.bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(t));
  h.bias_correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(t));
  h.m_margin = options_.m_margin;
  h.v_margin = options_.v_margin;
  return h;
}

void AdamW::WriteDeviceScalars() {
  if (!scalars_.defined()) return;  // no parameters: nothing reads them
  // Fills (kernels taking the value as an argument), not a copy from host
  // memory: nothing waits on the host.
  NoGradGuard no_grad;
  const AdamWHyper h = Hyper();
  scalars_.Narrow(0, 0, 1).Fill_(h.lr);
  scalars_.Narrow(0, 1, 1).Fill_(h.bias_correction1);
  scalars_.Narrow(0, 2, 1).Fill_(h.bias_correction2);
}

void AdamW::Step() {
  NoGradGuard no_grad;
  AdamWHyper h = Hyper();
  // NOTE [captured optimizer step]: inside a graph capture the kernels read
  // lr and the bias corrections from scalars_, written before each replay
  // from lr() and step_count() + 1 at that time, and the step is counted
  // after each replay, not at capture (which executes nothing).
  const bool captured = IsCapturing();
  if (captured) {
    h.device_scalars = scalars_;  // undefined only without parameters, when no kernel runs
    internal::AtReplay([this] { WriteDeviceScalars(); }, [this] { IncrementStep(); });
  }

  std::vector<AdamWTensorArgs> args;
  args.reserve(states_.size());
  for (size_t i = 0; i < states_.size(); ++i) {
    const auto& [name, p] = params()[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    OCTET_CHECK(g.shape() == p.shape(), "adamw: gradient of '", name, "' is ", Describe(g), " but the parameter is ",
                Describe(p));
    OCTET_CHECK(g.dtype() == p.dtype() || g.dtype() == DType::kFloat32, "adamw: gradient of '", name, "' is ",
                Describe(g), "; expected ", Name(p.dtype()), " or float32 like the parameter ", Describe(p));
    OCTET_CHECK(g.device() == p.device(), "adamw: gradient of '", name, "' is on ", g.device(),
                " but the parameter is on ", p.device());
    const ParamState& s = states_[i];
    // The kernels index every state tensor by the parameter's element count.
    for (const Tensor* t : {&s.m, &s.v, &s.master}) {
      OCTET_CHECK(!t->defined() || t->numel() == p.numel(), "adamw: the state of '", name, "' is ", Describe(*t),
                  " but the parameter is ", Describe(p));
    }
    AdamWTensorArgs a;
    a.param = p;
    a.grad = g.is_contiguous() ? g : g.Contiguous();
    a.master = s.master;
    a.m = s.m;
    a.v = s.v;
    if (s.m_meta) {
      a.m_scale = s.m_meta->scale;
      a.m_scale_inv = s.m_meta->scale_inv;
      a.m_amax = s.m_meta->amax;
      a.v_scale = s.v_meta->scale;
      a.v_scale_inv = s.v_meta->scale_inv;
      a.v_amax = s.v_meta->amax;
    }
    a.weight_decay = s.weight_decay;
    args.push_back(std::move(a));
  }
  // NOTE [amax notes] (core/amax_note.h): where the backend can, the update
  // takes the new amax of the float32 weights whose amax is read next (the
  // FP8 weight copies), one f32 each in a buffer of this step. A capture runs
  // no kernel: no notes.
  std::vector<size_t> noted;
  const Device device = args.empty() ? Device() : args.front().param.device();
  for (size_t i = 0; i < args.size() && !captured && adamw_param_amax_kernel.Has(device.type); ++i) {
    const Tensor& p = args[i].param;
    if (p.dtype() == DType::kFloat32 && !args[i].master.defined() && p.is_contiguous() &&
        p.storage()->wants_amax_notes()) {
      noted.push_back(i);
    }
  }
  if (!noted.empty()) {
    const Tensor amaxes = Empty({static_cast<int64_t>(noted.size())}, {.dtype = DType::kFloat32, .device = device});
    for (size_t j = 0; j < noted.size(); ++j) args[noted[j]].param_amax = amaxes.Narrow(0, static_cast<int64_t>(j), 1);
  }
  if (!args.empty()) {
    (noted.empty() ? adamw_kernel : adamw_param_amax_kernel)(device)(h, args);
    for (const AdamWTensorArgs& a : args) {
      a.param.storage()->BumpVersion();
      a.m.storage()->BumpVersion();
      a.v.storage()->BumpVersion();
      if (a.master.defined()) a.master.storage()->BumpVersion();
    }
    for (size_t i : noted) NoteAmax(args[i].param, args[i].param_amax);
  }
  if (!captured) IncrementStep();
}

void AdamW::SaveScalars(std::map<std::string, std::string>* scalars) const {
  (*scalars)["state_dtype"] = Name(options_.state_dtype);
}

void AdamW::CheckScalars(const std::map<std::string, std::string>& scalars) const {
  auto it = scalars.find("state_dtype");
  if (it != scalars.end() && it->second != Name(options_.state_dtype)) {
    OCTET_FAIL(absl::StrCat("adamw optimizer LoadStateDict: the state was saved with state_dtype ",
                                                   it->second, " but this optimizer uses ",
                                                   Name(options_.state_dtype)));
  }
}

void AdamW::AfterLoad() {
  for (ParamState& s : states_) {
    if (!s.v_meta) continue;
    const double scale_inv = s.v_meta->scale_inv.Item();
    s.v_meta->scale.Fill_(static_cast<float>(1.0f / static_cast<float>(scale_inv)));
  }
}

}  // namespace octet::optim
