#include <octet/ops/cast.h>

#include <cmath>

#include <octet/autograd/function.h>
#include <octet/core/amax_note.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast_kernels.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>

namespace octet {

OCTET_DEFINE_KERNEL(quantize_kernel, QuantizeKernelFn);
OCTET_DEFINE_KERNEL(dequantize_kernel, DequantizeKernelFn);
OCTET_DEFINE_KERNEL(amax_kernel, AmaxKernelFn);
OCTET_DEFINE_KERNEL(fp8_transpose_kernel, Fp8TransposeKernelFn);

namespace {

void CheckFp8Target(const char* op, DType fp8, const Tensor& x) {
  OCTET_CHECK(IsFp8(fp8), op, ": target dtype ", Name(fp8), " is not an FP8 dtype (fp8_e4m3 or fp8_e5m2); input ",
              Describe(x));
}

void CheckScale(const char* op, const Tensor& scale, const Tensor& x) {
  CheckDefined(op, scale, "scale");
  OCTET_CHECK(scale.dtype() == DType::kFloat32 && scale.numel() == 1, op,
              ": scale must be a float32 tensor with one element, got ", Describe(scale));
  CheckSameDevice(op, x, scale);
}

// Fresh per-tensor metadata: the scale is copied so that a caller updating
// its scale tensor in place (delayed scaling) does not change the meaning of
// bytes already quantized; scale_inv and amax are written by the kernel.
std::shared_ptr<ScaleMeta> NewMeta(const Tensor& scale) {
  auto meta = std::make_shared<ScaleMeta>();
  meta->granularity = ScaleGranularity::kPerTensor;
  meta->scale = scale.Reshape({1}).Clone();
  meta->scale_inv = Empty({1}, {.dtype = DType::kFloat32, .device = scale.device()});
  meta->amax = Empty({1}, {.dtype = DType::kFloat32, .device = scale.device()});
  return meta;
}

Tensor WithMeta(Tensor t, std::shared_ptr<const ScaleMeta> meta) {
  t.impl()->set_scale_meta(std::move(meta));
  return t;
}

// The gradient reaching an FP8 tensor is a float tensor (NOTE [straight-through
// FP8 casts]); one the engine made up for an unused output is FP8 zeros.
Tensor GradAs(const Tensor& g, DType dtype) {
  if (g.dtype() == dtype) return g;
  return g.To(dtype);
}

struct QuantizeOp : autograd::Op<QuantizeOp> {
  static constexpr const char* kName = "quantize";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& scale, DType fp8, Fp8Saturation sat) {
    CheckUnscaledFloat(kName, x, "x");
    CheckFp8Target(kName, fp8, x);
    CheckScale(kName, scale, x);
    ctx.dtypes = {x.dtype()};
    auto meta = NewMeta(scale);
    Tensor y = Empty(x.shape(), {.dtype = fp8, .device = x.device()});
    quantize_kernel(x.device())(x.Contiguous(), meta->scale, sat, y, Tensor(), meta->scale_inv, meta->amax, Tensor());
    return WithMeta(y, std::move(meta));
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) { return {GradAs(dy, ctx.dtypes[0]), Tensor()}; }
};

struct CastTransposeOp : autograd::Op<CastTransposeOp> {
  static constexpr const char* kName = "cast_transpose";
  static TensorList Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& scale, DType fp8,
                            Fp8Saturation sat) {
    CheckUnscaledFloat(kName, x, "x");
    CheckRank(kName, x, "x", 2);
    CheckFp8Target(kName, fp8, x);
    CheckScale(kName, scale, x);
    ctx.dtypes = {x.dtype()};
    auto meta = NewMeta(scale);
    Tensor y = Empty(x.shape(), {.dtype = fp8, .device = x.device()});
    Tensor yt = Empty({x.size(1), x.size(0)}, {.dtype = fp8, .device = x.device()});
    quantize_kernel(x.device())(x.Contiguous(), meta->scale, sat, y, yt, meta->scale_inv, meta->amax, Tensor());
    std::shared_ptr<const ScaleMeta> shared = std::move(meta);
    return {WithMeta(y, shared), WithMeta(yt, shared)};
  }
  static TensorList Backward(autograd::Ctx& ctx, const TensorList& grads) {
    const DType dtype = ctx.dtypes[0];
    Tensor dx = GradAs(grads[0], dtype);
    const Tensor dxt = GradAs(grads[1], dtype).T();
    return {BinaryRaw(BinaryOp::kAdd, dx, dxt), Tensor()};
  }
};

struct DequantizeOp : autograd::Op<DequantizeOp> {
  static constexpr const char* kName = "dequantize";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& q, DType out) {
    CheckDefined(kName, q, "fp8");
    OCTET_CHECK(IsFp8(q.dtype()), kName, ": expects an FP8 tensor, got ", Describe(q));
    OCTET_CHECK(IsUnscaledFloat(out), kName, ": output dtype ", Name(out),
                " is not float32, float64, bfloat16 or float16 (input ", Describe(q), ")");
    CheckPerTensorScale(kName, q);
    const ScaleMeta* meta = q.scale_meta();
    Tensor scale_inv;
    if (meta != nullptr) {
      scale_inv = meta->scale_inv;
      OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kFloat32 && scale_inv.numel() == 1 &&
                      scale_inv.device() == q.device(),
                  kName, ": ", Describe(q), " has a malformed scale_inv (", Describe(scale_inv), ")");
    } else {
      scale_inv = Full({1}, 1.0, {.dtype = DType::kFloat32, .device = q.device()});
    }
    Tensor y = Empty(q.shape(), {.dtype = out, .device = q.device()});
    dequantize_kernel(q.device())(q.Contiguous(), scale_inv.Reshape({1}), y);
    return y;
  }
  static TensorList Backward(autograd::Ctx&, const Tensor& dy) { return {dy}; }
};

}  // namespace

Tensor Quantize(const Tensor& x, DType fp8, const Tensor& scale, Fp8Saturation sat) {
  CheckDefined("quantize", x, "x");
  return QuantizeOp::Apply(x, scale, fp8, sat);
}

Tensor Quantize(const Tensor& x, DType fp8, float scale, Fp8Saturation sat) {
  CheckDefined("quantize", x, "x");
  OCTET_CHECK(std::isfinite(scale) && scale > 0.0f, "quantize: scale must be positive and finite, got ", scale,
              " (input ", Describe(x), ")");
  // A subnormal scale passes the check above but 1/scale overflows: scale_inv
  // would be inf and every dequantized value NaN (0 * inf) or inf.
  OCTET_CHECK(std::isfinite(1.0f / scale), "quantize: scale ", scale,
              " is too small: its reciprocal (scale_inv) overflows float32 (input ", Describe(x), ")");
  return Quantize(x, fp8, Full({1}, scale, {.dtype = DType::kFloat32, .device = x.device()}), sat);
}

Tensor Dequantize(const Tensor& fp8, DType out) { return DequantizeOp::Apply(fp8, out); }

Tensor Amax(const Tensor& x) {
  CheckUnscaledFloat("amax", x, "x");
  // NOTE [amax notes]: the writer of x may have taken its amax already.
  if (const Tensor noted = NotedAmax(x); noted.defined()) return noted.Clone();
  Tensor out = Empty({1}, {.dtype = DType::kFloat32, .device = x.device()});
  amax_kernel(x.device())(x.Contiguous().detach(), out);
  return out;
}

std::pair<Tensor, Tensor> CastTranspose(const Tensor& x, DType fp8, const Tensor& scale, Fp8Saturation sat) {
  CheckDefined("cast_transpose", x, "x");
  TensorList out = CastTransposeOp::Apply(x, scale, fp8, sat);
  return {out[0], out[1]};
}

Tensor TransposeFp8(const Tensor& q) {
  constexpr const char* kName = "transpose_fp8";
  CheckDefined(kName, q, "q");
  OCTET_CHECK(IsFp8(q.dtype()), kName, ": expects an FP8 tensor, got ", Describe(q));
  CheckRank(kName, q, "q", 2);
  CheckPerTensorScale(kName, q);
  const ScaleMeta* meta = q.scale_meta();
  Tensor qt = Empty({q.size(1), q.size(0)}, {.dtype = q.dtype(), .device = q.device()});
  if (q.numel() > 0) fp8_transpose_kernel(q.device())(q.detach().Contiguous(), qt);
  if (meta == nullptr) return qt;
  // The same scale; the copy's metadata has no column-wise entry of its own.
  auto copy = std::make_shared<ScaleMeta>(*meta);
  copy->columnwise = Tensor();
  copy->rowwise_storage = nullptr;
  copy->rowwise_offset = 0;
  return qt.WithScaleMeta(std::move(copy));
}

namespace {

// The FP8 cast of a Linear's output gradient x (M, N) plus its float32 column
// sums from the same pass, with (`transposed`) or without the (N, M) copy.
// Returns {q, qt or undefined, dbias}.
CastTransposeBiasGrad CastWithBiasGrad(const char* name, const Tensor& x, DType fp8, const Tensor& scale,
                                       Fp8Saturation sat, bool transposed) {
  CheckDefined(name, x, "x");
  CheckUnscaledFloat(name, x, "x");
  CheckRank(name, x, "x", 2);
  CheckFp8Target(name, fp8, x);
  CheckScale(name, scale, x);
  auto meta = NewMeta(scale);
  const TensorOptions opts{.dtype = fp8, .device = x.device()};
  Tensor y = Empty(x.shape(), opts);
  Tensor yt = transposed ? Empty({x.size(1), x.size(0)}, opts) : Tensor();
  Tensor dbias = Empty({x.size(1)}, {.dtype = DType::kFloat32, .device = x.device()});
  quantize_kernel(x.device())(x.detach().Contiguous(), meta->scale, sat, y, yt, meta->scale_inv, meta->amax, dbias);
  std::shared_ptr<const ScaleMeta> shared = std::move(meta);
  return {WithMeta(y, shared), transposed ? WithMeta(yt, shared) : Tensor(), dbias};
}

}  // namespace

CastTransposeBiasGrad CastTransposeWithBiasGrad(const Tensor& x, DType fp8, const Tensor& scale, Fp8Saturation sat) {
  return CastWithBiasGrad("cast_transpose_with_bias_grad", x, fp8, scale, sat, /*transposed=*/true);
}

QuantizeBiasGrad QuantizeWithBiasGrad(const Tensor& x, DType fp8, const Tensor& scale, Fp8Saturation sat) {
  CastTransposeBiasGrad r = CastWithBiasGrad("quantize_with_bias_grad", x, fp8, scale, sat, /*transposed=*/false);
  return {std::move(r.q), std::move(r.dbias)};
}

}  // namespace octet
