#include "nn/fp8_scaling.h"

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/bfloat16.h"
#include "core/dtype_traits.h"
#include "core/delayed_scaling.h"
#include "core/scaling_math.h"
#include "ops/cpu/loops.h"

namespace octet::nn::amp {
namespace {

float HalfMinSubnormal(DType fp8) {
  // e4m3: 2^-10, e5m2: 2^-17 (core/float8.h kHalfMinSubnormalAbs).
  return fp8 == DType::kFloat8E4M3 ? 0.0009765625f : 7.62939453125e-06f;
}

// Host copies of small float32 state tensors (device tensors round-trip).
std::vector<float> HostFloats(const Tensor& t) { return t.ToFloats(); }

void StoreFloats(Tensor* t, const std::vector<float>& v) {
  NoGradGuard no_grad;
  Tensor src = FromVector(v, t->shape(), {.dtype = DType::kFloat32});
  t->CopyFrom_(src);
}

}  // namespace

ClipCounts CountFp8Clipping(const Tensor& x_in, float scale, DType fp8_dtype) {
  OCTET_CHECK(IsFp8(fp8_dtype), "CountFp8Clipping: ", Name(fp8_dtype), " is not an FP8 dtype");
  Tensor x = x_in.device().is_cpu() ? x_in : x_in.To(kCPU);
  x = x.Contiguous();
  const float fmax = static_cast<float>(Info(fp8_dtype).max_finite);
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
      sat += a > fmax;
      under += (v != 0.0f) & (a <= tiny);
    }
    total.saturated = sat;
    total.underflow = under;
  });
  return total;
}

Fp8Slot::Fp8Slot(std::string name, DType dtype, Tensor* history, Tensor* scale, int history_len)
    : name_(std::move(name)), dtype_(dtype), history_(history), scale_(scale) {
  OCTET_CHECK(IsFp8(dtype), "Fp8Slot ", name_, ": ", Name(dtype), " is not an FP8 dtype");
  OCTET_CHECK(history_len >= 1, "Fp8Slot ", name_, ": amax history length must be >= 1, got ", history_len);
  *history_ = Zeros({history_len}, {.dtype = DType::kFloat32});
  *scale_ = Ones({1}, {.dtype = DType::kFloat32});
}

float Fp8Slot::scale() const { return static_cast<float>(scale_->Item()); }

bool Fp8Slot::initialized() const {
  for (float h : HostFloats(*history_))
    if (h > 0.0f) return true;
  return false;
}

float Fp8Slot::ScaleFor(const Recipe& recipe, float amax) const {
  const float fmax = static_cast<float>(Info(dtype_).max_finite);
  if (NeedsAmaxFirst(recipe)) return ComputeScale(amax, fmax, recipe.margin, scale(), recipe.power_of_two_scales);
  return scale();
}

void Fp8Slot::Record(const Recipe& recipe, float amax, float used_scale) {
  std::vector<float> h = HostFloats(*history_);
  float next = used_scale;
  if (recipe.scaling == Scaling::kDelayed) {
    // The shared host/device update (core/delayed_scaling.h).
    const DelayedScalingConfig config{.margin = recipe.margin, .algo = recipe.amax_algo,
                                      .power_of_two = recipe.power_of_two_scales};
    float scale_inv = 0.0f;
    UpdateDelayedScalingSlot(h.data(), static_cast<int>(h.size()), amax,
                             static_cast<float>(Info(dtype_).max_finite), config, &next, &scale_inv);
  } else {
    for (size_t i = h.size() - 1; i > 0; --i) h[i] = h[i - 1];
    h[0] = amax;
  }
  StoreFloats(history_, h);
  StoreFloats(scale_, {next});
}

}  // namespace octet::nn::amp
