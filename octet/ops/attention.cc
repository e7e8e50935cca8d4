#include <octet/ops/attention.h>

#include <cmath>
#include <limits>

#include <octet/autograd/function.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cast.h>
#include <octet/ops/op_checks.h>

namespace octet {

OCTET_DEFINE_KERNEL(causal_attention_fwd, CausalAttentionFwdFn);
OCTET_DEFINE_KERNEL(causal_attention_bwd, CausalAttentionBwdFn);
OCTET_DEFINE_KERNEL(attention_reads_fp8, AttentionReadsFp8Fn);

DType AttentionLseDtype(DType input) { return input == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

namespace {

constexpr const char* kOpName = "causal_attention";

void CheckAttentionArgs(const Tensor& q, const Tensor& k, const Tensor& v) {
  CheckUnscaledFloat(kOpName, q, "q");
  CheckUnscaledFloat(kOpName, k, "k");
  CheckUnscaledFloat(kOpName, v, "v");
  OCTET_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kOpName,
              ": q, k and v must have rank 4 (B,H,T,D), got q ", Describe(q), ", k ", Describe(k), ", v ",
              Describe(v));
  OCTET_CHECK(q.shape() == k.shape() && q.shape() == v.shape(), kOpName,
              ": q, k and v must have the same shape (B,H,T,D), got q ", Describe(q), ", k ", Describe(k), ", v ",
              Describe(v));
  CheckSameDtype(kOpName, q, k);
  CheckSameDtype(kOpName, q, v);
  CheckSameDevice(kOpName, q, k);
  CheckSameDevice(kOpName, q, v);
  OCTET_CHECK(q.size(3) > 0, kOpName, ": head size D must be at least 1, got q ", Describe(q));
}

double ResolvedScale(double scale, int64_t head_size) {
  return scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(head_size)) : scale;
}

// 0 picks 1 / sqrt(D); an infinite or NaN scale would make every output NaN,
// and so would a finite double beyond float32's range: the kernels take
// scale and scale * log2(e) in float32 (for every dtype but float64), where
// it becomes inf. The bound, half of float32's max, keeps both finite.
void CheckScale(const char* op, double scale) {
  OCTET_CHECK(std::isfinite(scale), op, ": scale must be finite (0: 1 / sqrt(D)), got ", scale);
  constexpr double kMaxScale = std::numeric_limits<float>::max() / 2.0;
  OCTET_CHECK(std::fabs(scale) <= kMaxScale, op, ": scale ", scale, " is out of range: |scale| must be at most ",
              kMaxScale, " (half of float32's max; 0: 1 / sqrt(D))");
}

// Runs the forward kernel into `out` ((B,H,T,D), any strides) and saves
// what backward reads: out and the log-sum-exp, then `inputs` (what backward
// rebuilds q, k and v from: the tensors themselves, or an FP8 copy).
void AttentionForward(autograd::Ctx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                      const Tensor& out, const TensorList& inputs) {
  const Shape& shape = q.shape();  // (B,H,T,D)
  const double s = ResolvedScale(scale, shape[3]);
  Tensor lse = Empty({shape[0], shape[1], shape[2]}, {.dtype = AttentionLseDtype(out.dtype()), .device = q.device()});
  if (out.numel() > 0) causal_attention_fwd(q.device())(q, k, v, s, out, lse);
  if (ctx.recording()) {
    ctx.Save(out);
    ctx.Save(lse);
    for (const Tensor& t : inputs) ctx.Save(t);
    ctx.doubles = {s};
  }
}

// Runs the backward kernel from dout ((B,H,T,D), any strides) into dq, dk,
// dv (any strides, each undefined when not wanted); q, k, v as the forward
// read them.
void AttentionBackward(const autograd::Ctx& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Tensor out = ctx.Saved(0), lse = ctx.Saved(1);
  OCTET_CHECK(dout.shape() == q.shape() && dout.dtype() == out.dtype(), kOpName,
              " backward: output gradient ", Describe(dout), " does not match the output ", Describe(out));
  if (q.numel() > 0 && (dq.defined() || dk.defined() || dv.defined()))
    causal_attention_bwd(q.device())(q, k, v, out, dout, lse, ctx.doubles[0], dq, dk, dv);
}

struct CausalAttentionOp : autograd::Op<CausalAttentionOp> {
  static constexpr const char* kName = kOpName;

  static Tensor Forward(autograd::Ctx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
    CheckAttentionArgs(q, k, v);
    Tensor out = Empty(q.shape(), {.dtype = q.dtype(), .device = q.device()});
    AttentionForward(ctx, q, k, v, scale, out, {q, k, v});
    return out;
  }

  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    const Tensor q = ctx.Saved(2), k = ctx.Saved(3), v = ctx.Saved(4);
    const TensorOptions options{.dtype = q.dtype(), .device = q.device()};
    Tensor dq = ctx.NeedsInputGrad(0) ? Empty(q.shape(), options) : Tensor();
    Tensor dk = ctx.NeedsInputGrad(1) ? Empty(q.shape(), options) : Tensor();
    Tensor dv = ctx.NeedsInputGrad(2) ? Empty(q.shape(), options) : Tensor();
    AttentionBackward(ctx, q, k, v, dout, dq, dk, dv);
    return {dq, dk, dv};
  }
};

// NOTE [attention in the qkv layout]: a GPT block's attention reads q, k
// and v from one fused projection (B,T,3C) and hands its output, heads side
// by side, to the next projection as (B,T,C). Through CausalAttention that
// is a split into (B,H,T,D) views (no copy: any input strides are read in
// place), a contiguous (B,H,T,D) output permuted and copied into (B,T,C),
// and in backward three contiguous (B,H,T,D) gradients copied into one
// (B,T,3C) gradient: four copies of an activation-sized tensor per block
// and step, each its own parallel region on the CPU (perf: 16 of a small
// GPT step's ~220 regions). The kernels write any output strides, so this op
// hands them the heads of the (B,T,C) output and of the (B,T,3C) gradient
// as (B,H,T,D) views instead: no copies, the same values (the kernels
// compute each element the same way whatever its address).

// q, k, v (B,H,T,D) as views of qkv (B,T,3C), and the (B,H,T,D) view of a (B,T,C) tensor.
TensorList HeadsOf(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
  const Tensor heads = qkv.Reshape({B, T, 3, n_head, D}).Permute({2, 0, 3, 1, 4});  // (3,B,H,T,D)
  return {heads.Select(0, 0), heads.Select(0, 1), heads.Select(0, 2)};
}
Tensor HeadsOfMerged(const Tensor& x, int64_t n_head) {  // (B,T,C) -> (B,H,T,D)
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  return x.Reshape({B, T, n_head, C / n_head}).Permute({0, 2, 1, 3});
}

constexpr const char* kQkvOpName = "causal_attention_qkv";
constexpr const char* kQkvFp8OpName = "causal_attention_qkv_fp8";

// Checks qkv's geometry ((B,T,3C), C = n_head * D, D >= 1) for `op`.
void CheckQkvShape(const char* op, const Tensor& qkv, int64_t n_head) {
  OCTET_CHECK(qkv.dim() == 3, op, ": qkv must have rank 3 (B,T,3C), got ", Describe(qkv));
  OCTET_CHECK(n_head >= 1, op, ": n_head must be at least 1, got ", n_head);
  const int64_t width = qkv.size(2);
  OCTET_CHECK(width % 3 == 0 && (width / 3) % n_head == 0 && width > 0, op, ": the last dim of qkv (", width,
              ") must be 3 * n_head (", n_head, ") * a head size >= 1, got ", Describe(qkv));
}

// The attention of the heads of `qkv` into a new (B,T,C) tensor of dtype
// `compute` (qkv's own, or qkv FP8 where the kernels read it: NOTE [fp8
// attention inputs]); saves out, lse, then `inputs`.
Tensor AttendHeads(autograd::Ctx& ctx, const Tensor& qkv, int64_t n_head, double scale, DType compute,
                   const TensorList& inputs) {
  const TensorList h = HeadsOf(qkv, n_head);
  if (!IsFp8(qkv.dtype())) CheckAttentionArgs(h[0], h[1], h[2]);
  Tensor out = Empty({qkv.size(0), qkv.size(1), qkv.size(2) / 3}, {.dtype = compute, .device = qkv.device()});
  AttentionForward(ctx, h[0], h[1], h[2], scale, HeadsOfMerged(out, n_head), inputs);
  ctx.ints = {n_head};
  return out;
}

// d qkv (B,T,3C), in the output's dtype, from dout (B,T,C), with qkv as the
// forward's kernel read it.
Tensor AttendHeadsBackward(const autograd::Ctx& ctx, const char* op, const Tensor& qkv, const Tensor& dout) {
  const int64_t n_head = ctx.ints[0];
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  OCTET_CHECK(dout.dim() == 3 && dout.size(0) == B && dout.size(1) == T && dout.size(2) == C, op,
              " backward: output gradient ", Describe(dout), " is not (B,T,C) = (", B, ",", T, ",", C, ")");
  Tensor dqkv = Empty({B, T, 3 * C}, {.dtype = ctx.Saved(0).dtype(), .device = qkv.device()});
  const TensorList h = HeadsOf(qkv, n_head), d = HeadsOf(dqkv, n_head);
  AttentionBackward(ctx, h[0], h[1], h[2], HeadsOfMerged(dout, n_head), d[0], d[1], d[2]);
  return dqkv;
}

struct CausalAttentionQkvOp : autograd::Op<CausalAttentionQkvOp> {
  static constexpr const char* kName = kQkvOpName;

  static Tensor Forward(autograd::Ctx& ctx, const Tensor& qkv, int64_t n_head, double scale) {
    CheckUnscaledFloat(kQkvOpName, qkv, "qkv");
    CheckQkvShape(kQkvOpName, qkv, n_head);
    const Tensor x = qkv.detach();
    return AttendHeads(ctx, x, n_head, scale, x.dtype(), {x});
  }

  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    if (!ctx.NeedsInputGrad(0)) return {Tensor()};
    return {AttendHeadsBackward(ctx, kQkvOpName, ctx.Saved(2), dout)};
  }
};

// NOTE [fp8 attention inputs]: at O1 the attention's inputs are what the
// block keeps longest after its Linears' FP8 inputs: a (B,T,3C) tensor per
// block, held from the forward to the attention's backward. This op keeps
// its FP8 copy instead (1 byte an element instead of bf16's 2) and computes
// on exactly the values that copy holds, Dequantize(qkv, compute) —
// float(code) * scale_inv in f32, rounded to the compute dtype — in the
// forward and again in the backward: forward and backward see the same q, k
// and v, so the gradient is the gradient of the function computed. The CPU
// kernels read the codes themselves, through a table of those 256 values
// (NOTE [fp8 attention operands] in ops/cpu/attention_pack.h): the same
// bits as dequantizing first, without that pass over (B,T,3C) in each
// direction or its temporary. Elsewhere (attention_reads_fp8 false: CUDA,
// where cuDNN's bf16 kernels run) the op dequantizes into a temporary that
// lives only while the kernel runs.
struct CausalAttentionQkvFp8Op : autograd::Op<CausalAttentionQkvFp8Op> {
  static constexpr const char* kName = kQkvFp8OpName;

  // The tensor the kernels read: the codes, or their dequantized values.
  static Tensor KernelInput(const Tensor& codes, DType compute) {
    return attention_reads_fp8(codes.device())(codes.device()) ? codes : Dequantize(codes, compute);
  }

  static Tensor Forward(autograd::Ctx& ctx, const Tensor& qkv, int64_t n_head, DType compute, double scale) {
    OCTET_CHECK(IsFp8(qkv.dtype()), kQkvFp8OpName, ": qkv must be FP8 (e.g. from Quantize), got ", Describe(qkv));
    OCTET_CHECK(IsUnscaledFloat(compute), kQkvFp8OpName, ": compute dtype ", Name(compute),
                " is not float32, float64, bfloat16 or float16 (qkv ", Describe(qkv), ")");
    CheckQkvShape(kQkvFp8OpName, qkv, n_head);
    CheckPerTensorScale(kQkvFp8OpName, qkv);
    const Tensor codes = qkv.detach();
    return AttendHeads(ctx, KernelInput(codes, compute), n_head, scale, compute, {codes});
  }

  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dout) {
    if (!ctx.NeedsInputGrad(0)) return {Tensor()};
    // The gradient of an FP8 tensor is carried in the compute dtype (NOTE
    // [straight-through FP8 casts] in ops/cast.h).
    return {AttendHeadsBackward(ctx, kQkvFp8OpName, KernelInput(ctx.Saved(2), ctx.Saved(0).dtype()), dout)};
  }
};

}  // namespace

Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  CheckScale(kOpName, scale);
  return CausalAttentionOp::Apply(q, k, v, scale);
}

Tensor CausalAttentionQkv(const Tensor& qkv, int64_t n_head, double scale) {
  CheckDefined(kQkvOpName, qkv, "qkv");
  CheckScale(kQkvOpName, scale);
  return CausalAttentionQkvOp::Apply(qkv, n_head, scale);
}

Tensor CausalAttentionQkvFp8(const Tensor& qkv, int64_t n_head, DType compute, double scale) {
  CheckDefined(kQkvFp8OpName, qkv, "qkv");
  CheckScale(kQkvFp8OpName, scale);
  return CausalAttentionQkvFp8Op::Apply(qkv, n_head, compute, scale);
}

}  // namespace octet
