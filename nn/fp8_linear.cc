#include "nn/fp8_linear.h"

#include "autograd/grad_mode.h"
#include "core/scaling.h"
#include "ops/cast.h"
#include "ops/matmul.h"
#include "ops/op_checks.h"
#include "ops/reduce.h"

namespace octet::nn::amp {
namespace {

constexpr const char* kSlotNames[3] = {"input", "weight", "grad_output"};

float AmaxOf(const Tensor& x) { return static_cast<float>(Amax(x).Item()); }

// ScaledMatmul writes float32 or bfloat16; other dtypes get an f32 result converted once.
DType GemmOut(DType want) { return want == DType::kBFloat16 ? want : DType::kFloat32; }
Tensor AsDType(const Tensor& t, DType d) { return t.dtype() == d ? t : t.To(d); }

}  // namespace

// ---- state ---------------------------------------------------------------------------

Fp8LinearState::Fp8LinearState(Module& owner, const std::string& prefix, const std::string& label,
                               const Recipe& recipe)
    : owner_(&owner), prefix_(prefix), label_(label), recipe_(recipe) {
  MakeSlots(owner);
}

void Fp8LinearState::MakeSlots(Module& owner) {
  const DType dtypes[3] = {recipe_.forward_dtype, recipe_.forward_dtype, recipe_.backward_dtype};
  std::unique_ptr<Fp8Slot>* slots[3] = {&input_, &weight_, &grad_output_};
  for (int i = 0; i < 3; ++i) {
    const std::string base = prefix_ + "fp8_" + kSlotNames[i];
    Tensor* history = owner.FindBuffer(base + "_amax_history");
    if (history == nullptr) history = &owner.RegisterBuffer(base + "_amax_history", Zeros({1}), /*persistent=*/false);
    Tensor* scale = owner.FindBuffer(base + "_scale");
    if (scale == nullptr) scale = &owner.RegisterBuffer(base + "_scale", Ones({1}), /*persistent=*/false);
    *slots[i] = std::make_unique<Fp8Slot>(kSlotNames[i], dtypes[i], history, scale, recipe_.amax_history_len);
  }
  cached_storage_.reset();
}

void Fp8LinearState::SetRecipe(const Recipe& recipe) {
  const bool reset = recipe.amax_history_len != recipe_.amax_history_len ||
                     recipe.forward_dtype != recipe_.forward_dtype || recipe.backward_dtype != recipe_.backward_dtype;
  recipe_ = recipe;
  if (reset) MakeSlots(*owner_);
}

Tensor Fp8LinearState::QuantizedWeight(const Tensor& w) {
  OCTET_CHECK(!orphaned_, "fp8_linear: the Linear owning this FP8 state was destroyed");
  const bool hit = cached_fp8_.defined() && cached_storage_ == w.storage() &&
                   cached_version_ == w.storage()->version() && cached_offset_ == w.offset() &&
                   cached_shape_ == w.shape() && cached_dtype_ == w.dtype();
  if (hit) return cached_fp8_;
  // NOTE [weight scaling]: current scaling from the weight's own amax.
  const float amax = AmaxOf(w);
  const float fmax = static_cast<float>(Info(weight_->dtype()).max_finite);
  const float scale = ComputeScale(amax, fmax, recipe_.margin, weight_->scale(), recipe_.power_of_two_scales);
  cached_fp8_ = octet::Quantize(w.detach(), weight_->dtype(), scale);
  Recipe current = recipe_;
  current.scaling = Scaling::kCurrent;
  weight_->Record(current, amax, scale);
  SlotObservation& o = weight_->observation();
  o.amax = amax;
  o.scale = scale;
  o.numel = w.numel();
  ++o.count;
  o.has_clip_stats = telemetry_;
  if (telemetry_) {
    const ClipCounts c = CountFp8Clipping(w, scale, weight_->dtype());
    o.saturated = static_cast<double>(c.saturated) / std::max<int64_t>(1, c.numel);
    o.underflow = static_cast<double>(c.underflow) / std::max<int64_t>(1, c.numel);
  }
  cached_storage_ = w.storage();
  cached_version_ = w.storage()->version();
  cached_offset_ = w.offset();
  cached_shape_ = w.shape();
  cached_dtype_ = w.dtype();
  ++weight_quantizations_;
  return cached_fp8_;
}

Tensor Fp8LinearState::Quantize(Fp8Slot& slot, const Tensor& x, bool record) {
  OCTET_CHECK(!orphaned_, "fp8_linear: the Linear owning this FP8 state was destroyed");
  float scale;
  if (slot.NeedsAmaxFirst(recipe_)) {
    scale = slot.ScaleFor(recipe_, AmaxOf(x));
  } else {
    scale = slot.scale();
  }
  Tensor q = octet::Quantize(x, slot.dtype(), scale);
  const float amax = static_cast<float>(q.scale_meta()->amax.Item());
  if (record) slot.Record(recipe_, amax, scale);
  SlotObservation& o = slot.observation();
  o.amax = amax;
  o.scale = scale;
  o.numel = x.numel();
  ++o.count;
  o.has_clip_stats = telemetry_;
  if (telemetry_) {
    const ClipCounts c = CountFp8Clipping(x, scale, slot.dtype());
    o.saturated = static_cast<double>(c.saturated) / std::max<int64_t>(1, c.numel);
    o.underflow = static_cast<double>(c.underflow) / std::max<int64_t>(1, c.numel);
  }
  return q;
}

// ---- the op ------------------------------------------------------------------------------

Tensor Fp8LinearOp::Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                            const std::shared_ptr<Fp8LinearState>& state, bool record, DType out_dtype) {
  CheckUnscaledFloat(kName, x, "x");
  CheckUnscaledFloat(kName, w, "weight");
  OCTET_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), kName, ": x ", Describe(x),
              " and weight ", Describe(w), " do not match (expected x (..., K) and weight (N, K))");
  OCTET_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)), kName, ": bias ", Describe(b),
              " must be (N) = (", w.size(0), ")");
  OCTET_CHECK(state != nullptr, kName, ": no FP8 state");
  const int64_t K = w.size(1), N = w.size(0);
  const int64_t M = x.numel() / K;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  const Tensor x2 = x.Reshape({M, K}).Contiguous();                     // (M,K)
  const Tensor x_fp8 = state->Quantize(state->input(), x2, record);     // (M,K) E4M3
  const Tensor w_fp8 = state->QuantizedWeight(w);                       // (N,K) E4M3
  // The bias is added to the f32 accumulator (f32 or bf16 accepted), then one rounding to out_dtype.
  const Tensor bias = !b.defined() || b.dtype() == DType::kFloat32 || b.dtype() == DType::kBFloat16 ? b : b.To(DType::kFloat32);
  const Tensor y = ScaledMatmul(x_fp8, w_fp8.T(), out_dtype, bias);     // (M,N)
  ctx.Save(x_fp8);
  ctx.Save(w_fp8);
  ctx.state = state;
  ctx.shapes = {x.shape()};
  ctx.dtypes = {x.dtype(), w.dtype(), b.defined() ? b.dtype() : w.dtype()};
  return y.Reshape(out_shape);
}

TensorList Fp8LinearOp::Backward(autograd::Ctx& ctx, const Tensor& dy) {
  auto state = std::static_pointer_cast<Fp8LinearState>(ctx.state);
  OCTET_CHECK(state && !state->orphaned(), kName, ": backward after the owning Linear was destroyed");
  const Tensor x_fp8 = ctx.Saved(0), w_fp8 = ctx.Saved(1);
  const int64_t M = x_fp8.size(0), N = w_fp8.size(0);
  const Tensor dy2 = dy.Reshape({M, N}).Contiguous();  // (M,N)
  // Amax histories of the gradient are recorded whenever backward runs (training).
  const Tensor dy_fp8 = state->Quantize(state->grad_output(), dy2, /*record=*/true);  // (M,N) E5M2
  Tensor dx, dw, db;
  if (ctx.NeedsInputGrad(0)) dx = AsDType(ScaledMatmul(dy_fp8, w_fp8, GemmOut(ctx.dtypes[0])), ctx.dtypes[0]).View(ctx.shapes[0]);  // (M,K)
  if (ctx.NeedsInputGrad(1)) dw = AsDType(ScaledMatmul(dy_fp8.T(), x_fp8, GemmOut(ctx.dtypes[1])), ctx.dtypes[1]);  // (N,K)
  if (ctx.NeedsInputGrad(2)) {
    const Tensor d32 = dy2.dtype() == DType::kFloat32 ? dy2 : dy2.To(DType::kFloat32);
    db = Sum(d32, {0});
    if (ctx.dtypes[2] != DType::kFloat32) db = db.To(ctx.dtypes[2]);
  }
  return {dx, dw, db};
}

Tensor Fp8Linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state,
                 bool record, DType out_dtype) {
  return Fp8LinearOp::Apply(x, w, b, state, record, out_dtype);
}

}  // namespace octet::nn::amp
