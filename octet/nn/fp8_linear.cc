#include <octet/nn/fp8_linear.h>

#include <octet/autograd/grad_mode.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>


namespace octet::nn::amp {
namespace {

constexpr const char* kSlotNames[3] = {"input", "weight", "grad_output"};

// ScaledMatmul writes float32 or bfloat16; other dtypes get an f32 result converted once.
DType GemmOut(DType want) { return want == DType::kBFloat16 ? want : DType::kFloat32; }
Tensor AsDType(const Tensor& t, DType d) { return t.dtype() == d ? t : t.To(d); }

// NOTE [non-finite fp8 linear operands]: the FP8 Linear quantizes with
// Fp8Saturation::kSatFinite (cuda_fp8.h's __NV_SATFINITE, Transformer
// Engine's choice): under delayed scaling the scale trails the amax by a
// step, and a finite value past the FP8 range is clamped to the largest
// finite code -- what saturation is for. But kSatFinite clamps +-inf too, so
// an overflowing input or gradient became finite FP8-max values: the
// Linear's output, dX and dW came out finite, and the loss scaler's
// found_inf (and the user) never saw the overflow that O0 and O2 report.
// The quantization takes the operand's amax in the same pass (inf or NaN
// when any element is), so each FP8 operand's scale_inv gets += 0 * amax:
// unchanged for a finite amax, NaN otherwise. Every GEMM that reads the
// operand (fprop, wgrad, dgrad; the column-wise copy shares the scale_inv
// tensor) then gives NaN throughout: the overflow shows, as NaN in the whole
// result rather than O0's inf in the affected rows. Finite values keep
// saturating. Cost: two tiny device ops on [1] tensors per quantization
// (a multiply and an in-place add), no host read, so nothing changes for
// CUDA graphs; the quantize kernels are untouched and Quantize keeps
// kSatFinite's documented clamping for other callers. Covered: every FP8
// operand of an O1 Linear -- X and dY (QuantizeWith), W (QuantizedWeight,
// through QuantizeWith) and an X pre-quantized by LayerNormFp8 or GeluFp8
// (UsePrequantized). Each of those has a scale_inv tensor of its own (made
// by the quantizing op), so the in-place add reaches only that operand and
// its column-wise copy. Not covered (not a Linear operand): the O1
// attention's FP8 copy of qkv (Recipe::fp8_attention_inputs,
// nn/attention.cc), which still clamps an inf of qkv.
void PropagateNonFiniteAmax(const Tensor& q) {
  const ScaleMeta& meta = *q.scale_meta();
  Tensor scale_inv = meta.scale_inv;
  AddInPlace(scale_inv, meta.amax, /*alpha=*/0.0);
}

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
  // The state lives where the module's parameters do (NOTE [slot state on the device]).
  const TensorList params = owner.Parameters(/*recurse=*/true);
  const Device device = params.empty() ? kCPU : params.front().device();
  for (int i = 0; i < 3; ++i) {
    const std::string base = prefix_ + "fp8_" + kSlotNames[i];
    Tensor* history = owner.FindBuffer(base + "_amax_history");
    if (history == nullptr) history = &owner.RegisterBuffer(base + "_amax_history", Zeros({1}), /*persistent=*/false);
    Tensor* scale = owner.FindBuffer(base + "_scale");
    if (scale == nullptr) scale = &owner.RegisterBuffer(base + "_scale", Ones({1}), /*persistent=*/false);
    *slots[i] = std::make_unique<Fp8Slot>(kSlotNames[i], dtypes[i], history, scale, recipe_.amax_history_len,
                                           device);
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
  if (!hit) {
    // NOTE [weight scaling]: current scaling from the weight's own amax. The
    // weight is read as W (fprop) and as Wᵀ (dgrad): column-wise data too.
    Recipe current = recipe_;
    current.scaling = Scaling::kCurrent;
    // NOTE [amax notes]: the optimizer step may take the next amax on the way.
    w.storage()->WantAmaxNotes();
    // The stale copy goes first, so that the new one can take its memory
    // (NOTE [arena segments] in core/caching_allocator.h).
    cached_fp8_ = Tensor();
    cached_fp8_ = QuantizeWith(*weight_, current, w.detach(), /*record=*/true, /*columnwise=*/true);
    cached_storage_ = w.storage();
    cached_version_ = w.storage()->version();
    cached_offset_ = w.offset();
    cached_shape_ = w.shape();
    cached_dtype_ = w.dtype();
    ++weight_quantizations_;
  }
  return cached_fp8_;
}

// NOTE [fp8 weight copy lifetime]: the FP8 copy of a weight is made at the
// first forward after the weight changed and is read again only by its
// Linear's dgrad. Once a backward has computed the weight's gradient, the
// weight is about to be updated and the copy to go stale, so that backward
// releases it rather than holding it through the rest of the backward and
// the optimizer step: on the wide GPT at O1 the copies of the layers behind
// the current one (6.75 MiB a layer) were live at the step's peak.
// octet_train_step_bench peak RSS (one config per process, Zen 5): wide O1
// 287.0 -> 275.3 MiB, with the FP8/FP16 AdamW state 217.8 -> 206.3; the step
// time unchanged (each step quantizes the new weights anyway). What it costs:
// a forward that follows a backward without a weight update quantizes again
// -- the micro-batches of gradient accumulation. Training loops with
// several micro-batches keep the copies through the backwards before the
// last one (KeepFp8WeightCopies in nn/amp.h, as examples/gpt's TrainStep
// does). A weight that gets no gradient (frozen) keeps its copy: it is not
// about to change.
void Fp8LinearState::ReleaseWeightAfterBackward(const Tensor& used) {
  if (keep_weight_after_backward_ || !cached_fp8_.defined() || !used.defined()) return;
  if (cached_fp8_.storage() != used.storage()) return;  // a later forward's copy: still current
  cached_fp8_ = Tensor();
  cached_storage_.reset();
}

Tensor Fp8LinearState::BiasForGemm(const Tensor& b, DType out_dtype) {
  if (!b.defined() || out_dtype != DType::kBFloat16 || b.dtype() != DType::kFloat32) return b;
  const bool hit = bias_bf16_.defined() && bias_storage_ == b.storage() && bias_version_ == b.storage()->version() &&
                   bias_offset_ == b.offset() && bias_bf16_.shape() == b.shape();
  if (!hit) {
    bias_bf16_ = b.detach().To(DType::kBFloat16);
    bias_storage_ = b.storage();
    bias_version_ = b.storage()->version();
    bias_offset_ = b.offset();
    ++bias_casts_;
  }
  return bias_bf16_;
}

Tensor Fp8LinearState::Quantize(Fp8Slot& slot, const Tensor& x, bool record, bool columnwise, Tensor* dbias) {
  return QuantizeWith(slot, recipe_, x, record, columnwise, dbias);
}

Tensor Fp8LinearState::QuantizeWith(Fp8Slot& slot, const Recipe& recipe, const Tensor& x, bool record,
                                    bool columnwise, Tensor* dbias) {
  OCTET_CHECK(!orphaned_, "fp8_linear: the Linear owning this FP8 state was destroyed");
  OCTET_CHECK(x.device() == slot.device(), "fp8_linear: ", Describe(x), " is on ", x.device(), " but the ",
              slot.name(), " scaling state is on ", slot.device(),
              "; move the module with To(device) (it moves its FP8 state too)");
  // NOTE [slot state on the device]: the amax and the scale stay tensors.
  const Tensor scale = slot.NeedsAmaxFirst(recipe) ? slot.CurrentScale(recipe, octet::Amax(x)) : slot.scale_tensor();
  // NOTE [fp8 linear layouts]: the GEMM layer decides whether a column-wise copy is made.
  const Tensor q = QuantizeForGemm(x, slot.dtype(), scale, columnwise, Fp8Saturation::kSatFinite, dbias);
  PropagateNonFiniteAmax(q);  // NOTE [non-finite fp8 linear operands]
  // The quantized tensor owns a copy of the scale: later slot updates leave it alone.
  const ScaleMeta& meta = *q.scale_meta();
  if (record) slot.Record(meta.amax);  // the update comes once per step (nn/fp8_state.h)
  ClipCounts clip;
  // Telemetry is on only for log steps (a device read of the scale).
  if (telemetry_) clip = CountFp8Clipping(x, static_cast<float>(meta.scale.Item()), slot.dtype());
  slot.Observe(meta.amax, meta.scale, x.numel(), telemetry_ ? &clip : nullptr);
  return q;
}

Tensor Fp8LinearState::UsePrequantized(Fp8Slot& slot, const Tensor& q, bool record, bool columnwise,
                                       const std::function<ClipCounts(float scale)>& count_clipping) {
  OCTET_CHECK(!orphaned_, "fp8_linear: the Linear owning this FP8 state was destroyed");
  const ScaleMeta* m = q.scale_meta();
  OCTET_CHECK(m != nullptr && m->granularity == ScaleGranularity::kPerTensor && m->amax.defined() &&
                  m->scale.defined(),
              "fp8_linear: a pre-quantized ", slot.name(), " ", Describe(q),
              " needs per-tensor scale metadata with its amax (LayerNormFp8 or Quantize make it)");
  OCTET_CHECK(q.dtype() == slot.dtype(), "fp8_linear: the pre-quantized ", slot.name(), " is ", Describe(q),
              " but the slot quantizes to ", Name(slot.dtype()));
  OCTET_CHECK(q.device() == slot.device(), "fp8_linear: ", Describe(q), " is on ", q.device(), " but the ",
              slot.name(), " scaling state is on ", slot.device());
  // NOTE [fp8 linear layouts]: the column-wise copy is a byte transpose here.
  const Tensor out = columnwise ? WithColumnwiseForGemm(q) : q;
  PropagateNonFiniteAmax(out);  // NOTE [non-finite fp8 linear operands]
  const ScaleMeta& meta = *out.scale_meta();
  if (record) slot.Record(meta.amax);
  ClipCounts clip;
  const bool counts = telemetry_ && static_cast<bool>(count_clipping);
  if (counts) clip = count_clipping(static_cast<float>(meta.scale.Item()));
  slot.Observe(meta.amax, meta.scale, q.numel(), counts ? &clip : nullptr);
  return out;
}

// ---- the op ------------------------------------------------------------------------------

Tensor Fp8LinearOp::Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                            const std::shared_ptr<Fp8LinearState>& state, bool record, DType out_dtype,
                            bool gelu, const Fp8LinearInputStats& stats) {
  // NOTE [pre-quantized fp8 linear input]: x may already be FP8 (LayerNormFp8).
  const bool prequantized = IsFp8(x.dtype());
  if (!prequantized) CheckUnscaledFloat(kName, x, "x");
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
  const Tensor x2 = x.Reshape({M, K}).Contiguous();  // (M,K)
  // NOTE [fp8 linear layouts]: X is read again transposed by wgrad, W by dgrad.
  const Tensor x_fp8 =
      prequantized ? state->UsePrequantized(state->input(), x2, record, /*columnwise=*/true, stats.count_clipping)
                   : state->Quantize(state->input(), x2, record, /*columnwise=*/true);  // (M,K) E4M3
  const Tensor w_fp8 = state->QuantizedWeight(w);                                         // (N,K) E4M3
  // NOTE [fp8 linear bias]: the epilogue adds a bfloat16 bias for a bfloat16
  // output (cast once per step); otherwise f32 (or bf16) as given.
  const Tensor b_gemm = state->BiasForGemm(b, out_dtype);
  const Tensor bias = !b_gemm.defined() || b_gemm.dtype() == DType::kFloat32 || b_gemm.dtype() == DType::kBFloat16
                          ? b_gemm
                          : b_gemm.To(DType::kFloat32);
  Tensor pre;  // (M,N) the pre-activation with gelu
  const Tensor y = ScaledMatmul(x_fp8, w_fp8.T(), out_dtype, bias, GemmRole::kFprop, gelu ? &pre : nullptr);  // (M,N)
  // Saved: X (M,K) as wgrad reads it (only its column-wise bytes where the
  // GEMM wants those) and W (N,K) with its cached column-wise copy.
  ctx.Save(ForTransposedUse(x_fp8));
  ctx.Save(w_fp8);
  if (gelu) ctx.Save(pre);
  ctx.state = state;
  ctx.shapes = {x.shape()};
  // dX of an FP8 x is carried in the Linear's compute dtype (NOTE
  // [straight-through FP8 casts] in ops/cast.h): the output's dtype.
  ctx.dtypes = {prequantized ? out_dtype : x.dtype(), w.dtype(), b.defined() ? b.dtype() : w.dtype()};
  ctx.ints = {M, N};
  return y.Reshape(out_shape);
}

TensorList Fp8LinearOp::Backward(autograd::Ctx& ctx, Tensor dy) {
  auto state = std::static_pointer_cast<Fp8LinearState>(ctx.state);
  OCTET_CHECK(state && !state->orphaned(), kName, ": backward after the owning Linear was destroyed");
  const int64_t M = ctx.ints[0], N = ctx.ints[1];
  const Tensor x_saved = ctx.Saved(0), w_saved = ctx.Saved(1);  // X (M,K), W (N,K)
  Tensor dy2 = dy.Reshape({M, N}).Contiguous();  // (M,N)
  if (ctx.num_saved() == 3) dy2 = BinaryRaw(BinaryOp::kGeluBackward, dy2, ctx.Saved(2));  // d pre-activation
  // Amax histories of the gradient are recorded whenever backward runs
  // (training); dYᵀ is read by wgrad. Where that column-wise copy is made,
  // the same pass sums dY's columns into the bias gradient (f32).
  Tensor db32;  // (N) f32, or undefined when the cast did not produce it
  const Tensor dy_fp8 = state->Quantize(state->grad_output(), dy2, /*record=*/true,
                                        /*columnwise=*/ctx.NeedsInputGrad(1),
                                        ctx.NeedsInputGrad(2) ? &db32 : nullptr);  // (M,N) E5M2
  // Past here only the bias gradient may read dY in floating point: where
  // the cast summed it already, dY's bytes go back to the cache before the
  // GEMMs below allocate (NOTE [backward owns its gradient]).
  if (!ctx.NeedsInputGrad(2) || db32.defined()) {
    dy = Tensor();
    dy2 = Tensor();
  }
  Tensor dx, dw, db;
  // NOTE [wgrad before dgrad]: every Linear's backward (this one,
  // LinearBackward and CastLinearOp in ops/matmul.cc) computes dW first. The
  // gradient dW lives on to the optimizer step anyway, while dX would sit
  // unused through wgrad's GEMM and its packed operand. Peak RSS of octet_train_step_bench at O1 (one config per
  // process, Zen 5): wide 291.8 -> 286.0 MiB, with the FP8/FP16 AdamW state
  // 221.5 -> 216.6, small 92.8 -> 91.2 and 77.8 -> 75.5. Both GEMMs read dY
  // as A, so the second still reuses the first's conversion (NOTE
  // [converted A reuse] in ops/cpu/matmul_operands.h).
  if (ctx.NeedsInputGrad(1)) {
    // dW = dYᵀ·X (N,K)
    dw = AsDType(ScaledMatmul(dy_fp8.T(), x_saved, GemmOut(ctx.dtypes[1]), Tensor(), GemmRole::kWgrad),
                 ctx.dtypes[1]);
  }
  if (ctx.NeedsInputGrad(0)) {
    // dX = dY·W (M,K)
    dx = AsDType(ScaledMatmul(dy_fp8, w_saved, GemmOut(ctx.dtypes[0]), Tensor(), GemmRole::kDgrad), ctx.dtypes[0])
             .View(ctx.shapes[0]);
  }
  // NOTE [fp8 weight copy lifetime]: the weight's gradient is made, the copy
  // is about to go stale.
  if (ctx.NeedsInputGrad(1)) state->ReleaseWeightAfterBackward(w_saved);
  if (ctx.NeedsInputGrad(2)) {
    // The fused sum adds rows in the order Sum does on the CPU (same bits); on
    // CUDA it is a fixed tile order (ops/cast.h, CastTransposeWithBiasGrad).
    if (db32.defined()) {
      db = db32;
    } else {
      const Tensor d32 = dy2.dtype() == DType::kFloat32 ? dy2 : dy2.To(DType::kFloat32);
      db = Sum(d32, {0});
    }
    if (ctx.dtypes[2] != DType::kFloat32) db = db.To(ctx.dtypes[2]);
  }
  return {dx, dw, db};
}

Tensor Fp8Linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state,
                 bool record, DType out_dtype, bool gelu, const Fp8LinearInputStats& stats) {
  return Fp8LinearOp::Apply(x, w, b, state, record, out_dtype, gelu, stats);
}

}  // namespace octet::nn::amp
