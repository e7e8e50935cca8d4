#include <octet/optim/clip.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include <octet/autograd/grad_mode.h>
#include <octet/ops/multi_tensor_kernels.h>
#include <octet/ops/pointwise.h>

namespace octet::optim {
namespace {

constexpr double kClipEps = 1e-6;

void CheckGrad(const char* op, const std::string& name, const Tensor& g) {
  OCTET_CHECK(IsUnscaledFloat(g.dtype()), op, ": gradient of '", name, "' is ", Describe(g),
              "; expected float32, float64, bfloat16 or float16");
}

// The defined gradients of one device, in parameter order.
struct DeviceGrads {
  Device device;
  TensorList grads;
  std::vector<std::string> names;
};

// Gradients grouped by device (devices in order of first appearance).
std::vector<DeviceGrads> CollectGrads(const char* op, const NamedTensors& params) {
  std::vector<DeviceGrads> out;
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    CheckGrad(op, name, g);
    DeviceGrads* d = nullptr;
    for (DeviceGrads& e : out)
      if (e.device == g.device()) d = &e;
    if (d == nullptr) d = &out.emplace_back(DeviceGrads{g.device(), {}, {}});
    d->grads.push_back(g);
    d->names.push_back(name);
  }
  return out;
}

// NOTE [gradient norm on a device]: one multi-tensor reduction per device
// (ops/multi_tensor_kernels.h): a float64 [] tensor on that device, no host read.
Tensor DeviceNorm(const Device& device, const TensorList& grads) {
  TensorList xs;
  xs.reserve(grads.size());
  for (const Tensor& g : grads) xs.push_back(g.is_contiguous() ? g : g.Contiguous());
  Tensor norm = Empty({}, {.dtype = DType::kFloat64, .device = device});
  multi_tensor_l2_norm(device)(xs, norm);
  return norm;
}

// Scales the gradients of one device by the clipping coefficient of `norm`
// (on that device) without a host read.
void ClipOnDevice(const DeviceGrads& d, const Tensor& norm, double max_norm) {
  for (size_t i = 0; i < d.grads.size(); ++i)
    OCTET_CHECK(d.grads[i].is_contiguous(), "clip_grad_norm: gradient of '", d.names[i], "' is not contiguous (",
                Describe(d.grads[i]), ")");
  multi_tensor_clip_scale(d.device)(d.grads, norm, max_norm, kClipEps);
  for (const Tensor& g : d.grads) g.storage()->BumpVersion();
}

// The global norm from per-device norms (one host read per device).
double Combine(const std::vector<Tensor>& norms) {
  if (norms.size() == 1) return norms[0].Item();
  double total = 0.0;
  for (const Tensor& n : norms) {
    const double v = n.Item();
    total += v * v;
  }
  return std::sqrt(total);
}

NamedTensors Unnamed(const TensorList& params) {
  NamedTensors named;
  named.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) named.emplace_back(absl::StrCat("#", i), params[i]);
  return named;
}

}  // namespace

double GradNorm(const NamedTensors& params) {
  NoGradGuard no_grad;
  std::vector<Tensor> norms;
  for (const DeviceGrads& d : CollectGrads("clip_grad_norm", params)) norms.push_back(DeviceNorm(d.device, d.grads));
  return norms.empty() ? 0.0 : Combine(norms);
}

void ScaleGrads(const NamedTensors& params, double s) {
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    CheckGrad("scale_grads", name, g);
    // The device's pointwise kernel: one f32 (f64 for double) multiply and
    // rounding per element, the same on every backend.
    NoGradGuard no_grad;
    MulScalarInPlace(g, s);
  }
}

double ClipGradNorm(const NamedTensors& params, double max_norm, bool error_if_nonfinite) {
  OCTET_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  NoGradGuard no_grad;
  const std::vector<DeviceGrads> groups = CollectGrads("clip_grad_norm", params);
  if (groups.empty()) return 0.0;
  std::vector<Tensor> norms;
  for (const DeviceGrads& d : groups) norms.push_back(DeviceNorm(d.device, d.grads));
  const double total = Combine(norms);
  if (!std::isfinite(total)) {
    if (error_if_nonfinite) {
      std::string bad;
      for (const DeviceGrads& d : groups)
        for (size_t i = 0; i < d.grads.size(); ++i)
          if (!std::isfinite(DeviceNorm(d.device, {d.grads[i]}).Item()))
            absl::StrAppend(&bad, bad.empty() ? "'" : ", '", d.names[i], "'");
      if (bad.empty()) bad = "none individually (the sum overflowed)";
      OCTET_FAIL("clip_grad_norm: the total gradient norm is ", total, "; non-finite gradients in ", bad);
    }
    return total;  // NOTE [non-finite gradient norm]: reported, gradients untouched
  }
  if (groups.size() == 1) {
    // The coefficient is computed on the device from the same norm (the
    // same f64 operations as below).
    ClipOnDevice(groups[0], norms[0], max_norm);
    return total;
  }
  const double coef = max_norm / (total + kClipEps);
  if (coef < 1.0) ScaleGrads(params, coef);
  return total;
}

Tensor GradNormTensor(const NamedTensors& params) {
  NoGradGuard no_grad;
  // NOTE [clipping without a host read]
  const std::vector<DeviceGrads> groups = CollectGrads("clip_grad_norm", params);
  OCTET_CHECK(groups.size() <= 1, "clip_grad_norm: gradient of '", groups.size() > 1 ? groups[1].names[0] : "",
              "' is on ", groups.size() > 1 ? groups[1].device : kCPU, " but an earlier one is on ",
              groups.empty() ? kCPU : groups[0].device, "; the device-side norm needs one device");
  if (groups.empty()) return Full({}, 0.0, {.dtype = DType::kFloat64});
  return DeviceNorm(groups[0].device, groups[0].grads);
}

Tensor ClipGradNormTensor(const NamedTensors& params, double max_norm) {
  OCTET_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  NoGradGuard no_grad;
  const Tensor total = GradNormTensor(params);
  const std::vector<DeviceGrads> groups = CollectGrads("clip_grad_norm", params);
  if (!groups.empty()) ClipOnDevice(groups[0], total, max_norm);
  return total;
}

double ClipGradNorm(const TensorList& params, double max_norm, bool error_if_nonfinite) {
  return ClipGradNorm(Unnamed(params), max_norm, error_if_nonfinite);
}

}  // namespace octet::optim
