// Packing of a GEMM's B operand straight into oneDNN's blocked bf16 and f32
// weight layouts (internal to ops/cpu/; NOTE [packed weights] in
// dnnl_gemm.cc).
//
// oneDNN's brgemm bf16 kernels (VDPBF16PS) want B (K, N) as "BA16a<nb>b2a":
// blocks of kb = 32 K-rows (16 pairs) x nb N-columns; inside a block, rows
// come in pairs and the two values of a pair are adjacent (the dot-product
// instruction consumes (k, k+1) pairs):
//   offset(k, n) = (k / kb) * stride_kb + (n / nb) * stride_nb
//                + ((k % kb) / 2) * 2 * nb + (n % nb) * 2 + (k % 2)
// with K and N padded (padding must hold zeros). oneDNN's own reorder into
// this layout runs at ~31 GB/s from a row-major B and 7-15 GB/s from a
// column-major one (measured: 2.3 ms for a 2048x2048 transposed B, 12% of
// the GEMM), and it cannot read FP8 at all; this packer reads bf16 or FP8
// (converting exactly, NOTE [CPU FP8 GEMM]) in either orientation in one
// pass.
#pragma once

#include <cstdint>

#include <octet/core/dtype.h>

namespace octet::cpu {

// A blocked B layout: k_block x n_block blocks, padded, with the strides of
// the blocks. For the bf16 VNNI layout rows come in interleaved pairs (see
// above); for the f32 one ("BA16a<nb>b") a block is plain row-major:
//   offset(k, n) = (k / kb) * stride_kb + (n / nb) * stride_nb + (k % kb) * nb + n % nb.
struct PackedBLayout {
  int64_t k_padded = 0;   // multiple of k_block
  int64_t k_block = 0;    // rows per block (32 for BA16a<nb>b2a, 16 for BA16a<nb>b)
  int64_t n_padded = 0;   // multiple of n_block
  int64_t n_block = 0;    // 16, 32, 48 or 64
  int64_t stride_kb = 0;  // elements from one k_block-row block to the next
  int64_t stride_nb = 0;  // elements from one n_block-column block to the next
};

// Elements the packed buffer spans (what dst must hold).
int64_t PackedElements(const PackedBLayout& layout);

// dst = B (K, N) packed as `layout`, bf16 bits; padding zeroed. Element
// (k, n) of B is at src + (k * sk + n * sn) elements of src_dtype (bfloat16;
// fp8_e4m3 or fp8_e5m2, converted exactly; or float32, rounded to nearest
// even as FloatToBf16Bits does: NOTE [narrowed B] in dnnl_gemm.cc). Any
// strides work; sn == 1 (row-major) and sk == 1 (column-major) take the fast
// paths. Runs on the OpenMP pool.
void PackVnniB(const void* src, DType src_dtype, int64_t K, int64_t N, int64_t sk, int64_t sn,
               const PackedBLayout& layout, uint16_t* dst);

// dst = B (K, N) packed as the f32 blocked layout (k_block <= 32, n_block <=
// 64); padding zeroed. src_dtype is float32, bfloat16 or FP8 (widened
// exactly; the FP8 codes, unscaled); strides as for PackVnniB. With
// round_to_bf16 an f32 B's values are first rounded to bf16 precision (NOTE
// [narrowed B]). oneDNN's reorder does the same at ~18 GB/s here (1.0 ms for
// a 768 x 3072 B, 8 % of the GEMM it feeds).
void PackF32B(const void* src, DType src_dtype, int64_t K, int64_t N, int64_t sk, int64_t sn,
              const PackedBLayout& layout, float* dst, bool round_to_bf16 = false);

}  // namespace octet::cpu
