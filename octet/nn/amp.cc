#include <octet/nn/amp.h>

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <octet/autograd/grad_mode.h>
#include <octet/nn/checkpoint_internal.h>

namespace octet::nn::amp {

Autocast::Autocast(Level level, const Recipe& recipe) : state_{level, recipe}, previous_(ActiveAutocast()) {
  OCTET_CHECK(recipe.amax_history_len >= 1, "Autocast: amax_history_len must be >= 1, got ",
              recipe.amax_history_len);
  internal::PushAutocast(&state_);
}

Autocast::~Autocast() { internal::PopAutocast(previous_); }

std::vector<SlotStats> Telemetry(Module& model) {
  std::vector<SlotStats> out;
  for (auto& [name, m] : model.NamedModules()) {
    for (Fp8LinearState* st : m->Fp8States()) {
      const std::string module = st->label().empty() ? name : (name.empty() ? st->label() : name + "/" + st->label());
      for (Fp8Slot* slot : st->slots()) {
        const SlotObservation& o = slot->observation();
        SlotStats s;
        s.module = module;
        s.slot = slot->name();
        s.dtype = slot->dtype();
        s.amax = o.amax;
        s.scale = o.scale;
        s.next_scale = slot->scale();
        s.saturated = o.saturated;
        s.underflow = o.underflow;
        s.numel = o.numel;
        s.count = o.count;
        s.has_clip_stats = o.has_clip_stats;
        out.push_back(std::move(s));
      }
    }
  }
  return out;
}

void SetTelemetry(Module& model, bool enabled) {
  for (auto& [name, m] : model.NamedModules())
    for (Fp8LinearState* st : m->Fp8States()) st->set_telemetry(enabled);
}

void KeepFp8WeightCopies(Module& model, bool keep) {
  for (auto& [name, m] : model.NamedModules())
    for (Fp8LinearState* st : m->Fp8States()) st->set_keep_weight_after_backward(keep);
}

double WorstSaturation(const std::vector<SlotStats>& stats) {
  double worst = 0.0;
  for (const SlotStats& s : stats)
    if (s.has_clip_stats) worst = std::max(worst, s.saturated);
  return worst;
}

bool IsScalingStateName(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
  return absl::StrContains(last, "fp8_") && (absl::EndsWith(last, "_amax_history") || absl::EndsWith(last, "_scale"));
}

NamedTensors ScalingState(Module& model) {
  NamedTensors out;
  for (auto& [name, t] : model.NamedBuffers())
    if (IsScalingStateName(name)) out.emplace_back(name, t);
  return out;
}

void LoadScalingState(Module& model, const NamedTensors& state) {
  const NamedTensors mine = ScalingState(model);
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> given;
  for (const auto& [n, t] : state) given.insert(n);
  struct Copy {
    std::string name;
    Tensor dst, src;
  };
  std::vector<Copy> copies;
  for (const auto& [n, t] : mine) {
    const auto it = std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == n; });
    if (it == state.end()) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined() || src.shape() != t.shape() || src.dtype() != t.dtype()) {
      mismatched.push_back(absl::StrCat(n, " (expected ", Describe(t), ", got ",
                                        src.defined() ? Describe(src) : std::string("undefined"), ")"));
      continue;
    }
    copies.push_back({n, t, src});
  }
  for (const auto& [n, t] : state) {
    const bool known = std::any_of(mine.begin(), mine.end(), [&](const auto& e) { return e.first == n; });
    if (!known) unexpected.push_back(n);
  }
  if (given.size() != state.size()) OCTET_FAIL("LoadScalingState: repeated names");
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = "LoadScalingState: FP8 scaling state does not match the model (is amp O1 set the same way?); "
                      "nothing was loaded.";
    if (!missing.empty()) absl::StrAppend(&msg, " Missing: ", absl::StrJoin(missing, ", "), ".");
    if (!unexpected.empty()) absl::StrAppend(&msg, " Unexpected: ", absl::StrJoin(unexpected, ", "), ".");
    if (!mismatched.empty()) absl::StrAppend(&msg, " Mismatched: ", absl::StrJoin(mismatched, "; "), ".");
    OCTET_FAIL(msg);
  }
  // The values LoadTrainingState rejects (one check for both): a NaN, inf,
  // negative amax or non-positive scale would make every later step NaN.
  for (const Copy& c : copies) {
    const std::string bad = nn::internal::BadValue(c.name, c.src, /*scaling_state=*/true, "FP8 scaling state");
    if (!bad.empty()) OCTET_FAIL("LoadScalingState: entry '", c.name, "' ", bad, "; nothing was loaded");
  }
  NoGradGuard no_grad;
  for (const Copy& c : copies) {
    Tensor d = c.dst;
    d.CopyFrom_(c.src);
  }
  // NOTE [initialised on the host]: a load decides from the loaded histories
  // (one read of them, at load time, not in a training step).
  for (auto& [name, m] : model.NamedModules()) {
    for (Fp8LinearState* st : m->Fp8States()) {
      for (Fp8Slot* slot : st->slots()) {
        bool seen = false;
        for (float h : slot->amax_history().ToFloats()) seen = seen || h != 0.0f;
        slot->SetInitialized(seen);
        slot->ResetPendingAmax();
      }
    }
  }
}

}  // namespace octet::nn::amp
