// Causal scaled dot-product attention (the attention of a GPT block).
//
// Dimension letters: B batch, H heads, T sequence length, D head size.
#pragma once

#include <octet/core/tensor.h>

namespace octet {

// out[b,h,t,:] = sum_{s<=t} softmax_s(scale * q[b,h,t,:] . k[b,h,s,:]) v[b,h,s,:]
//
// q, k, v: (B,H,T,D), all the same shape, dtype and device. Any strides are
// accepted without a copy, e.g. the q/k/v slices of a fused (B,T,3,H,D)
// projection permuted to (3,B,H,T,D). Dtypes: float32, float64, bfloat16,
// float16 (bf16/f16 compute in f32; f64 in f64). FP8 inputs are rejected
// (dequantize first). scale: 0 means 1/sqrt(D).
//
// Returns (B,H,T,D), contiguous, the inputs' dtype. Differentiable in q, k
// and v. The CPU kernel is fused (see NOTE [flash attention on CPU] in
// ops/cpu/attention_cpu.cc): it never forms the T x T score matrix, keeps
// the per-row log-sum-exp for backward, and its backward is deterministic
// (the same bits for any thread count). On CUDA, bfloat16/float16 run cuDNN's
// fused attention and float32/float64 octet's flash kernels (NOTE [flash
// attention on CUDA] in ops/attention_flash.h), also without the T x T matrix.
//
// Errors (octet::Error naming the op and the shapes/dtypes): rank != 4,
// shapes of q, k, v differ, dtypes or devices differ, non-float or FP8 dtype,
// D == 0, a scale that is not finite or |scale| > 1.7e38 (half of float32's
// max; 0 picks 1 / sqrt(D)).
Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale = 0.0);

// CausalAttention on the heads of a fused projection, with the heads of the
// result side by side: for qkv (B,T,3C) with C = n_head * D, q, k and v are
// its last dim's three C-wide slices, each split into n_head heads of D
// consecutive columns, and the result (B,T,C) holds head h's output in
// columns h*D..h*D+D-1, i.e.
//   CausalAttention(q, k, v, scale).Permute({0, 2, 1, 3}).Reshape({B, T, C})
// with q = qkv.Reshape({B,T,3,n_head,D}).Permute({2,0,3,1,4}).Select(0, 0)
// (k, v: Select 1, 2), the same values, without the copies that chain makes
// (the result and qkv's gradient are written in place; NOTE [attention in
// the qkv layout] in ops/attention.cc). Differentiable in qkv; dtypes and
// devices as CausalAttention.
// Errors (octet::Error naming the op): qkv not of rank 3, a last dim that is
// not 3 * n_head * D with D >= 1, n_head < 1, dtypes as CausalAttention.
Tensor CausalAttentionQkv(const Tensor& qkv, int64_t n_head, double scale = 0.0);

// CausalAttentionQkv of an FP8 qkv: q, k and v are the values its codes
// hold, Dequantize(qkv, compute), and the result is
//   CausalAttentionQkv(Dequantize(qkv, compute), n_head, scale)
// bit for bit, but only qkv's FP8 bytes are kept for backward, which
// dequantizes them again (NOTE [fp8 attention inputs] in ops/attention.cc:
// what amp level O1 saves of the attention). qkv: (B,T,3C) FP8 (E4M3 or
// E5M2) with a per-tensor scale (e.g. from Quantize) or none (scale_inv 1);
// compute: float32, float64, bfloat16 or float16, the dtype of the result
// and of qkv's gradient (NOTE [straight-through FP8 casts] in ops/cast.h).
// Errors (octet::Error naming the op): qkv not FP8, a compute dtype that is
// not one of those four, a scale that is not per-tensor, shapes as
// CausalAttentionQkv.
Tensor CausalAttentionQkvFp8(const Tensor& qkv, int64_t n_head, DType compute, double scale = 0.0);

}  // namespace octet
