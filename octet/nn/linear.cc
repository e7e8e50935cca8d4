#include <octet/nn/linear.h>
#include <octet/nn/linear_testing.h>

#include <atomic>
#include <cmath>

#include <octet/autograd/grad_mode.h>
#include <octet/nn/layer_norm.h>
#include <octet/ops/matmul.h>
#include <octet/ops/norm.h>
#include <octet/ops/pointwise.h>

namespace octet::nn {
namespace {

// SetLayerNormFusionForTesting: false turns the fusion off.
std::atomic<bool> layer_norm_fusion_enabled{true};
// SetGeluFusionForTesting: false turns the GELU fusion off.
std::atomic<bool> gelu_fusion_enabled{true};

Tensor UniformInit(const Shape& shape, double bound, DType dtype, Generator* gen) {
  Tensor t = Empty(shape, {.dtype = dtype});
  UniformFill_(t, -bound, bound, gen);
  return t;
}

}  // namespace

Linear::Linear(const Options& o)
    : options_(o),
      weight_(RegisterParameter("weight", [&] {
        OCTET_CHECK(o.in > 0 && o.out > 0, "nn::Linear: in and out must be positive, got in=", o.in, " out=", o.out);
        return UniformInit({o.out, o.in}, 1.0 / std::sqrt(static_cast<double>(o.in)), o.dtype, o.gen);
      }())) {
  if (o.bias) bias_ = &RegisterParameter("bias", UniformInit({o.out}, 1.0 / std::sqrt(static_cast<double>(o.in)), o.dtype, o.gen));
}

Linear::~Linear() {
  if (fp8_) fp8_->Orphan();
}

std::vector<amp::Fp8LinearState*> Linear::Fp8States() {
  if (fp8_) return {fp8_.get()};
  return {};
}

void Linear::OnAmpChanged() {
  if (amp_level() != amp::Level::kO1) return;
  if (fp8_) {
    fp8_->SetRecipe(amp_recipe());
  } else {
    fp8_ = std::make_shared<amp::Fp8LinearState>(*this, "", "", amp_recipe());
  }
}

Tensor AmpLinear(const Tensor& x, const Tensor& w, const Tensor* b, amp::Level level, const amp::Recipe& recipe,
                 std::shared_ptr<amp::Fp8LinearState>* fp8, Module& owner, const std::string& prefix,
                 const std::string& label, bool record, bool gelu) {
  auto linear = gelu ? &octet::LinearGelu : &octet::Linear;
  switch (level) {
    case amp::Level::kO0:
      return linear(x, w, b ? *b : Tensor());
    case amp::Level::kO2:
      // NOTE [cast linear] (ops/matmul.h): no bf16 copy of an f32 master
      // weight where the GEMM reads it as it is.
      return CastLinear(x, w, b ? *b : Tensor(), amp::ComputeDType(level), gelu);
    case amp::Level::kO1: {
      if (!*fp8) *fp8 = std::make_shared<amp::Fp8LinearState>(owner, prefix, label, recipe);
      // NOTE [fused gelu at O1]: fused only where the GEMM epilogue runs it
      // (the FP8 Linear hands it a bfloat16 bias: NOTE [fp8 linear bias]).
      const bool fuse = gelu && b != nullptr && GemmEpilogueRunsGelu(x.device());
      const Tensor y = amp::Fp8Linear(x, w, b ? *b : Tensor(), *fp8, record, amp::ComputeDType(level), fuse);
      return gelu && !fuse ? octet::Gelu(y) : y;
    }
  }
  OCTET_FAIL("AmpLinear: unknown amp level");
}

Tensor Linear::Run(const Tensor& x, bool gelu) {
  const amp::Level level = amp_level();
  const bool record = is_training() && autograd::GradMode::IsEnabled();
  if (level == amp::Level::kO1 && fp8_ && amp::ActiveAutocast() != nullptr)
    fp8_->SetRecipe(amp_recipe());  // an Autocast scope may carry another recipe
  return AmpLinear(x, weight_, bias_, level, amp_recipe(), &fp8_, *this, "", "", record, gelu);
}

void SetLayerNormFusionForTesting(std::optional<bool> enabled) {
  layer_norm_fusion_enabled.store(enabled.value_or(true), std::memory_order_relaxed);
}

bool Linear::FusesLayerNorm(const LayerNorm& ln, const Tensor& x) {
  // NOTE [layer norm fused into the fp8 linear]: each condition, in order.
  if (!layer_norm_fusion_enabled.load(std::memory_order_relaxed)) return false;
  if (amp_level() != amp::Level::kO1 || ln.amp_level() != amp::Level::kO1 || !fp8_) return false;
  return InputScaleReady(x);
}

bool Linear::InputScaleReady(const Tensor& x) {
  if (amp::ActiveAutocast() != nullptr) fp8_->SetRecipe(amp_recipe());
  const amp::Fp8Slot& slot = fp8_->input();
  return !slot.NeedsAmaxFirst(fp8_->recipe()) && x.defined() && x.device() == slot.device();
}

Tensor Linear::RunLayerNorm(LayerNorm& ln, const Tensor& x, bool gelu) {
  if (!FusesLayerNorm(ln, x)) return Run(ln(x), gelu);
  const amp::Level level = amp_level();
  const bool record = is_training() && autograd::GradMode::IsEnabled();
  const Tensor xc = ToComputeDType(x, level);
  const Tensor lw = CastParam(ln.weight(), level), lb = CastParam(ln.bias(), level);
  amp::Fp8Slot& slot = fp8_->input();
  const Tensor q = octet::LayerNormFp8(xc, lw, lb, slot.dtype(), slot.scale_tensor(), ln.options().eps);
  amp::Fp8LinearInputStats stats;
  if (fp8_->telemetry()) {
    // The float32 values the kernel quantized, recomputed for the clip counts.
    stats.count_clipping = [xc, lw, lb, eps = ln.options().eps, dtype = slot.dtype()](float scale) {
      const DType f32 = DType::kFloat32;
      const Tensor w32 = lw.defined() ? lw.detach().To(f32) : Tensor(), b32 = lb.defined() ? lb.detach().To(f32) : Tensor();
      return amp::CountFp8ClippingOfRows(
          xc, [&](const Tensor& rows) { return octet::LayerNorm(rows.To(f32), w32, b32, eps); }, scale, dtype);
    };
  }
  ++layer_norm_fusions_;
  // NOTE [fused gelu at O1], as AmpLinear decides it.
  const bool fuse_gelu = gelu && bias_ != nullptr && GemmEpilogueRunsGelu(x.device());
  const Tensor y = amp::Fp8Linear(q, weight_, bias_ ? *bias_ : Tensor(), fp8_, record, amp::ComputeDType(level),
                                  fuse_gelu, stats);
  return gelu && !fuse_gelu ? octet::Gelu(y) : y;
}

Tensor Linear::ForwardLayerNorm(LayerNorm& ln, const Tensor& x) { return RunLayerNorm(ln, x, /*gelu=*/false); }
Tensor Linear::ForwardLayerNormGelu(LayerNorm& ln, const Tensor& x) { return RunLayerNorm(ln, x, /*gelu=*/true); }

void SetGeluFusionForTesting(std::optional<bool> enabled) {
  gelu_fusion_enabled.store(enabled.value_or(true), std::memory_order_relaxed);
}

bool Linear::FusesGelu(const Tensor& x) {
  // NOTE [gelu fused into the fp8 linear]: each condition, in order.
  if (!gelu_fusion_enabled.load(std::memory_order_relaxed)) return false;
  if (amp_level() != amp::Level::kO1 || !fp8_) return false;
  return InputScaleReady(x);
}

Tensor Linear::ForwardGeluInput(const Tensor& h) {
  if (!FusesGelu(h)) return Run(octet::Gelu(h), /*gelu=*/false);
  const amp::Level level = amp_level();
  const bool record = is_training() && autograd::GradMode::IsEnabled();
  amp::Fp8Slot& slot = fp8_->input();
  const Tensor q = octet::GeluFp8(h, slot.dtype(), slot.scale_tensor());
  amp::Fp8LinearInputStats stats;
  if (fp8_->telemetry()) {
    // The float32 values the kernel quantized, recomputed for the clip counts
    // a block of rows at a time (CountFp8ClippingOfRows): a float32 GELU of
    // the whole (B*T, 4C) activation cost 8.5 MB of peak RSS and 5.6 ms per
    // step (averaged, logging every 10th) in train_gpt's default O1 run.
    stats.count_clipping = [h, dtype = slot.dtype()](float scale) {
      return amp::CountFp8ClippingOfRows(
          h, [](const Tensor& rows) { return octet::Gelu(rows.To(DType::kFloat32)); }, scale, dtype);
    };
  }
  ++gelu_fusions_;
  return amp::Fp8Linear(q, weight_, bias_ ? *bias_ : Tensor(), fp8_, record, amp::ComputeDType(level),
                        /*gelu=*/false, stats);
}

Tensor Linear::Forward(const Tensor& x) { return Run(x, /*gelu=*/false); }
Tensor Linear::ForwardGelu(const Tensor& x) { return Run(x, /*gelu=*/true); }

}  // namespace octet::nn
