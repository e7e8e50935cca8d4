// The tile geometry of the vectorised CUDA cast-transpose (ops/cuda/
// cast_transpose.cu), in plain C++ with host+device functions so the CPU
// tests (tests/cuda/cast_transpose_tile_test.cc) check the index maths, the
// shared-memory swizzle and the byte transpose that the device runs.
//
// NOTE [fast cast-transpose]: one block of kCtThreads threads turns one tile
// of kCtTileRows x kCtTileCols elements of x (R, C) into FP8 in three phases:
//  1. load: each thread reads 16-byte vectors of x (kVin = 16 / sizeof(T)
//     elements), converts, updates amax (and column sums for dbias),
//     quantizes, and writes the kVin FP8 bytes into the shared byte tile;
//  2. transpose: each thread reads a 16-row x 4-column block of the tile as
//     16 words, transposes it in registers (4x4 byte transposes) and writes
//     four 16-byte vectors of yt, one per x column;
//  3. row-wise copy (when y is wanted): each thread reads 16-byte rows of
//     the tile and writes them to y.
// The shared tile is kCtTileRows rows of kCtTileCols bytes (no padding);
// 32-bit word w of row r is stored at word (w ^ CtSwizzle(r)), which keeps
// all three phases free of bank conflicts (the test proves it) and keeps
// 8- and 16-byte groups contiguous (the swizzle is a multiple of 4 words).
// Global accesses: phase 1 reads whole 128-byte lines of x per warp, phase 2
// writes 4 yt rows x 128 contiguous bytes per warp store, phase 3 writes
// 4 y rows x 128 bytes.
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

#if defined(__CUDACC__)
#define OCTET_CT_HD __host__ __device__ __forceinline__
#else
#define OCTET_CT_HD inline
#endif

namespace octet::cuda {

inline constexpr int kCtThreads = 256;
inline constexpr int kCtTileRows = 128;
inline constexpr int kCtTileCols = 128;                // elements of x = bytes of a tile row
inline constexpr int kCtRowWords = kCtTileCols / 4;    // 32 words: one per bank
inline constexpr int kCtChunkRows = 16;                // rows per 16-byte yt vector
inline constexpr int kCtRowChunks = kCtTileRows / kCtChunkRows;  // 8
inline constexpr int kCtColGroups = kCtTileCols / 4;   // 32 groups of 4 columns
static_assert(kCtRowChunks * kCtColGroups == kCtThreads, "phase 2: one thread per 16x4 block");

// The vectorised path needs R and C multiples of 16 (so every 16-byte vector
// of x, y and yt lies inside the matrix or entirely outside it) and x, y, yt
// 16-byte aligned. Everything else takes the generic kernel.
inline bool CtFastPathApplies(int64_t R, int64_t C, uintptr_t x, uintptr_t y, uintptr_t yt) {
  return R > 0 && C > 0 && R % 16 == 0 && C % 16 == 0 && x % 16 == 0 && y % 16 == 0 && yt % 16 == 0;
}

// The word-index XOR of tile row r: 4 * ((r / 16) % 8).
OCTET_CT_HD int CtSwizzle(int r) { return ((r >> 4) & 7) << 2; }
// The byte offset in the shared tile of (row r, byte column c).
OCTET_CT_HD int CtSmemByte(int r, int c) { return (r * kCtRowWords + ((c >> 2) ^ CtSwizzle(r))) * 4 + (c & 3); }

// Phase 1 for vectors of kVin elements: vectors per tile row, and the
// (row, first column) in the tile of thread `tid`'s k-th vector.
template <int kVin>
struct CtLoad {
  static constexpr int kVecPerRow = kCtTileCols / kVin;
  static constexpr int kRowStep = kCtThreads / kVecPerRow;  // rows between a thread's vectors
  static constexpr int kIters = kCtTileRows / kRowStep;
  static_assert(kCtThreads % kVecPerRow == 0 && kCtTileRows % kRowStep == 0, "phase 1 geometry");
  OCTET_CT_HD static int Row(int tid, int k) { return tid / kVecPerRow + k * kRowStep; }
  OCTET_CT_HD static int Col(int tid) { return (tid % kVecPerRow) * kVin; }
  // The group of threads that share a column set (for the dbias reduction).
  OCTET_CT_HD static int Group(int tid) { return tid / kVecPerRow; }
};

// Phase 2: thread tid reads rows [RowChunk*16, +16) of columns [ColGroup*4, +4).
// Lanes 0-7 of a warp take the 8 row chunks of one column group, so one warp
// store covers 4 yt rows of 128 contiguous bytes.
OCTET_CT_HD int CtTransposeRowChunk(int tid) { return tid & 7; }
OCTET_CT_HD int CtTransposeColGroup(int tid) { return tid >> 3; }

// Phase 3: the k-th 16-byte row vector of thread tid (8 per row, 4 rows per warp).
inline constexpr int kCtRowVecs = kCtTileCols / 16;
inline constexpr int kCtStoreIters = kCtTileRows * kCtRowVecs / kCtThreads;
OCTET_CT_HD int CtStoreRow(int tid, int k) { return tid / kCtRowVecs + k * (kCtThreads / kCtRowVecs); }
OCTET_CT_HD int CtStoreCol(int tid) { return (tid % kCtRowVecs) * 16; }

// __byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of the
// eight bytes {x, y} (x the low four). No sign-replication mode is used.
OCTET_CT_HD uint32_t CtBytePerm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

// 4x4 byte transpose: in[i] holds row i (byte j = column j); out[j] gets
// column j (byte i = row i).
OCTET_CT_HD void CtTranspose4x4(const uint32_t (&in)[4], uint32_t (&out)[4]) {
  const uint32_t t0 = CtBytePerm(in[0], in[1], 0x5140);  // a0 b0 a1 b1
  const uint32_t t1 = CtBytePerm(in[0], in[1], 0x7362);  // a2 b2 a3 b3
  const uint32_t t2 = CtBytePerm(in[2], in[3], 0x5140);  // c0 d0 c1 d1
  const uint32_t t3 = CtBytePerm(in[2], in[3], 0x7362);  // c2 d2 c3 d3
  out[0] = CtBytePerm(t0, t2, 0x5410);
  out[1] = CtBytePerm(t0, t2, 0x7632);
  out[2] = CtBytePerm(t1, t3, 0x5410);
  out[3] = CtBytePerm(t1, t3, 0x7632);
}

// Rows of x per dbias partial: the scratch buffer holds
// CtPartialRows(R, tile_rows) x C float partial column sums.
inline int64_t CtPartialRows(int64_t R, int64_t tile_rows) { return (R + tile_rows - 1) / tile_rows; }

}  // namespace octet::cuda
