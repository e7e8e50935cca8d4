// Causal attention from unfused ops: the fallback of the CUDA backend when
// cuDNN's fused attention cannot run a call (ops/cuda/attention_cudnn.h).
//
// NOTE [unfused attention]: the same contract as the causal_attention_fwd /
// _bwd kernels (ops/attention_kernels.h: out, and the natural-log
// log-sum-exp per query row that the backward reads), computed with ordinary
// device-dispatched ops, so on CUDA every step is a cuBLASLt GEMM or a CUDA
// kernel and on the CPU the very same code runs on the CPU kernels (which is
// how it is tested here):
//   forward   S = scale·Q·Kᵀ, causal mask (key s > query t -> -inf),
//             m = rowmax(S), lse = m + log(rowsum(exp(S - m))),
//             O = exp(S - lse)·V
//   backward  P = exp(scale·Q·Kᵀ (masked) - lse), dV = Pᵀ·dO,
//             dS = P∘(dO·Vᵀ - rowsum(dO∘O)), dQ = scale·dS·K,
//             dK = scale·dSᵀ·Q
// Everything is computed in float32 (float64 for float64 inputs) and rounded
// once into the outputs. It materialises the (B,H,T,T) scores (float32): the
// memory is O(B·H·T²), where the fused kernels need O(B·H·T). Deterministic:
// no atomics, fixed reduction orders.
#pragma once

#include <octet/core/tensor.h>

namespace octet {

// Signatures and argument conventions of CausalAttentionFwdFn /
// CausalAttentionBwdFn (ops/attention_kernels.h); arguments are not checked
// again. dq, dk, dv may be undefined (not wanted).
void CausalAttentionFwdUnfused(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                               const Tensor& lse);
void CausalAttentionBwdUnfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& dout, const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv);

}  // namespace octet
