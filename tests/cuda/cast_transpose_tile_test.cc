// The tile geometry of the vectorised CUDA cast-transpose
// (ops/cuda/cast_transpose_tile.h), checked on the CPU: the three phases of
// one block are simulated thread by thread with the same index functions the
// kernel uses, and must produce the transpose; every shared-memory access of
// a warp is checked for bank conflicts (the number of 128-byte wavefronts a
// warp instruction needs equals the minimum for its size); the byte
// transpose is checked against a scalar transpose; the fast-path condition.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include <octet/ops/cuda/cast_transpose_tile.h>

namespace octet::cuda {
namespace {

constexpr int kTileBytes = kCtTileRows * kCtTileCols;

// Wavefronts of one warp-wide shared access: each lane touches `bytes`
// bytes at byte offset addr[lane]; a bank serves one distinct 4-byte word
// per wavefront.
int Wavefronts(const std::vector<int>& addr, int bytes) {
  std::map<int, std::set<int>> words_of_bank;
  for (int a : addr)
    for (int b = 0; b < bytes; b += 4) {
      const int word = (a + b) / 4;
      words_of_bank[word % 32].insert(word);
    }
  size_t most = 0;
  for (const auto& [bank, words] : words_of_bank) most = std::max(most, words.size());
  return static_cast<int>(most);
}
int MinWavefronts(int bytes) { return std::max(1, 32 * bytes / 128); }

uint8_t Value(int r, int c) { return static_cast<uint8_t>(r * 131 + c * 7 + 3); }

template <int kVin>
void CheckGeometry() {
  using L = CtLoad<kVin>;
  SCOPED_TRACE(::testing::Message() << "kVin=" << kVin);
  std::vector<uint8_t> smem(kTileBytes, 0);
  std::vector<int> written(kTileBytes, 0);
  // Phase 1: every element exactly once, vectors contiguous, no conflicts.
  for (int k = 0; k < L::kIters; ++k) {
    for (int warp = 0; warp < kCtThreads / 32; ++warp) {
      std::vector<int> addr;
      for (int lane = 0; lane < 32; ++lane) {
        const int tid = warp * 32 + lane;
        const int r = L::Row(tid, k), c = L::Col(tid);
        ASSERT_LT(r, kCtTileRows);
        ASSERT_LT(c + kVin - 1, kCtTileCols);
        const int base = CtSmemByte(r, c);
        ASSERT_EQ(base % kVin, 0) << "the vector store must be aligned";
        for (int j = 0; j < kVin; ++j) {
          ASSERT_EQ(CtSmemByte(r, c + j), base + j) << "a vector must stay contiguous";
          smem[base + j] = Value(r, c + j);
          ++written[base + j];
        }
        addr.push_back(base);
      }
      EXPECT_EQ(Wavefronts(addr, kVin), MinWavefronts(kVin)) << "phase 1, warp " << warp << ", k " << k;
    }
  }
  for (int b = 0; b < kTileBytes; ++b) ASSERT_EQ(written[b], 1) << "byte " << b;
  // The column groups of the dbias reduction: kRowStep groups, each thread of a
  // group has distinct columns and every (group, column) pair is owned once.
  std::set<std::pair<int, int>> owned;
  for (int tid = 0; tid < kCtThreads; ++tid)
    for (int j = 0; j < kVin; ++j) EXPECT_TRUE(owned.insert({L::Group(tid), L::Col(tid) + j}).second);
  EXPECT_EQ(owned.size(), static_cast<size_t>(L::kRowStep * kCtTileCols));

  // Phase 2: the transposed tile, 16 rows x 4 columns per thread.
  std::vector<uint8_t> yt(kTileBytes, 0);
  for (int warp = 0; warp < kCtThreads / 32; ++warp) {
    for (int i = 0; i < kCtChunkRows; ++i) {
      std::vector<int> addr;
      for (int lane = 0; lane < 32; ++lane) {
        const int tid = warp * 32 + lane;
        const int lr = CtTransposeRowChunk(tid) * kCtChunkRows + i;
        addr.push_back((lr * kCtRowWords + (CtTransposeColGroup(tid) ^ CtSwizzle(lr))) * 4);
      }
      EXPECT_EQ(Wavefronts(addr, 4), 1) << "phase 2, warp " << warp << ", row " << i;
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int tid = warp * 32 + lane;
      const int rc = CtTransposeRowChunk(tid), cg = CtTransposeColGroup(tid);
      uint32_t w[kCtChunkRows];
      for (int i = 0; i < kCtChunkRows; ++i) {
        const int lr = rc * kCtChunkRows + i;
        std::memcpy(&w[i], &smem[(lr * kCtRowWords + (cg ^ CtSwizzle(lr))) * 4], 4);
      }
      for (int m = 0; m < 4; ++m) {
        const uint32_t in[4] = {w[4 * m], w[4 * m + 1], w[4 * m + 2], w[4 * m + 3]};
        uint32_t out[4];
        CtTranspose4x4(in, out);
        for (int j = 0; j < 4; ++j) std::memcpy(&yt[(cg * 4 + j) * kCtTileRows + rc * kCtChunkRows + 4 * m], &out[j], 4);
      }
    }
  }
  for (int c = 0; c < kCtTileCols; ++c)
    for (int r = 0; r < kCtTileRows; ++r) ASSERT_EQ(yt[c * kCtTileRows + r], Value(r, c)) << "yt[" << c << "," << r << "]";

  // Phase 3: the row-wise copy, 16 contiguous bytes per thread.
  std::vector<int> covered(kTileBytes, 0);
  for (int k = 0; k < kCtStoreIters; ++k) {
    for (int warp = 0; warp < kCtThreads / 32; ++warp) {
      std::vector<int> addr;
      for (int lane = 0; lane < 32; ++lane) {
        const int tid = warp * 32 + lane;
        const int lr = CtStoreRow(tid, k), lc = CtStoreCol(tid);
        const int base = CtSmemByte(lr, lc);
        ASSERT_EQ(base % 16, 0);
        for (int j = 0; j < 16; ++j) {
          ASSERT_EQ(CtSmemByte(lr, lc + j), base + j);
          ASSERT_EQ(smem[base + j], Value(lr, lc + j));
          ++covered[lr * kCtTileCols + lc + j];
        }
        addr.push_back(base);
      }
      EXPECT_EQ(Wavefronts(addr, 16), MinWavefronts(16)) << "phase 3, warp " << warp << ", k " << k;
    }
  }
  for (int b = 0; b < kTileBytes; ++b) ASSERT_EQ(covered[b], 1);
}

TEST(CastTransposeTile, ThreePhasesTransposeWithoutBankConflictsBf16) { CheckGeometry<8>(); }
TEST(CastTransposeTile, ThreePhasesTransposeWithoutBankConflictsF32) { CheckGeometry<4>(); }
TEST(CastTransposeTile, ThreePhasesTransposeWithoutBankConflictsF64) { CheckGeometry<2>(); }

TEST(CastTransposeTile, BytePermMatchesPtxDefinition) {
  // Byte i of the result is byte selector_i of {y:x}.
  EXPECT_EQ(CtBytePerm(0x33221100u, 0x77665544u, 0x3210), 0x33221100u);
  EXPECT_EQ(CtBytePerm(0x33221100u, 0x77665544u, 0x7654), 0x77665544u);
  EXPECT_EQ(CtBytePerm(0x33221100u, 0x77665544u, 0x5140), 0x55114400u);
  EXPECT_EQ(CtBytePerm(0x33221100u, 0x77665544u, 0x0123), 0x00112233u);
}

TEST(CastTransposeTile, Transpose4x4) {
  uint32_t in[4];
  for (int i = 0; i < 4; ++i) in[i] = 0x03020100u + 0x10101010u * static_cast<uint32_t>(i);  // row i, byte j = 16i + j
  uint32_t out[4];
  CtTranspose4x4(in, out);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) EXPECT_EQ((out[j] >> (8 * i)) & 0xFF, static_cast<uint32_t>(16 * i + j)) << i << "," << j;
}

TEST(CastTransposeTile, FastPathOnlyForMultiplesOf16AndAlignedData) {
  EXPECT_TRUE(CtFastPathApplies(8192, 768, 0x1000, 0x2000, 0x3000));
  EXPECT_TRUE(CtFastPathApplies(16, 16, 0x1000, 0, 0x3000));  // y not wanted (0 is aligned)
  EXPECT_TRUE(CtFastPathApplies(48, 4096 + 16, 0x1000, 0x2000, 0x3000));
  EXPECT_FALSE(CtFastPathApplies(17, 768, 0x1000, 0x2000, 0x3000));
  EXPECT_FALSE(CtFastPathApplies(16, 770, 0x1000, 0x2000, 0x3000));
  EXPECT_FALSE(CtFastPathApplies(1, 1, 0x1000, 0x2000, 0x3000));
  EXPECT_FALSE(CtFastPathApplies(0, 16, 0x1000, 0x2000, 0x3000));
  EXPECT_FALSE(CtFastPathApplies(16, 16, 0x1008, 0x2000, 0x3000));
  EXPECT_FALSE(CtFastPathApplies(16, 16, 0x1000, 0x2001, 0x3000));
  EXPECT_FALSE(CtFastPathApplies(16, 16, 0x1000, 0x2000, 0x3004));
  EXPECT_EQ(CtPartialRows(8192, kCtTileRows), 64);
  EXPECT_EQ(CtPartialRows(8193, kCtTileRows), 65);
  EXPECT_EQ(CtPartialRows(0, 32), 0);
}

}  // namespace
}  // namespace octet::cuda
