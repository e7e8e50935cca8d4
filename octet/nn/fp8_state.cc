#include <octet/nn/fp8_state.h>

#include <utility>

#include <octet/autograd/grad_mode.h>
#include <octet/core/dtype.h>
#include <octet/ops/delayed_scaling.h>
#include <octet/ops/pointwise.h>

namespace octet::nn::amp {

Fp8State::Fp8State(Module& model) : model_(&model) {}

std::vector<Fp8State::Entry> Fp8State::Collect() const {
  std::vector<Entry> out;
  for (auto& [name, m] : model_->NamedModules()) {
    for (Fp8LinearState* st : m->Fp8States()) {
      if (st->orphaned()) continue;
      const std::vector<Fp8Slot*> slots = st->slots();
      for (int i = 0; i < static_cast<int>(slots.size()); ++i) {
        out.push_back({.slot = slots[i],
                       .algo = static_cast<uint8_t>(st->update_algo(i)),
                       .fp8_max = static_cast<float>(Info(slots[i]->dtype()).max_finite)});
      }
    }
  }
  return out;
}

bool Fp8State::IsBound(const std::vector<Entry>& entries) const {
  if (entries.size() != entries_.size() || !history_.defined()) return false;
  if (entries.empty()) return true;
  const int64_t H = history_.size(1);
  const float* h = history_.data<float>();
  const float* s = scale_.data<float>();
  const float* a = amax_.data<float>();
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry &e = entries[i], &b = entries_[i];
    if (e.slot != b.slot || e.algo != b.algo || e.fp8_max != b.fp8_max) return false;
    // The module buffers must still be our views (Module::To, a recipe reset
    // or a foreign assignment replaces them).
    const Tensor& hist = e.slot->amax_history();
    if (hist.device() != history_.device() || hist.numel() != H || hist.data<float>() != h + i * H ||
        e.slot->scale_tensor().data<float>() != s + i || e.slot->pending_amax().data<float>() != a + i)
      return false;
  }
  return true;
}

void Fp8State::Bind(std::vector<Entry> entries) {
  // One recipe-wide configuration: the fused update has one margin and
  // power-of-two rule, and the buffers one history length.
  bool first = true;
  Recipe ref;
  Device device = kCPU;
  for (auto& [name, m] : model_->NamedModules()) {
    for (Fp8LinearState* st : m->Fp8States()) {
      if (st->orphaned()) continue;
      const Recipe& r = st->recipe();
      const Device d = st->input().device();
      if (first) {
        ref = r;
        device = d;
        first = false;
        continue;
      }
      OCTET_CHECK(r.amax_history_len == ref.amax_history_len && r.margin == ref.margin &&
                      r.power_of_two_scales == ref.power_of_two_scales,
                  "amp::Fp8State: every FP8 GEMM of a model must share amax_history_len, margin and "
                  "power_of_two_scales; module '", name, "' has ", r.amax_history_len, ", ", r.margin, ", ",
                  r.power_of_two_scales, " but the first has ", ref.amax_history_len, ", ", ref.margin, ", ",
                  ref.power_of_two_scales);
      OCTET_CHECK(d == device, "amp::Fp8State: FP8 state of module '", name, "' is on ", d, " but the first is on ",
                  device, "; move the whole model with To(device)");
    }
  }
  config_ = {.margin = ref.margin, .algo = ref.amax_algo, .power_of_two = ref.power_of_two_scales};
  const int64_t S = static_cast<int64_t>(entries.size());
  const int64_t H = ref.amax_history_len;
  const TensorOptions f32{.dtype = DType::kFloat32, .device = device};
  NoGradGuard no_grad;
  history_ = Empty({S, H}, f32);
  scale_ = Empty({S}, f32);
  amax_ = Empty({S}, f32);
  std::vector<float> fp8_max(S);
  Tensor algo = Empty({S}, {.dtype = DType::kUInt8});
  for (int64_t i = 0; i < S; ++i) {
    Fp8Slot& slot = *entries[i].slot;
    OCTET_CHECK(slot.amax_history().numel() == H, "amp::Fp8State: slot ", slot.name(), " has a history of ",
                slot.amax_history().numel(), " entries, expected ", H);
    // Copies of the slots' current values: a rebind loses nothing.
    history_.Select(0, i).CopyFrom_(slot.amax_history());
    scale_.Narrow(0, i, 1).CopyFrom_(slot.scale_tensor());
    amax_.Narrow(0, i, 1).CopyFrom_(slot.pending_amax());
    fp8_max[i] = entries[i].fp8_max;
    algo.data<uint8_t>()[i] = entries[i].algo;
  }
  scale_inv_ = S > 0 ? Div(Ones({S}, f32), scale_) : Empty({0}, f32);
  fp8_max_ = FromVector(fp8_max, {S}).To(device);
  algo_ = algo.To(device);
  for (int64_t i = 0; i < S; ++i)
    entries[i].slot->Bind(history_.Select(0, i), scale_.Narrow(0, i, 1), amax_.Narrow(0, i, 1));
  entries_ = std::move(entries);
  ++binds_;
}

void Fp8State::Sync() {
  std::vector<Entry> entries = Collect();
  if (!IsBound(entries)) Bind(std::move(entries));
}

Tensor Fp8State::amax() {
  Sync();
  return amax_;
}

void Fp8State::Update() {
  Sync();
  ++updates_;
  if (entries_.empty()) return;
  if (reduce_hook_) reduce_hook_(amax_);  // NOTE [fp8 amax all-reduce]
  UpdateDelayedScalingBuffers(history_, amax_, scale_, scale_inv_, fp8_max_, algo_, config_);
  for (const Entry& e : entries_) e.slot->MarkUpdated();
}

}  // namespace octet::nn::amp
