// The products of the CPU attention on AMX tiles (NOTE [amx attention
// products] in attention_bf16_tiles.h): AmxDot, the drop-in for the
// dot-product tiles' Dot.
#include <octet/ops/cpu/attention_bf16_tiles.h>
#include <octet/ops/cpu/amx_tiles.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace octet::cpu::attn {
namespace {

// Rows of every tile; pairs in a row of A (64 bytes); f32 columns of a C tile.
constexpr int64_t kT = 16;

int64_t RoundUp16(int64_t x) { return (x + kT - 1) / kT * kT; }

// Per-thread scratch: a as rows of contiguous pairs, b's last pair block
// zero padded, and C blocks of a partial row block.
struct Scratch {
  std::vector<uint32_t> a, b;
  alignas(64) float c[2][kT * kT];
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// dst (mr x kp pairs) = a's pairs (r, p) for p < np, zero for p >= np; a
// pair (r, p) at a32[r * ars + p * acs].
OCTET_AMX_TARGET void RowsOfPairs(const uint32_t* a32, int64_t ars, int64_t acs, int64_t np, int64_t mr, int64_t kp,
                                  uint32_t* dst) {
  if (acs == 1) {
    for (int64_t r = 0; r < mr; ++r) {
      std::memcpy(dst + r * kp, a32 + r * ars, static_cast<size_t>(np) * sizeof(uint32_t));
      std::fill(dst + r * kp + np, dst + (r + 1) * kp, 0u);
    }
    return;
  }
  if (ars == 1) {  // column-major pairs (P, dS): 16 x 16 blocks through registers (NOTE [pair transpose])
    TransposeEpi32Blocks(a32, acs, kp, np, mr, dst, kp);
    return;
  }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t p = 0; p < kp; ++p) dst[r * kp + p] = p < np ? a32[r * ars + p * acs] : 0u;
}

}  // namespace

OCTET_AMX_TARGET void AmxDot(bool accumulate, const uint16_t* a, int64_t ars, int64_t acs, int64_t np,
                             const uint16_t* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t w, Tri tri) {
  if (m <= 0 || w <= 0) return;
  Scratch& s = ThreadScratch();
  const int64_t kp = RoundUp16(np), mr = RoundUp16(m);
  const uint32_t* a32 = reinterpret_cast<const uint32_t*>(a);
  const uint32_t* b32 = reinterpret_cast<const uint32_t*>(b);
  // A: rows of kp contiguous pairs (in place where it already is).
  const uint32_t* ap = a32;
  int64_t lda = ars;
  if (acs != 1 || kp != np) {
    s.a.resize(static_cast<size_t>(mr * kp));
    RowsOfPairs(a32, ars, acs, np, mr, kp, s.a.data());
    ap = s.a.data();
    lda = kp;
  }
  // B's last pair block, zero padded past np (w columns a row).
  const int64_t b_tail = np % kT == 0 ? kp : kp - kT;
  if (b_tail < kp) {
    s.b.assign(static_cast<size_t>(kT * w), 0u);
    for (int64_t p = b_tail; p < np; ++p)
      std::memcpy(s.b.data() + (p - b_tail) * w, b32 + p * ldb, static_cast<size_t>(w) * sizeof(uint32_t));
  }
  // Tiles as FullTiles() configures them: tmm0-1 C (two column blocks),
  // tmm4 A, tmm6-7 B.
  const TileConfig& config = FullTiles();
  asm volatile("" : : "r"(&config), "r"(ap), "r"(s.b.data()) : "memory");  // the tile loads read memory
  _tile_loadconfig(&config);
  for (int64_t r0 = 0; r0 < m; r0 += kT) {
    const int64_t rows = std::min(kT, m - r0);
    const bool full = rows == kT;
    const int64_t col0 = tri == Tri::kColsFromRow ? r0 : 0;
    const int64_t p0 = tri == Tri::kContractFromRow ? std::min(r0 / 2, np) / kT * kT : 0;
    const int64_t p1 = tri == Tri::kContractToRow ? RoundUp16(std::min(np, (r0 + kT + 1) / 2)) : kp;
    for (int64_t c0 = col0; c0 < w; c0 += 2 * kT) {
      const bool two = c0 + kT < w;
      float* cr = c + r0 * ldc + c0;
      // C in: the output rows themselves, or a zero-padded copy of a partial block.
      if (!accumulate) {
        _tile_zero(0);
        _tile_zero(1);
      } else if (full) {
        _tile_loadd(0, cr, ldc * 4);
        if (two) _tile_loadd(1, cr + kT, ldc * 4);
      } else {
        for (int h = 0; h < (two ? 2 : 1); ++h) {
          std::fill(s.c[h], s.c[h] + kT * kT, 0.0f);
          for (int64_t r = 0; r < rows; ++r) std::memcpy(s.c[h] + r * kT, cr + r * ldc + h * kT, kT * sizeof(float));
        }
        asm volatile("" : : "r"(s.c) : "memory");
        _tile_loadd(0, s.c[0], kT * 4);
        if (two) _tile_loadd(1, s.c[1], kT * 4);
      }
      for (int64_t pb = p0; pb < p1; pb += kT) {
        _tile_loadd(4, ap + r0 * lda + pb, lda * 4);
        const uint32_t* bp = pb < b_tail ? b32 + pb * ldb + c0 : s.b.data() + c0;
        const int64_t bstride = (pb < b_tail ? ldb : w) * 4;
        _tile_loadd(6, bp, bstride);
        _tile_dpbf16ps(0, 4, 6);
        if (two) {
          _tile_loadd(7, bp + kT, bstride);
          _tile_dpbf16ps(1, 4, 7);
        }
      }
      if (full) {
        _tile_stored(0, cr, ldc * 4);
        if (two) _tile_stored(1, cr + kT, ldc * 4);
      } else {
        _tile_stored(0, s.c[0], kT * 4);
        if (two) _tile_stored(1, s.c[1], kT * 4);
        for (int h = 0; h < (two ? 2 : 1); ++h)
          for (int64_t r = 0; r < rows; ++r) std::memcpy(cr + r * ldc + h * kT, s.c[h] + r * kT, kT * sizeof(float));
      }
    }
  }
  _tile_release();
}

}  // namespace octet::cpu::attn

#endif  // __x86_64__
