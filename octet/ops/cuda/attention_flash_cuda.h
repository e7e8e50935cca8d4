// Causal attention on CUDA for float32 and float64: flash-style kernels that
// never form the T x T scores (NOTE [flash attention on CUDA] in
// ops/attention_flash.h). cuDNN's fused attention takes only bfloat16/float16
// (ops/cuda/attention_cudnn.h); the CUDA attention kernels send float32 and
// float64 calls here, and to the unfused fallback only what these kernels
// do not take (FlashAttentionUnsupportedReason).
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>

namespace octet::cuda {

// Shared memory per block, in bytes, of the three kernels for this dtype and
// head dim (D <= 128): forward, backward dK/dV pass, backward dQ pass.
struct FlashSmemBytes {
  int64_t fwd = 0, bwd_kv = 0, bwd_q = 0;
};
FlashSmemBytes FlashAttentionSmemBytes(DType dtype, int64_t head_dim);

// Why the flash kernels cannot take this call (a sentence), or nullptr.
// They take float32 and float64 with 1 <= head_dim <= 128 on a device that
// lets a block opt in to `max_smem_per_block` bytes of shared memory (an
// H100: 227 KiB; every kernel here needs at most 167 KiB). Host logic.
const char* FlashAttentionUnsupportedReason(DType dtype, int64_t head_dim, int64_t max_smem_per_block);
// The same for a call on `device` (queries its shared-memory limit).
const char* FlashAttentionUnsupportedReason(DType dtype, int64_t head_dim, const Device& device);

// Kernels with the signatures and conventions of CausalAttentionFwdFn /
// CausalAttentionBwdFn (ops/attention_kernels.h): any strides for the
// inputs; dq, dk, dv may be undefined (not wanted). Deterministic (no
// atomics). The caller has checked FlashAttentionUnsupportedReason.
void CausalAttentionFwdFlash(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                             const Tensor& lse);
void CausalAttentionBwdFlash(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                             const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace octet::cuda
