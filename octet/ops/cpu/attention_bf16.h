// The fused CPU attention on BF16 dot products (internal to
// ops/cpu/attention_cpu.cc, which calls it for bfloat16 outputs under
// internal::AttentionIsa::kAvx512Bf16).
//
// NOTE [bf16 attention tiles]
// The algorithm, the work items and their order are those of NOTE [flash
// attention on CPU] (attention_cpu.cc); what changes is the arithmetic of
// the seven products per tile pair. Their operands are bfloat16 and
// VDPBF16PS multiplies pairs of them into f32 accumulators: on CPUs where
// it does twice the flops of an FP32 FMA (AMD Zen 4/5), the products take
// half the instructions of the f32 tiles, which widen everything first.
//   - q, k, v, dO are bf16 already (or FP8 codes, read through a table of
//     their bf16 values: NOTE [fp8 attention operands]), so S = QKᵀ, dP =
//     dO Vᵀ are exact products summed in f32, as in the f32 tiles. The
//     softmax scale is applied to the f32 scores, not folded into q (that
//     would round q).
//   - P (forward: into O += P V; backward: into dV += Pᵀ dO) and dS (into
//     dK and dQ) are rounded to bf16 (round to nearest even) before their
//     products, as GPU flash attention does; the row sums l and the
//     statistics stay f32. This is the one numerical difference from the
//     f32 tiles: a relative error of at most 2^-9 per weight.
//   - VDPBF16PS and VCVTNEPS2BF16 treat bf16 subnormals (|x| < 1.2e-38) as
//     zero.
// A dot product takes its operands in pairs along the contracted index:
// the left operand is read as 32-bit pairs broadcast to every lane (rows
// whose contracted index is contiguous: K, V, Pᵀ, dSᵀ rows; or P and dS
// written pair-interleaved by the softmax pass), the right one as "pair
// rows" [n/2][w][2], built once per head while packing (Qᵀ and dOᵀ
// transposed in 32-bit pairs; V, dO, Q and K with row pairs interleaved;
// layouts in attention_bf16_tiles.h). Odd lengths are padded with zeros on
// both sides.
// Where heads do not fill the threads the forward packs every head first
// (its tiles in parallel) and then runs (head, query tile) items, as the
// backward's two-pass path does, instead of converting key tiles per item.
// Results are deterministic in the same sense as the f32 tiles: the same
// bits whatever the thread count or the path taken.
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>

namespace octet::cpu::attn {

// TIn: bfloat16, or Fp8Code (then lut holds the bf16 bits of each code's
// value, NOTE [fp8 attention operands]; else null). out and the gradients
// are bfloat16, lse f32. Only call where the CPU has AVX-512 BF16.
template <typename TIn>
void ForwardBf16Dot(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                    const Tensor& lse, const uint16_t* lut);
template <typename TIn>
void BackwardBf16Dot(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                     const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                     const uint16_t* lut);

}  // namespace octet::cpu::attn
