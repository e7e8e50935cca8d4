#include <octet/optim/optimizer.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <octet/core/allocator.h>
#include <octet/core/scaling.h>

namespace octet::optim {

void Optimizer::CheckFiniteNonNegative(std::string_view what, const char* name, double value) {
  OCTET_CHECK(std::isfinite(value) && value >= 0.0, what, ": ", name, " must be finite and >= 0, got ", value);
}

void Optimizer::set_lr(double lr) {
  CheckFiniteNonNegative(kind_, "lr", lr);
  lr_ = lr;
}

Optimizer::Optimizer(std::string kind, NamedTensors params, double lr)
    : kind_(std::move(kind)), params_(std::move(params)), lr_(lr) {
  std::set<std::string> seen;
  for (const auto& [name, p] : params_) {
    const std::string op = kind_ + " optimizer";
    OCTET_CHECK(p.defined(), op, ": parameter '", name, "' is an undefined tensor");
    OCTET_CHECK(seen.insert(name).second, op, ": parameter name '", name, "' appears twice");
    OCTET_CHECK(IsUnscaledFloat(p.dtype()), op, ": parameter '", name, "' is ", Describe(p),
                "; expected float32, float64, bfloat16 or float16 (keep FP8 copies outside the optimizer)");
    OCTET_CHECK(p.is_leaf() && p.requires_grad(), op, ": parameter '", name, "' (", Describe(p),
                ") must be a leaf tensor that requires grad");
    OCTET_CHECK(p.is_contiguous(), op, ": parameter '", name, "' (", Describe(p), ") must be contiguous");
    OCTET_CHECK(p.device() == params_.front().second.device(), op, ": parameter '", name, "' is on ", p.device(),
                " but '", params_.front().first, "' is on ", params_.front().second.device());
  }
  CheckFiniteNonNegative(kind_, "lr", lr_);
}

void Optimizer::ZeroGrad() {
  for (const auto& [name, p] : params_) p.zero_grad();
}

void Optimizer::RegisterState(const std::string& name, Tensor* tensor) {
  for (const auto& [n, t] : state_) OCTET_CHECK(n != name, kind_, " optimizer: state name '", name, "' registered twice");
  state_.emplace_back(name, tensor);
}

OptimizerState Optimizer::StateDict() const {
  OptimizerState s;
  s.tensors.reserve(state_.size());
  for (const auto& [name, t] : state_) s.tensors.emplace_back(name, *t);
  s.scalars["type"] = kind_;
  s.scalars["step"] = std::to_string(step_count_);
  s.scalars["lr"] = DoubleToString(lr_);
  SaveScalars(&s.scalars);
  return s;
}

namespace {

std::string ListNames(const std::vector<std::string>& names) {
  constexpr size_t kMax = 8;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < names.size() && i < kMax; ++i) quoted.push_back("'" + names[i] + "'");
  std::string s = absl::StrJoin(quoted, ", ");
  if (names.size() > kMax) absl::StrAppend(&s, " and ", names.size() - kMax, " more");
  return s;
}

}  // namespace

void Optimizer::LoadStateDict(const OptimizerState& state) {
  const std::string where = kind_ + " optimizer LoadStateDict";
  // ---- validate everything first ------------------------------------------
  auto type = state.scalars.find("type");
  if (type == state.scalars.end()) OCTET_FAIL(where + ": scalar 'type' is missing");
  if (type->second != kind_) {
    OCTET_FAIL(
        absl::StrCat(where, ": the state is of a '", type->second, "' optimizer, not '", kind_, "'"));
  }
  int64_t step = 0;
  auto step_it = state.scalars.find("step");
  if (step_it == state.scalars.end() || !ParseInt64(step_it->second, &step) || step < 0) {
    OCTET_FAIL(where + ": scalar 'step' is missing or not a non-negative integer");
  }
  double lr = lr_;
  auto lr_it = state.scalars.find("lr");
  if (lr_it != state.scalars.end() && !ParseDouble(lr_it->second, &lr)) {
    OCTET_FAIL(absl::StrCat(where, ": scalar 'lr' is not a number: '", lr_it->second, "'"));
  }
  CheckFiniteNonNegative(where, "scalar 'lr'", lr);
  CheckScalars(state.scalars);

  std::map<std::string, const Tensor*> given;
  std::vector<std::string> duplicates;
  for (const auto& [name, t] : state.tensors) {
    if (!given.emplace(name, &t).second) duplicates.push_back(name);
  }
  if (!duplicates.empty()) {
    OCTET_FAIL(absl::StrCat(where, ": duplicate entries ", ListNames(duplicates)));
  }
  std::vector<std::string> missing, unexpected;
  std::set<std::string> expected;
  for (const auto& [name, t] : state_) {
    expected.insert(name);
    if (!given.count(name)) missing.push_back(name);
  }
  for (const auto& [name, t] : state.tensors) {
    if (!expected.count(name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = where + ":";
    if (!missing.empty()) absl::StrAppend(&msg, " missing entries ", ListNames(missing), ";");
    if (!unexpected.empty()) absl::StrAppend(&msg, " unexpected entries ", ListNames(unexpected), ";");
    msg.pop_back();
    OCTET_FAIL(msg);
  }
  for (const auto& [name, dst] : state_) {
    const Tensor& src = *given.at(name);
    if (!src.defined()) OCTET_FAIL(absl::StrCat(where, ": entry '", name, "' is undefined"));
    if (src.dtype() != dst->dtype() || src.shape() != dst->shape()) {
      OCTET_FAIL(absl::StrCat(where, ": entry '", name, "' is ", Describe(src),
                                                     " but the optimizer holds ", Describe(*dst)));
    }
    if (IsFp8(dst->dtype()) && dst->scale_meta() != nullptr) {
      const ScaleMeta* m = src.scale_meta();
      if (m == nullptr || m->granularity != ScaleGranularity::kPerTensor) {
        OCTET_FAIL(absl::StrCat(where, ": entry '", name, "' (", Describe(src),
                                                       ") has no per-tensor scale metadata (scale_inv)"));
      }
    }
  }

  // ---- apply ------------------------------------------------------------------
  for (const auto& [name, dst] : state_) {
    const Tensor& src = *given.at(name);
    if (src.is_same(*dst)) continue;
    const Tensor s = src.device() == dst->device() ? src.Contiguous() : src.To(dst->device()).Contiguous();
    if (s.raw_data() != dst->raw_data() && dst->nbytes() > 0) {
      // Same dtype: copy the bits (for FP8 this keeps the codes; the scale is copied below).
      CopyBytes(dst->raw_data(), dst->device(), s.raw_data(), s.device(), dst->nbytes());
      dst->storage()->BumpVersion();
    }
    if (IsFp8(dst->dtype()) && dst->scale_meta() != nullptr) {
      const ScaleMeta& from = *src.scale_meta();
      const ScaleMeta& to = *dst->scale_meta();
      const float scale_inv = static_cast<float>(from.scale_inv.Item());
      const float amax = from.amax.defined() ? static_cast<float>(from.amax.Item()) : 0.0f;
      Tensor(to.scale_inv).Fill_(scale_inv);
      Tensor(to.scale).Fill_(1.0f / scale_inv);
      if (to.amax.defined()) Tensor(to.amax).Fill_(amax);
    }
  }
  step_count_ = step;
  lr_ = lr;
  LoadScalars(state.scalars);
  AfterLoad();
}

bool ParseInt64(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno == ERANGE && v != 0.0 && std::abs(v) != HUGE_VAL) errno = 0;  // subnormal results are fine
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

std::string DoubleToString(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace octet::optim
