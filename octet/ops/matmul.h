// The matmul family: matrix products with NumPy semantics, the Linear layer
// product, and the FP8 x FP8 scaled GEMM.
//
// Dtypes: float32 and bfloat16 run on oneDNN on the CPU (bf16 inputs, f32
// accumulation, bf16 output); float64 on octet's own blocked kernel
// (accumulation in f64, for gradcheck); float16 is computed in float32 and
// rounded once. FP8 operands carry scales and only ScaledMatmul takes them.
//
// Strided inputs: transposed and sliced views (a unit stride in one of the
// two matrix dims, the other at least the row length) are read in place;
// other layouts are copied once. Broadcast batch dims (expanded, stride 0) are
// never materialised.
//
// Errors (octet::Error naming the op and the shapes/dtypes): a rank-0
// operand, mismatched inner dims, batch dims that do not broadcast, a dtype
// mismatch (e.g. float32 x bfloat16), an FP8 operand outside ScaledMatmul,
// integer operands, tensors on different devices, and (ScaledMatmul)
// E5M2 x E5M2, non-FP8 operands, an out_dtype other than float32/bfloat16.
#pragma once

#include <optional>

#include <octet/core/float8.h>
#include <octet/core/tensor.h>
#include <octet/ops/gemm_role.h>

namespace octet {

// NumPy matmul.
//   a (..., M, K) x b (..., K, N) -> (broadcast(...), M, N); batch dims
//   broadcast like pointwise ops.
//   a 1-D (K): treated as (1, K), that dim removed from the result.
//   b 1-D (K): treated as (K, 1), that dim removed from the result.
//   a and b 1-D: the dot product, shape [].
// Differentiable in a and b (da = dc·bᵀ, db = aᵀ·dc, summed over broadcast
// batch dims).
Tensor Matmul(const Tensor& a, const Tensor& b);

// y = x · weightᵀ + bias, one GEMM with the bias fused.
//   x (..., K), weight (N, K), bias (N) or undefined -> y (..., N).
// x, weight, bias have one dtype (f32/f64/bf16/f16) and device.
// Differentiable in x, weight and bias: dx = dy·weight and
// dweight = dyᵀ·x are GEMMs, dbias a column sum of dy.
Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Gelu(Linear(x, weight, bias)) as one op (the first layer of an MLP): the
// GEMM also writes the pre-activation, which is what backward keeps (the
// same memory as Linear followed by Gelu). On CUDA, a 2-D product with a
// bias in the output's dtype and N a multiple of 8 runs the GELU in
// cuBLASLt's GELU_AUX_BIAS epilogue, saving a pass over the (..., N) result
// (NOTE [gelu epilogue] in ops/matmul_kernels.h); elsewhere it is the GEMM
// followed by the GELU kernel, bit-identical to Gelu(Linear(...)).
// Arguments and errors as Linear; differentiable in x, weight and bias.
Tensor LinearGelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Linear(x.To(compute), weight.To(compute), bias.To(compute)) — or, with
// `gelu`, LinearGelu of them — as one op: an amp layer whose parameters stay
// in a master dtype (float32) while it computes in another (bfloat16 at O2).
// The output is bit-identical to that composition. NOTE [cast linear]: with
// a bfloat16 compute dtype and a float32 weight, on a device whose GEMM
// takes mixed operands (the CPU), no bf16 copy of the weight is made: the
// GEMMs round the f32 weight as they pack it (the same values the cast
// gives), backward keeps the f32 weight itself, and the weight gradient is
// the GEMM's f32 accumulator, not rounded to bfloat16 and widened again as
// the composition's is (so it can differ from it, by that one rounding, in
// the direction of the exact value). dx and dbias are the composition's
// (computed in `compute`, cast to x's and bias's dtypes); on other devices
// (CUDA) so is dweight. x, weight, bias: float dtypes (not FP8), one device,
// shapes as Linear; compute: float32, float64, bfloat16 or float16.
// Differentiable in x, weight and bias.
Tensor CastLinear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType compute, bool gelu = false);

// FP8 x FP8 GEMM with per-tensor scales, as cuBLASLt runs it (CUDA_NOTES §1):
//   out = (a_fp8 · b_fp8) * (scale_inv_a * scale_inv_b) + bias
// computed with exact products and float32 accumulation. On the CPU every
// FP8 value is converted exactly to bfloat16 while packing and a oneDNN
// bf16 GEMM with f32 accumulation runs on the result; the scale is applied to
// the f32 accumulator, then bias (in f32), then the rounding to out_dtype.
//   a_fp8 (..., M, K), b_fp8 (..., K, N): FP8 (E4M3 x E4M3, E4M3 x E5M2 or
//   E5M2 x E4M3; E5M2 x E5M2 is rejected, as cuBLASLt has no kernel for it),
//   any strides, NumPy batch broadcasting as Matmul (both at least 2-D).
//   out_dtype: float32 or bfloat16. bias: (N) float32 or bfloat16, or
//   undefined.
// Not differentiable itself: the amp layer composes it with Quantize into
// FP8 Linear forward/backward GEMMs (dgrad = dY(E5M2)·W(E4M3), wgrad =
// dYᵀ·X), so the output never requires grad.
// role: which GEMM of a Linear this is. On CUDA the forward GEMM (kFprop)
// runs with cuBLASLt's FAST_ACCUM (Transformer Engine's choice: fprop
// tolerates the coarser split accumulation, the gradient GEMMs do not); the
// CPU result does not depend on it.
// gelu_pre: when non-null, the result goes through Gelu and *gelu_pre
// receives the pre-activation (out_dtype, the result's shape; NOTE [gelu
// epilogue] in ops/matmul_kernels.h: on CUDA an epilogue when the bias is
// bfloat16).
Tensor ScaledMatmul(const Tensor& a_fp8, const Tensor& b_fp8, DType out_dtype, const Tensor& bias = Tensor(),
                    GemmRole role = GemmRole::kGeneral, Tensor* gelu_pre = nullptr);

// True when FP8 GEMMs on `device` read both operands K-contiguous only
// ("TN", NOTE [FP8 TN rule] in ops/gemm_layout.h): CUDA devices of compute
// capability 8.9, 9.0 and 12.x; false on the CPU, which reads any layout.
// Callers need not ask: QuantizeForGemm and ScaledMatmul act on it (NOTE
// [fp8 column-wise data] in core/scaling.h).
bool Fp8GemmWantsTransposedCopies(Device device);

// Whether GEMMs on `device` run a GELU in their epilogue (cuBLASLt's
// GELU_AUX(_BIAS) on CUDA; the CPU applies it as a pass after the GEMM), so
// a layer can decide whether fusing Linear + GELU saves a pass.
bool GemmEpilogueRunsGelu(Device device);

// Quantize (ops/cast.h) for a matrix that FP8 GEMMs will read as it is and,
// when `columnwise`, also transposed (the FP8 Linear: X in fprop and Xᵀ in
// wgrad; W in fprop and dgrad). Where FP8 GEMMs want it
// (Fp8GemmWantsTransposedCopies), the cast also writes the transposed copy
// in the same pass (CastTranspose) and the result carries it in its scale
// metadata (NOTE [fp8 column-wise data]); ScaledMatmul then reads whichever
// of the two layouts its backend wants, for q and for q.T(). Elsewhere this
// is Quantize. x: 2-D (R, C) when columnwise, else any shape; other
// arguments and errors as Quantize.
// dbias: when not null, *dbias receives the float32 column sums (C) of x from
// the same pass (a Linear's bias gradient when x is its output gradient):
// CastTransposeWithBiasGrad (ops/cast.h) where the transposed copy is made,
// QuantizeWithBiasGrad where FP8 GEMMs want no transposed copies (the CPU;
// 2-D x). Otherwise (a device that wants copies but columnwise is false, or
// x not 2-D) *dbias is reset to undefined and the caller sums x itself.
Tensor QuantizeForGemm(const Tensor& x, DType fp8, const Tensor& scale, bool columnwise,
                       Fp8Saturation sat = Fp8Saturation::kSatFinite, Tensor* dbias = nullptr);
// QuantizeForGemm(..., columnwise = true) for a matrix that is already FP8
// (LayerNormFp8's output, NOTE [layer norm to fp8] in ops/norm.cc): where
// FP8 GEMMs want it (Fp8GemmWantsTransposedCopies), q's bytes with the
// column-wise copy made by TransposeFp8 (ops/cast.h: a byte transpose, the
// same scale) in their metadata; elsewhere, or when q already carries its
// copy, q itself. q's own metadata is not modified. The result does not
// require grad (a forward-pass helper of the FP8 Linear).
//   q: (R, C) FP8 with per-tensor scale metadata. Errors: q not FP8, without
//   scale metadata, or not 2-D.
Tensor WithColumnwiseForGemm(const Tensor& q);
// The same logical matrix as q, stored as the transposed use wants it: the
// column-wise copy viewed as (R, C) (strides (1, R)) when q carries one,
// else q. Lets a caller keep only the bytes a later GEMM on q.T() reads
// (the FP8 Linear's saved activation).
Tensor ForTransposedUse(const Tensor& q);

}  // namespace octet
