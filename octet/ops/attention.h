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
// D == 0.
Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale = 0.0);

}  // namespace octet
