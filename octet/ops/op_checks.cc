#include <octet/ops/op_checks.h>

#include <cstdint>
#include <string>
#include <utility>

#include <octet/autograd/grad_mode.h>

namespace octet {

void CheckDefined(const char* op, const Tensor& t, const char* arg) {
  OCTET_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

void CheckUnscaledFloat(const char* op, const Tensor& t, const char* arg) {
  CheckDefined(op, t, arg);
  OCTET_CHECK(!IsFp8(t.dtype()), op, ": argument '", arg, "' is ", Describe(t), "; ", op,
              " ignores FP8 scales, so FP8 inputs are rejected (Dequantize it first, or use an op that takes "
              "scaled FP8)");
  OCTET_CHECK(IsUnscaledFloat(t.dtype()), op, ": argument '", arg, "' is ", Describe(t),
              "; expected float32, float64, bfloat16 or float16");
}

void CheckSameDtype(const char* op, const Tensor& a, const Tensor& b) {
  OCTET_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", Describe(a), " vs ", Describe(b),
              " (convert one with To(dtype))");
}

void CheckSameDevice(const char* op, const Tensor& a, const Tensor& b) {
  OCTET_CHECK(a.device() == b.device(), op, ": device mismatch: ", Describe(a), " is on ", a.device(), " but ",
              Describe(b), " is on ", b.device());
}

void CheckDtypeIn(const char* op, const Tensor& t, const char* arg, std::initializer_list<DType> allowed) {
  CheckDefined(op, t, arg);
  std::string names;
  for (DType d : allowed) {
    if (d == t.dtype()) return;
    names += (names.empty() ? "" : ", ");
    names += Name(d);
  }
  OCTET_FAIL(op, ": argument '", arg, "' is ", Describe(t), "; expected dtype ", names);
}

void CheckRank(const char* op, const Tensor& t, const char* arg, int64_t rank) {
  CheckDefined(op, t, arg);
  OCTET_CHECK(t.dim() == rank, op, ": argument '", arg, "' must have rank ", rank, ", got ", Describe(t));
}

void CheckInPlaceAllowed(const char* op, const Tensor& t) {
  CheckDefined(op, t, "self");
  OCTET_CHECK(!(autograd::GradMode::IsEnabled() && t.requires_grad()), op, ": in-place op on ", Describe(t),
              " which requires grad; run it under NoGradGuard or on a detached tensor");
}

bool SameElements(const Tensor& a, const Tensor& b) {
  if (a.device() != b.device() || a.raw_data() != b.raw_data() || a.dtype() != b.dtype() || a.shape() != b.shape())
    return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.shape()[d] > 1 && a.strides()[d] != b.strides()[d]) return false;
  return true;
}

namespace {

// The bytes [lo, hi) that a non-empty t's elements span.
std::pair<intptr_t, intptr_t> ByteSpan(const Tensor& t) {
  int64_t lo = 0, hi = 0;  // elements relative to element [0, ..., 0]
  for (int64_t d = 0; d < t.dim(); ++d) (t.strides()[d] >= 0 ? hi : lo) += (t.shape()[d] - 1) * t.strides()[d];
  const auto base = reinterpret_cast<intptr_t>(t.raw_data());
  const auto item = static_cast<intptr_t>(SizeOf(t.dtype()));
  return {base + lo * item, base + (hi + 1) * item};
}

}  // namespace

bool PartiallyOverlaps(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0 || src.numel() == 0 || dst.device() != src.device() || SameElements(dst, src)) return false;
  const auto [dlo, dhi] = ByteSpan(dst);
  const auto [slo, shi] = ByteSpan(src);
  return dlo < shi && slo < dhi;
}

Tensor UnaliasedOperand(const Tensor& dst, const Tensor& src) {
  return PartiallyOverlaps(dst, src) ? src.detach().Clone() : src;
}

void CheckPerTensorScale(const char* op, const Tensor& t) {
  const ScaleMeta* meta = t.scale_meta();
  OCTET_CHECK(meta == nullptr || meta->granularity == ScaleGranularity::kPerTensor, op, ": ", Describe(t), " has ",
              Name(meta->granularity), " scaling; only per-tensor scales are supported");
}

void CheckFp8Target(const char* op, const Tensor& x, DType fp8, const Tensor& scale) {
  OCTET_CHECK(IsFp8(fp8), op, ": target dtype ", Name(fp8), " is not an FP8 dtype (fp8_e4m3 or fp8_e5m2); x ",
              Describe(x));
  CheckDefined(op, scale, "scale");
  OCTET_CHECK(scale.dtype() == DType::kFloat32 && scale.numel() == 1, op,
              ": scale must be a float32 tensor with one element, got ", Describe(scale));
  CheckSameDevice(op, x, scale);
}

std::shared_ptr<ScaleMeta> NewFp8OutputMeta(const Tensor& scale, Device device) {
  auto meta = std::make_shared<ScaleMeta>();
  meta->granularity = ScaleGranularity::kPerTensor;
  meta->scale = scale.detach().Reshape({1}).Clone();
  meta->scale_inv = Empty({1}, {.dtype = DType::kFloat32, .device = device});
  meta->amax = Empty({1}, {.dtype = DType::kFloat32, .device = device});
  return meta;
}

}  // namespace octet
