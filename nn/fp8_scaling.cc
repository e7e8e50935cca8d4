#include "nn/fp8_scaling.h"

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/bfloat16.h"
#include "core/dtype_traits.h"
#include "core/delayed_scaling.h"
#include "core/scaling_math.h"
#include "ops/cpu/loops.h"
#include "ops/delayed_scaling.h"

namespace octet::nn::amp {
namespace {

float HalfMinSubnormal(DType fp8) {
  // e4m3: 2^-10, e5m2: 2^-17 (core/float8.h kHalfMinSubnormalAbs).
  return fp8 == DType::kFloat8E4M3 ? 0.0009765625f : 7.62939453125e-06f;
}

// Host copies of small float32 state tensors (device tensors round-trip).
std::vector<float> HostFloats(const Tensor& t) { return t.ToFloats(); }

}  // namespace

ClipCounts CountFp8Clipping(const Tensor& x_in, float scale, DType fp8_dtype) {
  OCTET_CHECK(IsFp8(fp8_dtype), "CountFp8Clipping: ", Name(fp8_dtype), " is not an FP8 dtype");
  Tensor x = x_in.device().is_cpu() ? x_in : x_in.To(kCPU);
  x = x.Contiguous();
  // Where round-to-nearest-even leaves the finite range (see the header):
  // half a step above the max, the tie going to 448 (even) in E4M3 and to
  // 65536 (even: inf) in E5M2.
  const bool e4m3 = fp8_dtype == DType::kFloat8E4M3;
  const float clamp_from = e4m3 ? 464.0f : 61440.0f;
  const float tiny = HalfMinSubnormal(fp8_dtype);
  ClipCounts total;
  total.numel = x.numel();
  DispatchFloat(x.dtype(), "CountFp8Clipping", [&]<typename T>() {
    const T* p = x.data<T>();
    const int64_t n = x.numel();
    int64_t sat = 0, under = 0;
#pragma omp parallel for reduction(+ : sat, under) schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(p[i]);
      const float a = std::fabs(v * scale);
      sat += e4m3 ? a > clamp_from : a >= clamp_from;
      under += (v != 0.0f) & (a <= tiny);
    }
    total.saturated = sat;
    total.underflow = under;
  });
  return total;
}

Fp8Slot::Fp8Slot(std::string name, DType dtype, Tensor* history, Tensor* scale, int history_len, Device device)
    : name_(std::move(name)), dtype_(dtype), history_(history), scale_(scale) {
  OCTET_CHECK(IsFp8(dtype), "Fp8Slot ", name_, ": ", Name(dtype), " is not an FP8 dtype");
  OCTET_CHECK(history_len >= 1, "Fp8Slot ", name_, ": amax history length must be >= 1, got ", history_len);
  *history_ = Zeros({history_len}, {.dtype = DType::kFloat32, .device = device});
  *scale_ = Ones({1}, {.dtype = DType::kFloat32, .device = device});
}

float Fp8Slot::scale() const { return static_cast<float>(scale_->Item()); }

bool Fp8Slot::KnownInitialized() const {
  const std::shared_ptr<Storage> known = known_storage_.lock();
  return known != nullptr && known == history_->storage() && known_version_ == known->version();
}

bool Fp8Slot::initialized() const {
  if (KnownInitialized()) return true;
  for (float h : HostFloats(*history_)) {
    if (h > 0.0f) {
      known_storage_ = history_->storage();
      known_version_ = history_->storage()->version();
      return true;
    }
  }
  known_storage_.reset();
  return false;
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
  Tensor next = scale_->Clone();
  // Current scaling is a delayed-scaling update over a one-entry history:
  // reduced amax = amax, scale = ComputeScale(amax, ..., previous = slot scale).
  const TensorOptions f32{.dtype = DType::kFloat32, .device = device()};
  const DelayedScalingConfig config{.margin = recipe.margin, .algo = AmaxAlgo::kMax,
                                    .power_of_two = recipe.power_of_two_scales};
  UpdateDelayedScaling({{.history = Empty({1}, f32), .amax = amax.Reshape({1}), .scale = next,
                         .scale_inv = Empty({1}, f32), .fp8_max = static_cast<float>(Info(dtype_).max_finite)}},
                       config);
  return next;
}

void Fp8Slot::Record(const Recipe& recipe, const Tensor& amax, const Tensor& used_scale) {
  CheckOnDevice(amax, "amax");
  CheckOnDevice(used_scale, "used_scale");
  // Still initialised after our own update (NOTE [slot state on the device]).
  const bool was_known = KnownInitialized();
  const TensorOptions f32{.dtype = DType::kFloat32, .device = device()};
  const bool delayed = recipe.scaling == Scaling::kDelayed;
  const DelayedScalingConfig config{.margin = recipe.margin, .algo = recipe.amax_algo,
                                    .power_of_two = recipe.power_of_two_scales};
  // The shared host/device update (core/delayed_scaling.h); current scaling
  // only rolls the history and then stores the scale it used.
  UpdateDelayedScaling({{.history = *history_, .amax = amax.Reshape({1}), .scale = delayed ? *scale_ : Empty({1}, f32),
                         .scale_inv = Empty({1}, f32), .fp8_max = static_cast<float>(Info(dtype_).max_finite)}},
                       config);
  if (!delayed) {
    NoGradGuard no_grad;
    scale_->CopyFrom_(used_scale.Reshape({1}));
  }
  if (was_known) known_version_ = history_->storage()->version();
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
