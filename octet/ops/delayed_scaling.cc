#include <octet/ops/delayed_scaling.h>
#include <octet/ops/delayed_scaling_kernels.h>

#include <algorithm>
#include <utility>

namespace octet {

OCTET_DEFINE_KERNEL(delayed_scaling_update, DelayedScalingUpdateFn);

namespace {

void CheckState(const Tensor& t, const char* what, size_t slot, Device device, bool scalar) {
  OCTET_CHECK(t.defined(), "UpdateDelayedScaling: slot ", slot, ": ", what, " is undefined");
  OCTET_CHECK(t.dtype() == DType::kFloat32 && t.is_contiguous() && t.device() == device &&
                  (scalar ? t.numel() == 1 : (t.dim() == 1 && t.numel() >= 1)),
              "UpdateDelayedScaling: slot ", slot, ": ", what, " must be a contiguous float32 ",
              scalar ? "[1]" : "[H] (H >= 1)", " tensor on ", device, ", got ", Describe(t));
}

}  // namespace

void UpdateDelayedScaling(const std::vector<DelayedScalingSlot>& slots, const DelayedScalingConfig& config) {
  // Group by device, keeping each device's slots in order.
  std::vector<std::pair<Device, std::vector<DelayedScalingSlotPtrs>>> groups;
  for (size_t i = 0; i < slots.size(); ++i) {
    const DelayedScalingSlot& s = slots[i];
    OCTET_CHECK(s.history.defined(), "UpdateDelayedScaling: slot ", i, ": history is undefined");
    const Device device = s.history.device();
    CheckState(s.history, "history", i, device, false);
    CheckState(s.amax, "amax", i, device, true);
    CheckState(s.scale, "scale", i, device, true);
    CheckState(s.scale_inv, "scale_inv", i, device, true);
    OCTET_CHECK(s.fp8_max > 0.0f, "UpdateDelayedScaling: slot ", i, ": fp8_max must be positive, got ", s.fp8_max);
    for (const Tensor* t : {&s.history, &s.scale, &s.scale_inv}) {
      OCTET_CHECK(!t->is_same(s.amax), "UpdateDelayedScaling: slot ", i, ": amax must not alias the outputs");
    }
    DelayedScalingSlotPtrs p;
    p.history = s.history.data<float>();
    p.amax = s.amax.data<float>();
    p.scale = s.scale.data<float>();
    p.scale_inv = s.scale_inv.data<float>();
    p.length = static_cast<int>(s.history.numel());
    p.fp8_max = s.fp8_max;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == device; });
    if (it == groups.end()) {
      groups.emplace_back(device, std::vector<DelayedScalingSlotPtrs>{});
      it = groups.end() - 1;
    }
    it->second.push_back(p);
  }
  for (const auto& [device, ptrs] : groups) delayed_scaling_update(device)(device, ptrs, config);
  for (const DelayedScalingSlot& s : slots) {
    s.history.storage()->BumpVersion();
    s.scale.storage()->BumpVersion();
    s.scale_inv.storage()->BumpVersion();
  }
}


OCTET_DEFINE_KERNEL(delayed_scaling_buffers_update, DelayedScalingBuffersFn);

void UpdateDelayedScalingBuffers(const Tensor& history, const Tensor& amax, const Tensor& scale,
                                 const Tensor& scale_inv, const Tensor& fp8_max, const Tensor& algo,
                                 const DelayedScalingConfig& config) {
  constexpr const char* kOp = "UpdateDelayedScalingBuffers";
  OCTET_CHECK(history.defined() && history.dim() == 2 && history.size(1) >= 1 &&
                  history.dtype() == DType::kFloat32 && history.is_contiguous(),
              kOp, ": history must be a contiguous float32 [S, H] tensor (H >= 1), got ",
              history.defined() ? Describe(history) : std::string("an undefined tensor"));
  const Device device = history.device();
  const int64_t S = history.size(0);
  auto check = [&](const Tensor& t, const char* what, DType dtype) {
    OCTET_CHECK(t.defined() && t.dtype() == dtype && t.dim() == 1 && t.size(0) == S && t.is_contiguous() &&
                    t.device() == device,
                kOp, ": ", what, " must be a contiguous ", Name(dtype), " [", S, "] tensor on ", device, ", got ",
                t.defined() ? Describe(t) : std::string("an undefined tensor"));
  };
  check(amax, "amax", DType::kFloat32);
  check(scale, "scale", DType::kFloat32);
  check(scale_inv, "scale_inv", DType::kFloat32);
  check(fp8_max, "fp8_max", DType::kFloat32);
  check(algo, "algo", DType::kUInt8);
  OCTET_CHECK(S <= (int64_t{1} << 30) && history.size(1) <= (int64_t{1} << 20), kOp, ": too many slots (", S,
              ") or too long a history (", history.size(1), ")");
  if (S == 0) return;
  DelayedScalingBuffers b;
  b.history = history.data<float>();
  b.amax = amax.data<float>();
  b.scale = scale.data<float>();
  b.scale_inv = scale_inv.data<float>();
  b.fp8_max = fp8_max.data<float>();
  b.algo = algo.data<uint8_t>();
  b.slots = static_cast<int>(S);
  b.length = static_cast<int>(history.size(1));
  delayed_scaling_buffers_update(device)(device, b, config);
  for (const Tensor* t : {&history, &amax, &scale, &scale_inv}) t->storage()->BumpVersion();
}

}  // namespace octet
