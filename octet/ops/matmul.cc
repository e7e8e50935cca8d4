#include <octet/ops/matmul.h>
#include <octet/ops/matmul_testing.h>

#include <array>
#include <atomic>
#include <ostream>
#include <tuple>

#include <octet/autograd/function.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/ops/shape.h>

namespace octet {

OCTET_DEFINE_KERNEL(matmul_kernel, MatmulKernelFn);
OCTET_DEFINE_KERNEL(scaled_matmul_kernel, ScaledMatmulKernelFn);
OCTET_DEFINE_KERNEL(fp8_gemm_needs_tn, Fp8GemmNeedsTnFn);
OCTET_DEFINE_KERNEL(gemm_epilogue_gelu, GemmEpilogueGeluFn);
OCTET_DEFINE_KERNEL(gemm_mixed_bf16, GemmMixedBf16Fn);

namespace {

// The operands of a call, named, for its error messages: "a <a>, b <b>".
// Formatted only when a message is (OCTET_CHECK streams its parts on
// failure): describing them up front cost every GEMM call two to three
// Describe strings and their allocations, on the one thread, in the step.
struct Operands {
  static constexpr size_t kMax = 3;
  std::array<const char*, kMax> names{};
  std::array<const Tensor*, kMax> tensors{};  // null or undefined: left out

  friend std::ostream& operator<<(std::ostream& os, const Operands& o) {
    bool first = true;
    for (size_t i = 0; i < kMax; ++i) {
      if (o.tensors[i] == nullptr || !o.tensors[i]->defined()) continue;
      os << (first ? "" : ", ") << o.names[i] << " " << Describe(*o.tensors[i]);
      first = false;
    }
    return os;
  }
};

Operands OperandPair(const Tensor& a, const Tensor& b) { return {{"a", "b", nullptr}, {&a, &b, nullptr}}; }

// Dtype and device checks shared by Matmul and Linear; arg names the operand.
void CheckGemmOperand(const char* op, const Tensor& t, const char* arg, const Operands& both) {
  CheckDefined(op, t, arg);
  OCTET_CHECK(!IsFp8(t.dtype()), op, ": ", arg, " is ", Describe(t), " (", both,
              "); FP8 operands carry scales that ", op,
              " would ignore: use ScaledMatmul(a, b, out_dtype) or Dequantize first");
  OCTET_CHECK(IsUnscaledFloat(t.dtype()), op, ": ", arg, " is ", Describe(t), " (", both,
              "); expected float32, float64, bfloat16 or float16");
}

// The shape of a (..., M, K) x b (..., K, N), both of rank >= 2.
Shape GemmOutShape(const char* op, const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const int64_t ka = sa.back(), kb = sb[sb.size() - 2];
  OCTET_CHECK(ka == kb, op, ": inner dims do not match: ", OperandPair(a, b), " (K = ", ka, " vs ", kb, ")");
  const size_t ba = sa.size() - 2, bb = sb.size() - 2, rank = std::max(ba, bb);
  Shape out(rank + 2);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - ba ? 1 : sa[i - (rank - ba)];
    const int64_t db = i < rank - bb ? 1 : sb[i - (rank - bb)];
    OCTET_CHECK(da == db || da == 1 || db == 1, op, ": batch dims do not broadcast: ", OperandPair(a, b),
                " (batch dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  out[rank] = sa[sa.size() - 2];
  out[rank + 1] = sb.back();
  return out;
}

// t viewed with leading size-1 dims up to `rank` (no autograd; keeps FP8 scale metadata).
Tensor PadRank(const Tensor& t, int64_t rank) {
  if (t.dim() == rank) return t.detach();
  Shape shape(rank - t.dim(), 1), strides(rank - t.dim(), 1);
  shape.insert(shape.end(), t.shape().begin(), t.shape().end());
  strides.insert(strides.end(), t.strides().begin(), t.strides().end());
  return MakeAlias(t.detach(), shape, strides, t.offset());
}

// t (..., C) as a 2-D (rows, C) tensor: a view unless the leading dims cannot
// be flattened. Explicit sizes, so C == 0 works.
Tensor Rows(const Tensor& t) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  return t.Reshape({rows, t.shape().back()});
}

// a (..., M, K) x b (..., K, N) without autograd; both rank >= 2, checked.
Tensor GemmRaw(const Tensor& a, const Tensor& b) {
  const Shape shape = GemmOutShape("matmul", a, b);
  Tensor out = Empty(shape, {.dtype = a.dtype(), .device = a.device()});
  const int64_t rank = static_cast<int64_t>(shape.size());
  matmul_kernel(a.device())(PadRank(a, rank), PadRank(b, rank), Tensor(), out, Tensor());
  return out;
}

struct MatmulOp : autograd::Op<MatmulOp> {
  static constexpr const char* kName = "matmul";
  // a (..., M, K), b (..., K, N), both rank >= 2 (Matmul promotes 1-D operands).
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& a, const Tensor& b) {
    ctx.Save(a);
    ctx.Save(b);
    return GemmRaw(a, b);
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dc) {
    const Tensor a = ctx.Saved(0), b = ctx.Saved(1);
    Tensor da, db;
    if (ctx.NeedsInputGrad(0)) {
      // da = dc · bᵀ, summed over the batch dims a was broadcast along.
      da = GemmRaw(dc, b.Transpose(-1, -2));
      if (da.shape() != a.shape()) da = SumToShape(da, a.shape());
    }
    if (ctx.NeedsInputGrad(1)) {
      if (b.dim() == 2 && a.dim() > 2) {
        // A shared matrix: one GEMM over all batch rows instead of a batch of
        // products summed afterwards. (R, K)ᵀ · (R, N), R = batch·M.
        db = GemmRaw(Rows(a).T(), Rows(dc));
      } else {
        db = GemmRaw(a.Transpose(-1, -2), dc);
        if (db.shape() != b.shape()) db = SumToShape(db, b.shape());
      }
    }
    return {da, db};
  }
};

// same_dtype: x, weight and bias must share one dtype (Linear; CastLinear
// casts each to its compute dtype and checks that instead).
void CheckLinearArgs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     bool same_dtype = true) {
  const Operands all{{"x", "weight", "bias"}, {&x, &weight, &bias}};
  CheckGemmOperand(op, x, "x", all);
  CheckGemmOperand(op, weight, "weight", all);
  OCTET_CHECK(x.dim() >= 1, op, ": x must have rank >= 1 (", all, ")");
  OCTET_CHECK(weight.dim() == 2, op, ": weight must be 2-D (N, K) (", all, ")");
  OCTET_CHECK(x.shape().back() == weight.size(1), op, ": the last dim of x (", x.shape().back(),
              ") does not match weight's in_features (", weight.size(1), ") (", all, ")");
  OCTET_CHECK(!same_dtype || x.dtype() == weight.dtype(), op, ": dtype mismatch (", all, ")");
  CheckSameDevice(op, x, weight);
  if (bias.defined()) {
    CheckGemmOperand(op, bias, "bias", all);
    OCTET_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias must have shape [",
                weight.size(0), "] (", all, ")");
    OCTET_CHECK(!same_dtype || bias.dtype() == x.dtype(), op, ": dtype mismatch (", all, ")");
    CheckSameDevice(op, x, bias);
  }
}

// y = x·weightᵀ + bias, and with `gelu` y = Gelu(that) with the
// pre-activation in *pre (NOTE [gelu epilogue] in ops/matmul_kernels.h).
Tensor LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu, Tensor* pre) {
  CheckLinearArgs(gelu ? "linear_gelu" : "linear", x, weight, bias);
  const int64_t n = weight.size(0);
  const Tensor x2 = Rows(x);  // (R, K)
  const TensorOptions options{.dtype = x.dtype(), .device = x.device()};
  Tensor y2 = Empty({x2.size(0), n}, options);
  Tensor pre2 = gelu ? Empty({x2.size(0), n}, options) : Tensor();
  matmul_kernel(x.device())(x2.detach(), weight.detach().T(), bias.defined() ? bias.detach() : Tensor(), y2, pre2);
  Shape shape = x.shape();
  shape.back() = n;
  if (gelu) *pre = pre2.View(shape);
  return y2.View(shape);
}

// NOTE [bias gradient first]: a Linear's backward sums dy's columns into the
// bias gradient before its two GEMMs, while dy is still in the cache from
// the op that wrote it; after them it was evicted on the FP32-FMA path,
// whose GEMMs also write f32 copies of their bf16 operands. Same bits (the
// sum reads only dy). Measured (small GPT at O2, OCTET_CPU_GEMM=fp32, Zen 5,
// 2 threads, scripts/omp_regions.sh over 60 train_gpt steps, four
// alternating pairs, 2026-11-28): the bf16 column sums 32-50 us a call
// after the GEMMs, 21-40 before, against 26-29 for O0's f32 ones; no change
// with BF16 dot products (17-19 us either way).
// The gradients of y = x·weightᵀ + bias from dy (..., N).
TensorList LinearBackward(const autograd::Ctx& ctx, const Tensor& x, const Tensor& weight, const Tensor& dy) {
  const Tensor dy2 = Rows(dy);  // (R, N)
  Tensor dx, dweight, dbias;
  if (ctx.NeedsInputGrad(2)) dbias = Sum(dy2, {0});  // first: NOTE [bias gradient first]
  // NOTE [wgrad before dgrad] in nn/fp8_linear.cc.
  if (ctx.NeedsInputGrad(1)) dweight = GemmRaw(dy2.T(), Rows(x));  // (N, R)·(R, K)
  if (ctx.NeedsInputGrad(0)) dx = GemmRaw(dy2, weight).View(x.shape());  // (R, N)·(N, K)
  return {dx, dweight, dbias};
}

struct LinearOp : autograd::Op<LinearOp> {
  static constexpr const char* kName = "linear";
  // x (..., K), weight (N, K), bias (N) or undefined -> (..., N).
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    Tensor y = LinearForward(x, weight, bias, /*gelu=*/false, nullptr);
    ctx.Save(x);
    ctx.Save(weight);
    return y;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    return LinearBackward(ctx, ctx.Saved(0), ctx.Saved(1), dy);
  }
};

struct LinearGeluOp : autograd::Op<LinearGeluOp> {
  static constexpr const char* kName = "linear_gelu";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    Tensor pre;
    Tensor y = LinearForward(x, weight, bias, /*gelu=*/true, &pre);
    ctx.Save(x);
    ctx.Save(weight);
    ctx.Save(pre);
    return y;
  }
  // dY by value: dropped once dpre is made (NOTE [backward owns its gradient]).
  static TensorList Backward(autograd::Ctx& ctx, Tensor dy) {
    // dpre = dy * gelu'(pre), then the Linear's gradients.
    const Tensor dpre = BinaryRaw(BinaryOp::kGeluBackward, dy, ctx.Saved(2));
    dy = Tensor();
    return LinearBackward(ctx, ctx.Saved(0), ctx.Saved(1), dpre);
  }
};

// -1: as the backend says; 0/1: forced by SetCastLinearFusionForTesting.
std::atomic<int> cast_linear_fusion_override{-1};

// NOTE [cast linear]: y = Linear(x.To(c), weight.To(c), bias.To(c)) as one
// op. Fused (a bf16 compute dtype, an f32 weight, a device whose GEMM takes
// mixed bf16 operands): the GEMMs read the f32 weight, rounding it while
// packing (NOTE [narrowed B] in ops/cpu/dnnl_gemm.cc), and the weight GEMM
// writes its f32 accumulators straight into the f32 gradient. Otherwise the
// casts are made here, and the gradients computed in c and cast back.
bool CastLinearFuses(const Tensor& x, const Tensor& weight, DType compute) {
  if (compute != DType::kBFloat16 || weight.dtype() != DType::kFloat32) return false;
  const int forced = cast_linear_fusion_override.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  return gemm_mixed_bf16(x.device())(x.device());
}

struct CastLinearOp : autograd::Op<CastLinearOp> {
  static constexpr const char* kName = "cast_linear";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, DType compute,
                        bool gelu) {
    CheckLinearArgs(gelu ? "cast_linear_gelu" : "cast_linear", x, weight, bias, /*same_dtype=*/false);
    OCTET_CHECK(IsUnscaledFloat(compute),
                "cast_linear: compute dtype must be float32, float64, bfloat16 or float16, got ", Name(compute));
    const Tensor xc = x.detach().To(compute);
    const Tensor bc = bias.defined() ? bias.detach().To(compute) : Tensor();
    const bool fused = CastLinearFuses(x, weight, compute);
    const Tensor wc = fused ? weight.detach() : weight.detach().To(compute);
    const int64_t n = wc.size(0);
    const Tensor x2 = Rows(xc);
    const TensorOptions options{.dtype = compute, .device = x.device()};
    Tensor y2 = Empty({x2.size(0), n}, options);
    Tensor pre2 = gelu ? Empty({x2.size(0), n}, options) : Tensor();
    matmul_kernel(x.device())(x2, wc.T(), bc, y2, pre2);
    Shape shape = x.shape();
    shape.back() = n;
    ctx.Save(xc);
    ctx.Save(wc);
    if (gelu) ctx.Save(pre2.View(shape));
    ctx.ints = {fused, gelu};
    ctx.dtypes = {x.dtype(), weight.dtype(), bias.defined() ? bias.dtype() : compute};
    return y2.View(shape);
  }
  // dY by value: with the GELU, dropped once dz is made (NOTE [backward owns
  // its gradient]).
  static TensorList Backward(autograd::Ctx& ctx, Tensor dy) {
    const bool fused = ctx.ints[0] != 0, gelu = ctx.ints[1] != 0;
    const Tensor xc = ctx.Saved(0), wc = ctx.Saved(1);
    const Tensor dz = gelu ? BinaryRaw(BinaryOp::kGeluBackward, dy, ctx.Saved(2)) : dy;
    dy = Tensor();
    const Tensor dz2 = Rows(dz);  // (R, N), compute dtype
    const DType compute = dz.dtype();
    Tensor dx, dweight, dbias;
    if (ctx.NeedsInputGrad(2)) dbias = Sum(dz2, {0}).To(ctx.dtypes[2]);  // NOTE [bias gradient first]
    // NOTE [wgrad before dgrad] in nn/fp8_linear.cc.
    if (ctx.NeedsInputGrad(1)) {
      // (N, R)·(R, K); fused: the f32 accumulators are the gradient.
      const DType out = fused ? ctx.dtypes[1] : compute;
      dweight = Empty({dz2.size(1), xc.shape().back()}, {.dtype = out, .device = dz.device()});
      matmul_kernel(dz.device())(dz2.T(), Rows(xc), Tensor(), dweight, Tensor());
      dweight = dweight.To(ctx.dtypes[1]);
    }
    if (ctx.NeedsInputGrad(0)) {
      // (R, N)·(N, K): a master weight is narrowed as the GEMM reads it.
      dx = Empty({dz2.size(0), wc.size(1)}, {.dtype = compute, .device = dz.device()});
      matmul_kernel(dz.device())(dz2, wc, Tensor(), dx, Tensor());
      dx = dx.View(xc.shape()).To(ctx.dtypes[0]);
    }
    return {dx, dweight, dbias};
  }
};

}  // namespace

Tensor Matmul(const Tensor& a, const Tensor& b) {
  constexpr const char* op = "matmul";
  CheckDefined(op, a, "a");
  CheckDefined(op, b, "b");
  const Operands both = OperandPair(a, b);
  CheckGemmOperand(op, a, "a", both);
  CheckGemmOperand(op, b, "b", both);
  OCTET_CHECK(a.dim() >= 1 && b.dim() >= 1, op, ": operands must have rank >= 1, got ", both);
  OCTET_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", both, " (convert one with To(dtype))");
  CheckSameDevice(op, a, b);
  const int64_t ka = a.shape().back(), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  OCTET_CHECK(ka == kb, op, ": inner dims do not match: ", both, " (K = ", ka, " vs ", kb, ")");
  const Tensor a2 = a.dim() == 1 ? a.Unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.Unsqueeze(-1) : b;
  Tensor c = MatmulOp::Apply(a2, b2);
  if (a.dim() == 1) c = c.Squeeze(-2);
  if (b.dim() == 1) c = c.Squeeze(-1);
  return c;
}

Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckDefined("linear", x, "x");
  CheckDefined("linear", weight, "weight");
  return LinearOp::Apply(x, weight, bias);
}

Tensor LinearGelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckDefined("linear_gelu", x, "x");
  CheckDefined("linear_gelu", weight, "weight");
  return LinearGeluOp::Apply(x, weight, bias);
}

Tensor CastLinear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType compute, bool gelu) {
  const char* op = gelu ? "cast_linear_gelu" : "cast_linear";
  CheckDefined(op, x, "x");
  CheckDefined(op, weight, "weight");
  return CastLinearOp::Apply(x, weight, bias, compute, gelu);
}

bool CastLinearFusesFor(const Tensor& x, const Tensor& weight, DType compute) {
  return CastLinearFuses(x, weight, compute);
}

void SetCastLinearFusionForTesting(std::optional<bool> value) {
  cast_linear_fusion_override.store(value.has_value() ? static_cast<int>(*value) : -1, std::memory_order_relaxed);
}

namespace {
// -1: ask the backend; 0/1: forced by SetFp8TransposedCopiesForTesting.
std::atomic<int> transposed_copies_override{-1};
}  // namespace

bool Fp8GemmWantsTransposedCopies(Device device) {
  const int forced = transposed_copies_override.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  return fp8_gemm_needs_tn(device)(device);
}

bool GemmEpilogueRunsGelu(Device device) { return gemm_epilogue_gelu(device)(device); }

void SetFp8TransposedCopiesForTesting(std::optional<bool> value) {
  transposed_copies_override.store(value.has_value() ? static_cast<int>(*value) : -1, std::memory_order_relaxed);
}


namespace {

// NOTE [fp8 column-wise data]: is t the row-wise q itself (R, C) contiguous,
// or q.T()? 0: neither (or no copy), 1: q, 2: q.T().
int ColumnwiseRelation(const Tensor& t) {
  const ScaleMeta* m = t.scale_meta();
  if (m == nullptr || !m->columnwise.defined() || t.dim() != 2 || t.storage().get() != m->rowwise_storage ||
      t.offset() != m->rowwise_offset)
    return 0;
  const int64_t C = m->columnwise.size(0), R = m->columnwise.size(1);
  if (t.size(0) == R && t.size(1) == C && t.stride(0) == C && t.stride(1) == 1) return 1;
  if (t.size(0) == C && t.size(1) == R && t.stride(0) == 1 && t.stride(1) == C) return 2;
  return 0;
}

// The operand of a TN-only FP8 GEMM in the layout it reads (NOTE [FP8 TN
// rule]): A (M, K) with K contiguous, B (K, N) with K contiguous (stride 1
// along dim 0). Uses q's column-wise copy where the given view is the other
// orientation; anything else is left to the backend (which copies).
Tensor Fp8OperandForTn(const Tensor& t, bool is_a) {
  const int rel = ColumnwiseRelation(t);
  if (rel == 0) return t;
  const Tensor& ct = t.scale_meta()->columnwise;  // (C, R) contiguous = q.T()
  if (is_a) return rel == 2 ? ct : t;             // A wants rows contiguous
  return rel == 1 ? ct.T() : t;                   // B wants columns contiguous
}

}  // namespace

Tensor QuantizeForGemm(const Tensor& x, DType fp8, const Tensor& scale, bool columnwise, Fp8Saturation sat,
                       Tensor* dbias) {
  CheckDefined("quantize_for_gemm", x, "x");
  if (dbias != nullptr) *dbias = Tensor();
  if (!Fp8GemmWantsTransposedCopies(x.device())) {
    if (dbias == nullptr || x.dim() != 2) return Quantize(x, fp8, scale, sat);
    // No transposed copy here, but the bias gradient still comes from the
    // quantize's own pass over x (one read of dY instead of three).
    QuantizeBiasGrad r = QuantizeWithBiasGrad(x, fp8, scale, sat);
    *dbias = std::move(r.dbias);
    return std::move(r.q);
  }
  if (!columnwise) return Quantize(x, fp8, scale, sat);
  OCTET_CHECK(x.dim() == 2, "quantize_for_gemm: a column-wise copy needs a 2-D tensor, got ", Describe(x));
  Tensor q, qt;
  if (dbias != nullptr) {
    // A backward-pass helper: the result does not require grad (as ScaledMatmul's inputs there).
    CastTransposeBiasGrad r = CastTransposeWithBiasGrad(x, fp8, scale, sat);
    q = std::move(r.q);
    qt = std::move(r.qt);
    *dbias = std::move(r.dbias);
  } else {
    std::tie(q, qt) = CastTranspose(x, fp8, scale, sat);
  }
  // q gets its own metadata (the shared one plus the copy); qt keeps the shared one.
  auto meta = std::make_shared<ScaleMeta>(*q.scale_meta());
  meta->columnwise = qt;
  meta->rowwise_storage = q.storage().get();
  meta->rowwise_offset = q.offset();
  q.impl()->set_scale_meta(std::move(meta));
  return q;
}

Tensor WithColumnwiseForGemm(const Tensor& q) {
  constexpr const char* kName = "with_columnwise_for_gemm";
  CheckDefined(kName, q, "q");
  OCTET_CHECK(IsFp8(q.dtype()) && q.scale_meta() != nullptr, kName,
              ": expects an FP8 tensor with scale metadata (a Quantize or LayerNormFp8 result), got ", Describe(q));
  CheckRank(kName, q, "q", 2);
  if (!Fp8GemmWantsTransposedCopies(q.device()) || ColumnwiseRelation(q) == 1) return q;
  const Tensor rowwise = q.detach().Contiguous();
  // NOTE [fp8 column-wise data]: a fresh tensor over the row-wise bytes with
  // the copy in its metadata (q's own metadata is left alone).
  auto meta = std::make_shared<ScaleMeta>(*rowwise.scale_meta());
  meta->columnwise = TransposeFp8(rowwise);
  meta->rowwise_storage = rowwise.storage().get();
  meta->rowwise_offset = rowwise.offset();
  return rowwise.WithScaleMeta(std::move(meta));
}

Tensor ForTransposedUse(const Tensor& q) {
  CheckDefined("for_transposed_use", q, "q");
  if (ColumnwiseRelation(q) != 1) return q;
  return q.scale_meta()->columnwise.T();
}

Tensor ScaledMatmul(const Tensor& a_in, const Tensor& b_in, DType out_dtype, const Tensor& bias, GemmRole role,
                    Tensor* gelu_pre) {
  constexpr const char* op = "scaled_matmul";
  CheckDefined(op, a_in, "a");
  CheckDefined(op, b_in, "b");
  // NOTE [fp8 column-wise data]: the layout the backend reads, where an
  // operand carries both.
  const bool tn = Fp8GemmWantsTransposedCopies(a_in.device());
  const Tensor a_fp8 = tn ? Fp8OperandForTn(a_in, /*is_a=*/true) : a_in;
  const Tensor b_fp8 = tn ? Fp8OperandForTn(b_in, /*is_a=*/false) : b_in;
  const Operands both = OperandPair(a_fp8, b_fp8);
  OCTET_CHECK(IsFp8(a_fp8.dtype()) && IsFp8(b_fp8.dtype()), op, ": expects FP8 operands, got ", both,
              " (Quantize them first, or use Matmul for unscaled dtypes)");
  OCTET_CHECK(!(a_fp8.dtype() == DType::kFloat8E5M2 && b_fp8.dtype() == DType::kFloat8E5M2), op,
              ": fp8_e5m2 x fp8_e5m2 is not supported (", both,
              "); cuBLASLt has no E5M2 x E5M2 kernel either: quantize one operand to fp8_e4m3");
  OCTET_CHECK(a_fp8.dim() >= 2 && b_fp8.dim() >= 2, op, ": operands must have rank >= 2, got ", both);
  CheckSameDevice(op, a_fp8, b_fp8);
  CheckPerTensorScale(op, a_fp8);
  CheckPerTensorScale(op, b_fp8);
  OCTET_CHECK(out_dtype == DType::kFloat32 || out_dtype == DType::kBFloat16, op, ": out_dtype must be float32 or "
              "bfloat16, got ", Name(out_dtype), " (", both, ")");
  const Shape shape = GemmOutShape(op, a_fp8, b_fp8);
  if (bias.defined()) {
    OCTET_CHECK(bias.dim() == 1 && bias.size(0) == shape.back() &&
                    (bias.dtype() == DType::kFloat32 || bias.dtype() == DType::kBFloat16),
                op, ": bias must be float32 or bfloat16 of shape [", shape.back(), "], got ", Describe(bias), " (",
                both, ")");
    CheckSameDevice(op, a_fp8, bias);
  }
  Tensor out = Empty(shape, {.dtype = out_dtype, .device = a_fp8.device()});
  if (gelu_pre != nullptr) *gelu_pre = Empty(shape, {.dtype = out_dtype, .device = a_fp8.device()});
  const int64_t rank = static_cast<int64_t>(shape.size());
  scaled_matmul_kernel(a_fp8.device())(PadRank(a_fp8, rank), PadRank(b_fp8, rank),
                                       bias.defined() ? bias.detach() : Tensor(), out, role,
                                       gelu_pre != nullptr ? *gelu_pre : Tensor());
  return out;
}

}  // namespace octet
