#include <octet/ops/norm.h>

#include <cmath>

#include <octet/autograd/function.h>
#include <octet/core/scaling.h>
#include <octet/ops/norm_kernels.h>
#include <octet/ops/op_checks.h>

namespace octet {

OCTET_DEFINE_KERNEL(layer_norm_fwd, LayerNormFwdFn);
OCTET_DEFINE_KERNEL(layer_norm_bwd, LayerNormBwdFn);
OCTET_DEFINE_KERNEL(layer_norm_fp8_fwd, LayerNormFp8FwdFn);
OCTET_DEFINE_KERNEL(rms_norm_fwd, RmsNormFwdFn);
OCTET_DEFINE_KERNEL(rms_norm_bwd, RmsNormBwdFn);

// NOTE [norm statistics]: forward keeps only x, the affine weight and two
// numbers per row (mean and rstd = 1/sqrt(var + eps)), in f32 (f64 for f64 x)
// whatever x's dtype: bf16 statistics would put a relative error of 2^-8 into
// every normalised value of the row. Backward recomputes xhat = (x - mean) *
// rstd from them instead of saving xhat or y, which would cost a second
// (N, C) activation. The variance is computed in two passes over the row
// (mean first, then sum of squared deviations): the row is in cache, and the
// one-pass E[x^2] - E[x]^2 form cancels catastrophically when |mean| >> std.

namespace {

DType StatDType(DType x) { return x == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

Tensor ContiguousOrUndefined(const Tensor& t) { return t.defined() ? t.Contiguous() : t; }

void CheckParam(const char* op, const Tensor& x, const Tensor& p, const char* arg) {
  if (!p.defined()) return;
  CheckUnscaledFloat(op, p, arg);
  const int64_t c = x.shape().back();
  OCTET_CHECK(p.shape() == Shape{c}, op, ": ", arg, " must have shape [C] = [", c, "] to match x ", Describe(x),
              ", got ", Describe(p));
  CheckSameDtype(op, x, p);
  CheckSameDevice(op, x, p);
}

void CheckNormArgs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  CheckUnscaledFloat(op, x, "x");
  OCTET_CHECK(x.dim() >= 1, op, ": x must have at least one dim (the normalised dim C), got ", Describe(x));
  OCTET_CHECK(x.shape().back() > 0, op, ": the normalised (last) dim of x is empty: ", Describe(x));
  OCTET_CHECK(std::isfinite(eps) && eps >= 0, op, ": eps must be finite and >= 0, got ", eps);
  CheckParam(op, x, weight, "weight");
  CheckParam(op, x, bias, "bias");
}

// LayerNorm's backward from what its forward saved: x (N,C), the weight (C)
// or undefined, mean (N), rstd (N). dy: (..., C) in x's dtype. Shared by
// LayerNormOp and LayerNormFp8Op (NOTE [layer norm to fp8]).
TensorList LayerNormBackward(autograd::Ctx& ctx, const Tensor& dy) {
  const Tensor x = ctx.Saved(0), w = ctx.Saved(1), mean = ctx.Saved(2), rstd = ctx.Saved(3);
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  Tensor dx = ctx.NeedsInputGrad(0) ? Empty(dy.shape(), opts) : Tensor();
  Tensor dweight = ctx.NeedsInputGrad(1) ? Empty({c}, opts) : Tensor();
  Tensor dbias = ctx.NeedsInputGrad(2) ? Empty({c}, opts) : Tensor();
  if (n == 0) {
    if (dweight.defined()) dweight.Fill_(0.0);
    if (dbias.defined()) dbias.Fill_(0.0);
  } else {
    layer_norm_bwd(x.device())(dy.Contiguous().View({n, c}), x, w, mean, rstd, Tensor(),
                               dx.defined() ? dx.View({n, c}) : dx, dweight, dbias);
  }
  return {dx, dweight, dbias};
}

struct LayerNormOp : autograd::Op<LayerNormOp> {
  static constexpr const char* kName = "layer_norm";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
    CheckNormArgs(kName, x, weight, bias, eps);
    const int64_t c = x.shape().back(), n = x.numel() / c;
    const Tensor xc = x.Contiguous().View({n, c});  // (N,C)
    const Tensor w = ContiguousOrUndefined(weight);
    Tensor y = Empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    Tensor mean = Empty({n}, {.dtype = StatDType(x.dtype()), .device = x.device()});
    Tensor rstd = Empty({n}, {.dtype = StatDType(x.dtype()), .device = x.device()});
    if (n > 0) {
      layer_norm_fwd(x.device())(xc, Tensor(), w, ContiguousOrUndefined(bias), eps, Tensor(), y.View({n, c}), mean,
                                 rstd);
    }
    ctx.Save(xc);
    ctx.Save(w);
    ctx.Save(mean);
    ctx.Save(rstd);
    return y;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) { return LayerNormBackward(ctx, dy); }
};

// NOTE [layer norm to fp8]: LayerNormFp8 is the LayerNorm of an FP8 Linear's
// input written straight in FP8 (Transformer Engine's LayerNormLinear): the
// kernel computes each normalised value in float32 exactly as LayerNorm does
// (the same template on the CPU), multiplies it by the scale and rounds once
// to FP8, and takes amax of the float32 values in the same pass. LayerNorm
// followed by Quantize rounds twice (to x's dtype, bfloat16 at O1, then to
// FP8) and reads and writes the activation once more; the two differ only
// where the bfloat16 rounding moves a value across an FP8 rounding boundary.
// The result carries ScaleMeta as a Quantize result does (a copy of the
// scale, scale_inv, amax), so ScaledMatmul and the FP8 Linear take it as it
// is. Backward saves and uses what LayerNorm saves (x, weight, mean, rstd:
// NOTE [norm statistics]) and runs LayerNorm's backward kernel: the gradient
// reaching the FP8 output is a float tensor (NOTE [straight-through FP8
// casts] in ops/cast.h: the cast is the identity for gradients), converted
// to x's dtype first.
struct LayerNormFp8Op : autograd::Op<LayerNormFp8Op> {
  static constexpr const char* kName = "layer_norm_fp8";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& scale, double eps, DType fp8, Fp8Saturation sat) {
    CheckNormArgs(kName, x, weight, bias, eps);
    CheckFp8Target(kName, x, fp8, scale);
    const int64_t c = x.shape().back(), n = x.numel() / c;
    const Tensor xc = x.Contiguous().View({n, c});  // (N,C)
    const Tensor w = ContiguousOrUndefined(weight);
    std::shared_ptr<ScaleMeta> meta = NewFp8OutputMeta(scale, x.device());
    Tensor q = Empty(x.shape(), {.dtype = fp8, .device = x.device()});
    Tensor mean = Empty({n}, {.dtype = StatDType(x.dtype()), .device = x.device()});
    Tensor rstd = Empty({n}, {.dtype = StatDType(x.dtype()), .device = x.device()});
    // Also for n == 0: the kernel writes scale_inv and amax (0).
    layer_norm_fp8_fwd(x.device())(xc, w, ContiguousOrUndefined(bias), eps, meta->scale, sat, q.View({n, c}),
                                   meta->scale_inv, meta->amax, mean, rstd);
    ctx.Save(xc);
    ctx.Save(w);
    ctx.Save(mean);
    ctx.Save(rstd);
    return q.WithScaleMeta(std::move(meta));
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    // A gradient the engine made up for an unused output is FP8 zeros
    // (unscaled); To() turns it into float zeros.
    const DType xdt = ctx.Saved(0).dtype();
    TensorList grads = LayerNormBackward(ctx, dy.dtype() == xdt ? dy : dy.To(xdt));
    grads.push_back(Tensor());  // the scale is not differentiable
    return grads;
  }
};

struct AddLayerNormOp : autograd::Op<AddLayerNormOp> {
  static constexpr const char* kName = "add_layer_norm";
  static TensorList Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& residual, const Tensor& weight,
                            const Tensor& bias, double eps) {
    CheckNormArgs(kName, x, weight, bias, eps);
    CheckUnscaledFloat(kName, residual, "residual");
    OCTET_CHECK(residual.shape() == x.shape(), kName, ": residual ", Describe(residual), " must have the shape of x ",
                Describe(x), " (no broadcasting)");
    CheckSameDtype(kName, x, residual);
    CheckSameDevice(kName, x, residual);
    const int64_t c = x.shape().back(), n = x.numel() / c;
    const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
    const Tensor w = ContiguousOrUndefined(weight);
    Tensor sum = Empty(x.shape(), opts), y = Empty(x.shape(), opts);
    Tensor mean = Empty({n}, {.dtype = StatDType(x.dtype()), .device = x.device()});
    Tensor rstd = Empty({n}, {.dtype = StatDType(x.dtype()), .device = x.device()});
    if (n > 0) {
      layer_norm_fwd(x.device())(x.Contiguous().View({n, c}), residual.Contiguous().View({n, c}), w,
                                 ContiguousOrUndefined(bias), eps, sum.View({n, c}), y.View({n, c}), mean, rstd);
    }
    // Backward normalises the sum again (NOTE [norm statistics]); the saved
    // alias makes an in-place change of the returned sum a clear error.
    ctx.Save(sum.View({n, c}));
    ctx.Save(w);
    ctx.Save(mean);
    ctx.Save(rstd);
    return {sum, y};
  }
  static TensorList Backward(autograd::Ctx& ctx, const TensorList& grads) {
    const Tensor h = ctx.Saved(0), w = ctx.Saved(1), mean = ctx.Saved(2), rstd = ctx.Saved(3);
    const Tensor& dsum = grads[0];
    const Tensor& dy = grads[1];
    const int64_t n = h.shape()[0], c = h.shape()[1];
    const TensorOptions opts{.dtype = h.dtype(), .device = h.device()};
    const bool want_dh = ctx.NeedsInputGrad(0) || ctx.NeedsInputGrad(1);
    Tensor dh = want_dh ? Empty(dy.shape(), opts) : Tensor();
    Tensor dweight = ctx.NeedsInputGrad(2) ? Empty({c}, opts) : Tensor();
    Tensor dbias = ctx.NeedsInputGrad(3) ? Empty({c}, opts) : Tensor();
    if (n == 0) {
      if (dweight.defined()) dweight.Fill_(0.0);
      if (dbias.defined()) dbias.Fill_(0.0);
    } else {
      layer_norm_bwd(h.device())(dy.Contiguous().View({n, c}), h, w, mean, rstd, dsum.Contiguous().View({n, c}),
                                 want_dh ? dh.View({n, c}) : dh, dweight, dbias);
    }
    return {ctx.NeedsInputGrad(0) ? dh : Tensor(), ctx.NeedsInputGrad(1) ? dh : Tensor(), dweight, dbias};
  }
};

struct RmsNormOp : autograd::Op<RmsNormOp> {
  static constexpr const char* kName = "rms_norm";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& weight, double eps) {
    CheckNormArgs(kName, x, weight, Tensor(), eps);
    const int64_t c = x.shape().back(), n = x.numel() / c;
    const Tensor xc = x.Contiguous().View({n, c});  // (N,C)
    const Tensor w = ContiguousOrUndefined(weight);
    Tensor y = Empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    Tensor rstd = Empty({n}, {.dtype = StatDType(x.dtype()), .device = x.device()});
    if (n > 0) rms_norm_fwd(x.device())(xc, w, eps, y.View({n, c}), rstd);
    ctx.Save(xc);
    ctx.Save(w);
    ctx.Save(rstd);
    return y;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const Tensor x = ctx.Saved(0), w = ctx.Saved(1), rstd = ctx.Saved(2);
    const int64_t n = x.shape()[0], c = x.shape()[1];
    const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
    Tensor dx = ctx.NeedsInputGrad(0) ? Empty(dy.shape(), opts) : Tensor();
    Tensor dweight = ctx.NeedsInputGrad(1) ? Empty({c}, opts) : Tensor();
    if (n == 0) {
      if (dweight.defined()) dweight.Fill_(0.0);
    } else {
      rms_norm_bwd(x.device())(dy.Contiguous().View({n, c}), x, w, rstd, dx.defined() ? dx.View({n, c}) : dx,
                               dweight);
    }
    return {dx, dweight};
  }
};

}  // namespace

Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return LayerNormOp::Apply(x, weight, bias, eps);
}

Tensor LayerNormFp8(const Tensor& x, const Tensor& weight, const Tensor& bias, DType fp8, const Tensor& scale,
                    double eps, Fp8Saturation sat) {
  CheckDefined(LayerNormFp8Op::kName, x, "x");
  return LayerNormFp8Op::Apply(x, weight, bias, scale, eps, fp8, sat);
}

AddLayerNormResult AddLayerNorm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                double eps) {
  TensorList outs = AddLayerNormOp::Apply(x, residual, weight, bias, eps);
  return {std::move(outs[0]), std::move(outs[1])};
}

Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps) { return RmsNormOp::Apply(x, weight, eps); }

}  // namespace octet
