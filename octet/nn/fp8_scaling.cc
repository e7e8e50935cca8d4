#include <octet/nn/fp8_scaling.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/core/bfloat16.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/delayed_scaling.h>
#include <octet/core/scaling_math.h>
#include <octet/ops/delayed_scaling.h>
#include <octet/ops/fp8_stats_kernels.h>
#include <octet/ops/pointwise.h>

namespace octet::nn::amp {

ClipCounts CountFp8Clipping(const Tensor& x_in, float scale, DType fp8_dtype) {
  OCTET_CHECK(IsFp8(fp8_dtype), "CountFp8Clipping: ", Name(fp8_dtype), " is not an FP8 dtype");
  // The cast's thresholds: NOTE [fp8 clip counts] in ops/fp8_stats_kernels.h.
  const Tensor x = x_in.Contiguous();
  const Fp8ClipCounts c = fp8_clip_count_kernel(x.device())(x, scale, fp8_dtype);
  return {.saturated = c.saturated, .underflow = c.underflow, .numel = x.numel()};
}

ClipCounts CountFp8ClippingOfRows(const Tensor& x, const std::function<Tensor(const Tensor& rows)>& map, float scale,
                                  DType fp8_dtype) {
  constexpr int64_t kRowsPerBlock = 64;
  NoGradGuard no_grad;
  const int64_t c = x.dim() == 0 ? 1 : x.shape().back(), rows = c == 0 ? 0 : x.numel() / c;
  const Tensor x2 = x.detach().Reshape({rows, c});
  ClipCounts total;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerBlock) {
    const ClipCounts n = CountFp8Clipping(map(x2.Slice(0, r0, std::min(rows, r0 + kRowsPerBlock))), scale, fp8_dtype);
    total.saturated += n.saturated;
    total.underflow += n.underflow;
    total.numel += n.numel;
  }
  return total;
}

Fp8Slot::Fp8Slot(std::string name, DType dtype, Tensor* history, Tensor* scale, int history_len, Device device)
    : name_(std::move(name)), dtype_(dtype), history_(history), scale_(scale) {
  OCTET_CHECK(IsFp8(dtype), "Fp8Slot ", name_, ": ", Name(dtype), " is not an FP8 dtype");
  OCTET_CHECK(history_len >= 1, "Fp8Slot ", name_, ": amax history length must be >= 1, got ", history_len);
  *history_ = Zeros({history_len}, {.dtype = DType::kFloat32, .device = device});
  *scale_ = Ones({1}, {.dtype = DType::kFloat32, .device = device});
  amax_ = Full({1}, kNoAmaxRecorded, {.dtype = DType::kFloat32, .device = device});
}

float Fp8Slot::scale() const { return static_cast<float>(scale_->Item()); }

void Fp8Slot::EnsurePendingOnDevice() const {
  // Module::To(device) moves the history and scale (module buffers); the
  // pending amax follows here, before its first use on the new device.
  if (amax_.device() != device()) amax_ = amax_.To(device());
}

const Tensor& Fp8Slot::pending_amax() const {
  EnsurePendingOnDevice();
  return amax_;
}

void Fp8Slot::CheckOnDevice(const Tensor& t, const char* what) const {
  OCTET_CHECK(t.defined() && t.dtype() == DType::kFloat32 && t.numel() == 1 && t.device() == device(), "Fp8Slot ",
              name_, ": ", what, " must be a float32 [1] tensor on ", device(), " (the slot's device), got ",
              t.defined() ? Describe(t) : std::string("an undefined tensor"));
}

Tensor Fp8Slot::ScaleFor(const Recipe& recipe, const Tensor& amax) const {
  CheckOnDevice(amax, "amax");
  return NeedsAmaxFirst(recipe) ? CurrentScale(recipe, amax) : scale_->Clone();
}

Tensor Fp8Slot::CurrentScale(const Recipe& recipe, const Tensor& amax) const {
  CheckOnDevice(amax, "amax");
  return amp::CurrentScale(recipe, dtype_, amax, *scale_);
}

Tensor CurrentScale(const Recipe& recipe, DType fp8, const Tensor& amax, const Tensor& previous) {
  OCTET_CHECK(IsFp8(fp8), "amp::CurrentScale: ", Name(fp8), " is not an FP8 dtype");
  Tensor next = previous.Clone();
  // Current scaling is a delayed-scaling update over a one-entry history:
  // reduced amax = amax, scale = ComputeScale(amax, ..., previous).
  const TensorOptions f32{.dtype = DType::kFloat32, .device = previous.device()};
  const DelayedScalingConfig config{.margin = recipe.margin, .algo = AmaxAlgo::kMax,
                                    .power_of_two = recipe.power_of_two_scales};
  UpdateDelayedScaling({{.history = Empty({1}, f32), .amax = amax.Reshape({1}), .scale = next,
                         .scale_inv = Empty({1}, f32), .fp8_max = static_cast<float>(Info(fp8).max_finite)}},
                       config);
  return next;
}

void Fp8Slot::Record(const Tensor& amax) {
  CheckOnDevice(amax, "amax");
  EnsurePendingOnDevice();
  // NOTE [delayed scaling order]: the micro-batches of a step max-combine
  // (kMaximum keeps a NaN from either side).
  NoGradGuard no_grad;
  // In place: one kernel and no temporary, where a Maximum and a copy back
  // were two ops and an allocation for every quantized tensor (0.97 -> 0.53
  // us a call in a loop, one thread).
  MaximumInPlace(amax_, amax.Reshape({1}));
  recorded_ = true;
}

void Fp8Slot::Bind(const Tensor& history, const Tensor& scale, const Tensor& amax) {
  OCTET_CHECK(history.shape() == history_->shape() && scale.numel() == 1 && amax.numel() == 1, "Fp8Slot ", name_,
              ": Bind got history ", Describe(history), " for ", Describe(*history_));
  *history_ = history;
  *scale_ = scale;
  amax_ = amax;
}

void Fp8Slot::MarkUpdated() {
  if (recorded_) initialized_ = true;
  recorded_ = false;
}

void Fp8Slot::ResetPendingAmax() {
  EnsurePendingOnDevice();
  NoGradGuard no_grad;
  amax_.Fill_(kNoAmaxRecorded);
  recorded_ = false;
}

void Fp8Slot::Observe(const Tensor& amax, const Tensor& scale, int64_t numel, const ClipCounts* clip) {
  pending_amax_ = amax;
  pending_scale_ = scale;
  obs_.numel = numel;
  ++obs_.count;
  obs_.has_clip_stats = clip != nullptr;
  if (clip != nullptr) {
    obs_.saturated = static_cast<double>(clip->saturated) / std::max<int64_t>(1, clip->numel);
    obs_.underflow = static_cast<double>(clip->underflow) / std::max<int64_t>(1, clip->numel);
  }
}

const SlotObservation& Fp8Slot::observation() const {
  if (pending_amax_.defined()) {
    obs_.amax = static_cast<float>(pending_amax_.Item());
    obs_.scale = static_cast<float>(pending_scale_.Item());
    pending_amax_ = Tensor();
    pending_scale_ = Tensor();
  }
  return obs_;
}

}  // namespace octet::nn::amp
