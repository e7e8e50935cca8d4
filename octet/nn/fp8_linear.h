// The FP8 Linear of amp level O1: y = x·wᵀ + b with every GEMM (fprop,
// dgrad, wgrad) in FP8 and FP32 accumulation.
//
// NOTE [fp8 linear]:
//   forward   x_fp8 = Quantize(x, E4M3, input scale)     (M,K)  saved for backward
//             w_fp8 = cached FP8 copy of w (E4M3)         (N,K)  saved (shared with the cache)
//             y     = ScaledMatmul(x_fp8, w_fp8ᵀ) + b     (M,N)  out dtype (BF16 in O1)
//                     (b in the GEMM's epilogue: NOTE [fp8 linear bias])
//   backward  dy_fp8 = Quantize(dy, E5M2, grad scale)     (M,N)
//             dx = ScaledMatmul(dy_fp8, w_fp8)            (M,K)  in x's dtype
//             dw = ScaledMatmul(dy_fp8ᵀ, x_fp8)           (N,K)  float32 (w's dtype)
//             db = sum over rows of dy                     (N)    in b's dtype
//                  (from dy's cast-transpose where the column-wise copy is made)
// The input saved for backward is the 1-byte FP8 copy, not the 2- or 4-byte
// x: that is where O1 saves activation memory. The roles (fprop, dgrad,
// wgrad) go to ScaledMatmul: on CUDA fprop runs with FAST_ACCUM.
// Finite values past the FP8 range saturate (kSatFinite); a NaN or inf in
// x, w or dy makes every GEMM that reads it give NaN throughout, so the
// overflow reaches y, dx, dw and the loss scaler's found_inf (NOTE
// [non-finite fp8 linear operands] in nn/fp8_linear.cc).
//
// NOTE [fp8 linear layouts]: X and W are each read twice, once as they are
// and once transposed (X in fprop and, as Xᵀ, in wgrad; W in fprop and
// dgrad), dY likewise (dgrad, and dYᵀ in wgrad). The Linear asks for FP8
// tensors with column-wise data (QuantizeForGemm in ops/matmul.h) and leaves
// the layout to the GEMM layer: where FP8 GEMMs are TN-only (sm_89, sm_90,
// sm_12x) the cast writes the transposed copy in the same pass and
// ScaledMatmul reads whichever copy its backend wants; on the CPU nothing is
// copied and the gradient GEMMs read strided views. The saved activation is
// ForTransposedUse(X): X as a logical (M,K) matrix, stored as the Xᵀ bytes
// where that is what wgrad reads, so backward keeps one FP8 copy of X; the
// weight cache keeps W with its column-wise copy.
//
// NOTE [fp8 linear bias]: the GEMM adds the bias in its epilogue (on CUDA
// cuBLASLt's BIAS / GELU_AUX_BIAS epilogue, which for FP8 operands and a
// bfloat16 output takes a bfloat16 bias). The FP32 master bias is therefore
// rounded to bfloat16 once per bias version (the optimizer bumps it once per
// step) and cached, like the FP8 weight, on every device: the CPU adds the same
// bfloat16 bias, so both backends compute one thing, and no float32 scratch
// or conversion runs around the GEMM. The bias gradient is unaffected (the sum
// of dY over rows, in float32).
//
// NOTE [weight scaling]: the weight's FP8 copy is made once per weight
// version (Storage version counter, which Optimizer::Step bumps; see
// optim/optimizer.h) and reused by every forward and backward until the
// weight changes, so micro-batches share one quantization. The weight slot
// always uses its own current amax for the scale: the weight is quantized
// only once per step, so the extra amax pass is negligible, and a scale that
// depends on W alone makes the FP8 weight a pure function of the master
// weight — resuming from a checkpoint cannot change it. Inputs and output
// gradients follow the recipe (delayed by default; NOTE [delayed scaling
// order] in nn/fp8_scaling.h).
#pragma once

#include <functional>

#include <cstdint>
#include <memory>
#include <string>

#include <octet/autograd/function.h>
#include <octet/core/tensor.h>
#include <octet/nn/fp8_scaling.h>
#include <octet/nn/module.h>

namespace octet::nn::amp {

// The FP8 state of one Linear-like GEMM: three scaling slots (input, weight,
// grad_output) and the cached FP8 weight.
class Fp8LinearState {
 public:
  // Registers the slots' tensors on `owner` as non-persistent buffers named
  // <prefix>fp8_<slot>_amax_history ([H] float32) and <prefix>fp8_<slot>_scale
  // ([1] float32) for slot in {input, weight, grad_output}; reuses them when
  // they already exist. `label` names the GEMM in telemetry ("" for a Linear:
  // the module's own name is used).
  Fp8LinearState(Module& owner, const std::string& prefix, const std::string& label, const Recipe& recipe);

  // A new recipe: the slots keep their histories unless the history length or
  // a dtype changed (then they restart from zero).
  void SetRecipe(const Recipe& recipe);
  const Recipe& recipe() const { return recipe_; }
  const std::string& label() const { return label_; }

  Fp8Slot& input() { return *input_; }
  Fp8Slot& weight() { return *weight_; }
  Fp8Slot& grad_output() { return *grad_output_; }
  std::vector<Fp8Slot*> slots() { return {input_.get(), weight_.get(), grad_output_.get()}; }
  // How the model's Fp8State reduces the history of slots()[i]: the weight
  // (NOTE [weight scaling]) and every slot under current scaling keep the
  // scale of their newest amax (kMostRecent); the others follow the recipe.
  AmaxAlgo update_algo(int i) const {
    return i == 1 || recipe_.scaling == Scaling::kCurrent ? AmaxAlgo::kMostRecent : recipe_.amax_algo;
  }

  // When on, each quantization also counts saturated and underflowed elements
  // (one extra pass over the tensor).
  bool telemetry() const { return telemetry_; }
  void set_telemetry(bool on) { telemetry_ = on; }

  // The FP8 (recipe.forward_dtype) copy of w, quantized when w's storage or
  // version differs from the cached one, with column-wise data where the GEMM
  // wants it (NOTE [fp8 linear layouts]). w: (N,K) float.
  Tensor QuantizedWeight(const Tensor& w);
  int64_t weight_quantizations() const { return weight_quantizations_; }
  // NOTE [fp8 weight copy lifetime]: whether the FP8 weight copy stays cached
  // after a backward that computed the weight's gradient (default false:
  // released there). KeepFp8WeightCopies (nn/amp.h) sets it model-wide.
  bool keep_weight_after_backward() const { return keep_weight_after_backward_; }
  void set_keep_weight_after_backward(bool keep) { keep_weight_after_backward_ = keep; }
  // Called by the FP8 Linear's backward with the copy it used: releases the
  // cached copy if it is that one and keep_weight_after_backward() is false.
  void ReleaseWeightAfterBackward(const Tensor& used);

  // The bias as the FP8 GEMM's epilogue adds it (NOTE [fp8 linear bias]):
  // for a bfloat16 output a float32 b is rounded to bfloat16 once per bias
  // version and cached, like the weight; otherwise b itself. b: (N) or undefined.
  Tensor BiasForGemm(const Tensor& b, DType out_dtype);
  int64_t bias_casts() const { return bias_casts_; }

  // Quantizes x (any shape, float, on the slot's device) for `slot` as the
  // recipe says (NOTE [delayed scaling order]) without a host sync (NOTE
  // [slot state on the device]); records the amax when `record`; fills the
  // slot's observation (clip counts only when telemetry is on). `columnwise`
  // (x 2-D): a GEMM will also read it transposed (QuantizeForGemm).
  // `dbias` (not null): x's float32 column sums from the same pass where the
  // column-wise copy is made, else reset to undefined (QuantizeForGemm).
  Tensor Quantize(Fp8Slot& slot, const Tensor& x, bool record, bool columnwise = false, Tensor* dbias = nullptr);

  // For an x that is already FP8 (NOTE [pre-quantized fp8 linear input]):
  // q itself (with its column-wise copy, a byte transpose, when `columnwise`
  // and the GEMM wants one: WithColumnwiseForGemm in ops/matmul.h); records
  // q's amax when `record` and fills the slot's observation as Quantize does.
  // Clip counts (telemetry on) need the unquantized values q was made from:
  // count_clipping(scale) counts them (e.g. CountFp8ClippingOfRows); none are
  // counted when it is empty.
  // Errors: q without per-tensor scale metadata, of another FP8 dtype than
  // the slot's, or on another device.
  Tensor UsePrequantized(Fp8Slot& slot, const Tensor& q, bool record, bool columnwise,
                         const std::function<ClipCounts(float scale)>& count_clipping = {});

  // Called by the owner's destructor: a graph that outlives its Linear then
  // fails with a clear error in backward instead of touching freed buffers.
  void Orphan() { orphaned_ = true; }
  bool orphaned() const { return orphaned_; }

 private:
  void MakeSlots(Module& owner);
  Tensor QuantizeWith(Fp8Slot& slot, const Recipe& recipe, const Tensor& x, bool record, bool columnwise,
                      Tensor* dbias = nullptr);
  Module* owner_;
  std::string prefix_;
  std::string label_;
  Recipe recipe_;
  std::unique_ptr<Fp8Slot> input_, weight_, grad_output_;
  bool telemetry_ = false;
  bool orphaned_ = false;
  bool keep_weight_after_backward_ = false;
  // Weight cache (NOTE [weight scaling]).
  std::shared_ptr<Storage> cached_storage_;
  uint64_t cached_version_ = 0;
  int64_t cached_offset_ = -1;
  Shape cached_shape_;
  DType cached_dtype_ = DType::kFloat32;
  Tensor cached_fp8_;  // with its column-wise copy where the GEMM wants one
  int64_t weight_quantizations_ = 0;
  // Bias cache (NOTE [fp8 linear bias]).
  std::shared_ptr<Storage> bias_storage_;
  uint64_t bias_version_ = 0;
  int64_t bias_offset_ = -1;
  Tensor bias_bf16_;
  int64_t bias_casts_ = 0;
};

// NOTE [pre-quantized fp8 linear input]: x may arrive already in FP8 with
// per-tensor ScaleMeta — LayerNormFp8 (ops/norm.h) quantized it with the
// input slot's scale, fused into the LayerNorm before this Linear (NOTE
// [layer norm fused into the fp8 linear] in nn/linear.h). Then no input
// quantize runs: the bytes are used as they are, the column-wise copy (where
// the GEMM wants it) is a byte transpose of them, and the slot records and
// observes the amax that came with them (Fp8LinearState::UsePrequantized).
// x must have the input slot's FP8 dtype. Its gradient dX is returned in
// out_dtype (the compute dtype; never FP8: NOTE [straight-through FP8 casts]
// in ops/cast.h) and flows to whatever produced x.

// Telemetry for a pre-quantized x: its saturation / underflow counts for the
// scale x was made with, from the unquantized values (empty: none counted).
struct Fp8LinearInputStats {
  std::function<ClipCounts(float scale)> count_clipping;
};

// y = x·wᵀ + b in FP8 (NOTE [fp8 linear]).
//   x: (..., K) float32 or bfloat16, or FP8 with scale metadata (NOTE
//   [pre-quantized fp8 linear input]); w: (N, K) float32/bfloat16 master weight;
//   b: (N) or undefined. Returns (..., N) in out_dtype.
// record: update the input / output-gradient amax histories (training).
// Errors: shape mismatches, integer inputs, an FP8 weight, an FP8 x without
// scale metadata or of another FP8 dtype than the input slot's (octet::Error
// naming fp8_linear and the shapes).
// gelu: return Gelu(y) instead, the GELU in the fprop GEMM (NOTE [gelu
// epilogue] in ops/matmul_kernels.h); the pre-activation (out_dtype) is
// saved for backward, which multiplies dy by gelu'(pre) before quantizing.
Tensor Fp8Linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state,
                 bool record, DType out_dtype = DType::kBFloat16, bool gelu = false,
                 const Fp8LinearInputStats& stats = {});

// The autograd op behind Fp8Linear (public so tests can inspect what a node
// saved: ctx.Saved(0) is the FP8 input X (M,K), possibly stored column-wise,
// ctx.Saved(1) the FP8 weight W (N,K); NOTE [fp8 linear layouts]).
struct Fp8LinearOp : autograd::Op<Fp8LinearOp> {
  static constexpr const char* kName = "fp8_linear";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                        const std::shared_ptr<Fp8LinearState>& state, bool record, DType out_dtype, bool gelu,
                        const Fp8LinearInputStats& stats = {});
  // Takes dY by value and drops it once quantized (NOTE [backward owns its
  // gradient] in autograd/function.h).
  static TensorList Backward(autograd::Ctx& ctx, Tensor dy);
};

}  // namespace octet::nn::amp
