// Linear: y = x·wᵀ + b, with w (out, in) as in nn.Linear / llm.c.
//
// amp (the level is amp_level(): SetAmp, an Autocast scope, or the opt-out):
//   O0  ops/matmul.h Linear in the parameters' dtype; x must have that dtype.
//   O2  ops/matmul.h CastLinear: the Linear of x, w and b cast to bfloat16,
//       the float32 masters receiving float32 gradients; output bfloat16. On
//       the CPU no bf16 copy of w is made and its gradient is the GEMM's f32
//       accumulator (NOTE [cast linear]).
//   O1  the FP8 Linear of nn/fp8_linear.h (NOTE [fp8 linear]): FP8 fprop,
//       dgrad and wgrad, the FP8 copy of x saved for backward, the FP8 weight
//       cached per optimizer step; output bfloat16. The FP8 scaling state is
//       made by SetAmp(kO1) (or lazily at the first O1 forward under an
//       Autocast scope) and holds six non-persistent buffers
//       fp8_{input,weight,grad_output}_{amax_history,scale}. Amax histories are
//       updated only in training mode with grad mode on. A NaN/inf in x, w
//       or the output gradient gives an all-NaN y / dx / dw (finite values
//       past the FP8 range saturate).
//
// NOTE [layer norm fused into the fp8 linear]: a pre-LN block feeds a
// LayerNorm's output straight into a Linear (GPT's ln_1 -> attn.qkv,
// ln_2 -> mlp.fc). ForwardLayerNorm then fuses the two at O1 the way
// Transformer Engine's LayerNormLinear does: LayerNormFp8 (ops/norm.h)
// writes the FP8 input of the Linear with the input slot's scale and its
// amax in one pass, and the FP8 Linear takes it as it is (NOTE
// [pre-quantized fp8 linear input] in nn/fp8_linear.h), instead of the
// LayerNorm writing bfloat16 and the Linear reading it back to quantize it
// (one pass and one bfloat16 (M, K) activation less per fused pair). The
// values differ from the unfused path only by rounding once (float32 -> FP8)
// instead of twice (float32 -> bfloat16 -> FP8). It fuses when all hold:
//   - this Linear and the LayerNorm are both at O1 (O0 and O2 have no FP8
//     input; an opt-out on either side keeps the two modules' own levels);
//   - the recipe scales by delayed scaling and the input slot has already
//     been initialised by an update (NOTE [initialised on the host] in
//     nn/fp8_scaling.h): the scale is known before the LayerNorm runs.
//     Current scaling, and the first step of delayed scaling, derive the
//     scale from this tensor's own amax, which exists only after the
//     normalised values do, so they run unfused (LayerNorm, then Quantize
//     with that amax);
//   - x is on the slot's device (otherwise the unfused path reports it).
// Training and eval, with or without recording, fuse alike (the model is
// one function in both). A LayerNorm without weight or bias fuses too (the
// kernel takes them undefined, as LayerNorm does); so does a Linear without
// bias. With telemetry on (log steps), the float32 LayerNorm is computed once
// more, without grad, only to count saturation and underflow: it is exactly
// the values the fused kernel quantized.
//
// NOTE [gelu fused into the fp8 linear]: the MLP's GELU feeds the proj
// Linear. ForwardGeluInput fuses the two at O1 as the LayerNorm above is
// fused: GeluFp8 (ops/pointwise.h, NOTE [gelu to fp8]) writes proj's FP8
// input with its input slot's scale and amax in one pass, and the FP8 Linear
// takes it as it is, instead of the GELU writing bfloat16 and proj reading
// it back to quantize it. Values differ from the unfused path only by the
// single rounding (float32 -> FP8 instead of float32 -> bfloat16 -> FP8);
// the delayed-scaling history records the amax the kernel wrote, of the
// float32 GELU. It fuses when all hold (FusesGelu): this Linear is at O1,
// the recipe scales by delayed scaling and the input slot has been
// initialised by an update, and the GELU's input is on the slot's device
// (the conditions of FusesLayerNorm, for the same reasons). Then the MLP
// runs fc without its GELU (on CUDA this replaces the GELU of fc's GEMM
// epilogue, NOTE [fused gelu at O1]: the epilogue still writes a bfloat16
// activation that proj must read and quantize, which is the pass this
// fusion removes). Otherwise the MLP runs as before. With telemetry on, the
// float32 GELU is computed once more, without grad, for the clip counts.
#pragma once

#include <cstdint>
#include <memory>

#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/fp8_linear.h>
#include <octet/nn/layer_norm.h>
#include <octet/nn/module.h>

namespace octet::nn {

class Linear : public Module {
 public:
  struct Options {
    int64_t in = 0;
    int64_t out = 0;
    bool bias = true;
    DType dtype = DType::kFloat32;
    // weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default); GPT
    // re-initialises its Linears the GPT-2 way.
    Generator* gen = nullptr;
  };
  explicit Linear(const Options& options);
  ~Linear() override;

  // x: (..., in) -> (..., out).
  Tensor Forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return Forward(x); }
  // Gelu(Forward(x)): the same values, as one op where that saves a pass
  // (O0/O2: ops/matmul.h LinearGelu). NOTE [fused gelu at O1]: the FP8
  // Linear fuses the GELU only when the GEMM's epilogue runs it
  // (GemmEpilogueRunsGelu: CUDA, where the FP32 master bias reaches cuBLASLt
  // as bfloat16, NOTE [fp8 linear bias]); otherwise fusing saves nothing, and it would keep the
  // output gradient and the pre-activation alive through the whole FP8
  // backward (measured: +6 MB peak live, +21 MB peak RSS on the CPU for the
  // default GPT), so the GELU is a separate op.
  Tensor ForwardGelu(const Tensor& x);
  // Forward(ln(x)) and ForwardGelu(ln(x)), with the LayerNorm fused into
  // this Linear's FP8 input where FusesLayerNorm says so (NOTE [layer norm
  // fused into the fp8 linear]); otherwise exactly ln(x) followed by
  // Forward / ForwardGelu. x: (..., in), the LayerNorm's input.
  Tensor ForwardLayerNorm(LayerNorm& ln, const Tensor& x);
  Tensor ForwardLayerNormGelu(LayerNorm& ln, const Tensor& x);
  // Whether ForwardLayerNorm(ln, x) fuses now (NOTE [layer norm fused into
  // the fp8 linear]).
  bool FusesLayerNorm(const LayerNorm& ln, const Tensor& x);
  // How many forwards took the fused path (telemetry and tests).
  int64_t layer_norm_fusions() const { return layer_norm_fusions_; }
  // Forward(Gelu(h)), with the GELU fused into this Linear's FP8 input where
  // FusesGelu says so (NOTE [gelu fused into the fp8 linear]); otherwise
  // exactly Gelu(h) followed by Forward. h: (..., in), the pre-activation.
  Tensor ForwardGeluInput(const Tensor& h);
  // Whether ForwardGeluInput fuses now for an input on x's device.
  bool FusesGelu(const Tensor& x);
  int64_t gelu_fusions() const { return gelu_fusions_; }

  Tensor& weight() { return weight_; }
  Tensor* bias() { return bias_; }
  const Options& options() const { return options_; }
  // The FP8 state (null until O1 was set or used).
  amp::Fp8LinearState* fp8_state() { return fp8_.get(); }
  std::vector<amp::Fp8LinearState*> Fp8States() override;

 protected:
  void OnAmpChanged() override;

 private:
  Tensor Run(const Tensor& x, bool gelu);
  // The rest of FusesLayerNorm / FusesGelu once the levels agree: the input
  // slot has a delayed scale to quantize with (not NeedsAmaxFirst) and x is
  // on its device. Adopts an active autocast scope's recipe first.
  bool InputScaleReady(const Tensor& x);
  Tensor RunLayerNorm(LayerNorm& ln, const Tensor& x, bool gelu);
  Options options_;
  int64_t layer_norm_fusions_ = 0;
  int64_t gelu_fusions_ = 0;
  Tensor& weight_;
  Tensor* bias_ = nullptr;
  std::shared_ptr<amp::Fp8LinearState> fp8_;
};

// The Linear computation at a given level (shared by nn::Linear and GPT's tied
// lm_head). b may be null. At O1 `fp8` must hold the state (it is created on
// `owner` with `prefix`/`label` when null). record: update amax histories.
// gelu: return Gelu of the result, computed as one op (ForwardGelu).
Tensor AmpLinear(const Tensor& x, const Tensor& w, const Tensor* b, amp::Level level, const amp::Recipe& recipe,
                 std::shared_ptr<amp::Fp8LinearState>* fp8, Module& owner, const std::string& prefix,
                 const std::string& label, bool record, bool gelu = false);

}  // namespace octet::nn
