// Kernel signatures of the attention family (internal: shared by
// ops/attention.cc, the backends and the tests). Arguments are already
// checked: same shapes (B,H,T,D), same dtype, T >= 1, D >= 1.
#pragma once

#include <optional>

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// The dtype of the saved log-sum-exp for an output (compute) dtype: float64
// for float64, else float32.
DType AttentionLseDtype(DType input);

// q, k, v: (B,H,T,D) any strides. out: (B,H,T,D) any strides (distinct
// elements), q's dtype: e.g. the heads of a (B,T,H*D) tensor, NOTE
// [attention in the qkv layout] in ops/attention.cc.
// lse: (B,H,T) contiguous, AttentionLseDtype of out's dtype; natural log of
// the softmax denominator of each query row, scores already multiplied by
// scale.
// Where attention_reads_fp8(device) says so, q, k and v may instead be FP8
// (one FP8 dtype and one per-tensor scale, or none: the heads of one FP8
// qkv) with out (and, in backward, dout, dq, dk, dv) in a float compute
// dtype: each code is read as the value Dequantize(x, out's dtype) gives it
// (NOTE [fp8 attention inputs] in ops/attention.cc).
using CausalAttentionFwdFn = void(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                                  const Tensor& lse);

// q, k, v, dout: (B,H,T,D) any strides. out, lse: as written by the forward.
// dq, dk, dv: (B,H,T,D) any strides (distinct elements, not overlapping one
// another), out's dtype, or undefined when that gradient is not wanted.
// Deterministic.
using CausalAttentionBwdFn = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& dout, const Tensor& lse, double scale, const Tensor& dq,
                                  const Tensor& dk, const Tensor& dv);

// Whether the kernels on `device` read FP8 q, k, v (above); where not, the
// op dequantizes them first.
using AttentionReadsFp8Fn = bool(Device device);

OCTET_DECLARE_KERNEL(causal_attention_fwd, CausalAttentionFwdFn);
OCTET_DECLARE_KERNEL(causal_attention_bwd, CausalAttentionBwdFn);
OCTET_DECLARE_KERNEL(attention_reads_fp8, AttentionReadsFp8Fn);

namespace internal {

// Which instruction set the CPU attention kernels use. kAvx512 is used only
// when the row converters may use AVX-512 (so OCTET_DISABLE_AVX512 turns it
// off too, see core/convert.h). kAvx512Bf16 is kAvx512 plus BF16 dot
// products for bfloat16 attention (NOTE [bf16 attention tiles] in
// ops/cpu/attention_bf16.h); it is the default only where the CPU GEMMs
// compute in BF16 too and VDPBF16PS itself beats the FMA, or OCTET_CPU_GEMM
// forces BF16 (CpuGemmPathInfo::bf16_dot_kernels, ops/cpu_gemm_path.h), and
// other dtypes run the kAvx512 tiles under it. kAmxBf16 is kAvx512Bf16 with
// the tiles' products on AMX (NOTE [amx attention products] in
// ops/cpu/attention_bf16_tiles.h): the default for bfloat16 attention where
// the CPU has AMX, Linux grants it and the GEMMs run on BF16 too.
enum class AttentionIsa { kGeneric, kAvx2, kAvx512, kAvx512Bf16, kAmxBf16 };
const char* Name(AttentionIsa isa);
// The best instruction set this CPU supports (ignoring the testing override).
AttentionIsa DetectedAttentionIsa();
// What the kernels use now.
AttentionIsa ActiveAttentionIsa();
// For tests and benchmarks: use `isa` (clamped to DetectedAttentionIsa()),
// or the default choice again with nullopt. Not thread-safe with respect to
// running kernels.
void SetAttentionIsaForTesting(std::optional<AttentionIsa> isa);

}  // namespace internal
}  // namespace octet
