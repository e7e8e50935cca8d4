// Tile functions and packers of the CPU attention on BF16 dot products
// (internal to ops/cpu/attention_bf16.cc, the drivers, and
// attention_bf16_tiles.cc, their AVX-512 BF16 code): see NOTE [bf16
// attention tiles] in attention_bf16.h. x86-64 only; call them only where
// the CPU has AVX-512 BF16.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <octet/core/bfloat16.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/attention_pack.h>
#include <octet/ops/cpu/attention_simd.h>
#include <octet/ops/cpu/transpose16x16.h>
#include <octet/ops/cpu/attention_tiles.h>

// Declarations carry the definitions' target attribute (GCC would take a
// mismatch for a second version of the function).
#define OCTET_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#define OCTET_AMX_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,amx-tile,amx-bf16")))

namespace octet::cpu::attn {

// Dp: the head size rounded up to 64 bytes of bf16.
inline constexpr int64_t kBf16Pad = 32;

// Packing. Every layout of one head is a block of Tp x Dp bf16 (Tp = nt *
// kTile rows, zero padded), and tile `tile` starts at tile * kTile * Dp in
// each:
//   rows       element (t, d) at t*Dp + d                     (K, V)
//   pair rows  pair (t/2, d) holds rows t, t+1 of column d     (V, dO, Q, K)
//   pairs^T    per tile: pair (d/2, i) holds columns d, d+1 of row i (Qᵀ, dOᵀ)

template <typename TIn>
OCTET_INLINE uint16_t Bits(const TIn& x, const uint16_t* lut) {
  if constexpr (std::is_same_v<TIn, Fp8Code>) {
    return lut[x.bits];
  } else {
    return x.bits;
  }
}

// dst (kTile x dp): rows [0, n) of bf16 src (row stride rs, unit column
// stride, d columns), zero elsewhere: masked 64-byte loads and stores.
OCTET_BF16_TARGET void CopyTile(const uint16_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp, uint16_t* dst);

// CopyTile for FP8 codes: each code's bf16 bits from the 256-entry lut, 32
// at a time (four 64-entry VPERMI2W lookups, blended by the code's top two
// bits).
OCTET_BF16_TARGET void LookupTile(const uint8_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp,
                                  const uint16_t* lut, uint16_t* dst);

// dst (kTile x dp): rows [0, n) of src (row stride rs, column stride cs, d
// columns) as bf16 bits, zero elsewhere.
template <typename TIn>
void PlainTile(const TIn* src, int64_t rs, int64_t cs, int64_t n, int64_t d, int64_t dp, const uint16_t* lut,
               uint16_t* dst) {
  if (cs == 1) {
    if constexpr (std::is_same_v<TIn, bfloat16>)
      return CopyTile(reinterpret_cast<const uint16_t*>(src), rs, n, d, dp, dst);
    if constexpr (std::is_same_v<TIn, Fp8Code>)
      return LookupTile(reinterpret_cast<const uint8_t*>(src), rs, n, d, dp, lut, dst);
  }
  for (int64_t r = 0; r < n; ++r) {
    const TIn* s = src + r * rs;
    uint16_t* o = dst + r * dp;
    for (int64_t c = 0; c < d; ++c) o[c] = Bits(s[c * cs], lut);
    std::fill(o + d, o + dp, uint16_t{0});
  }
  std::fill(dst + n * dp, dst + kTile * dp, uint16_t{0});
}

// out (kTile/2 pair rows x dp): rows 2r and 2r+1 of plain (kTile x dp) interleaved.
OCTET_BF16_TARGET void InterleaveRowPairs(const uint16_t* plain, int64_t dp, uint16_t* out);

// out (dp/2 pair rows x kTile): the 32-bit pairs of plain (kTile x dp) transposed.
OCTET_BF16_TARGET void TransposePairs(const uint16_t* plain, int64_t dp, uint16_t* out);


// NOTE [bf16 row stores]: rows [0, rows) of src (f32, row stride sp, d
// columns) times mul (row r times row_mul[r] where given) into rows t0..
// of head bh of out, each rounded as FloatToBf16Bits rounds: StoreRows'
// values, in one pass of AVX-512 BF16 narrowing (FloatToBf16x32Native) per
// row where out's columns are contiguous, and through StoreRows where they
// are not. StoreRows scales a chunk in the baseline build's 32-byte stores
// and hands it to the row converter, whose 64-byte loads of it then wait
// for both stores (a store forwarding stall: 69 % of FloatToBf16Native's
// samples fell on its first load in the bf16 attention's backward, where it
// was 15 % of the time).
OCTET_BF16_TARGET void StoreRowsBf16(const float* src, int64_t sp, int64_t rows, int64_t d, float mul,
                                     const OutOperand<bfloat16>& out, int64_t bh, int64_t t0,
                                     const float* row_mul = nullptr);

// ---------------------------------------------------------------------------
// NOTE [amx attention products]: on CPUs with AMX (Intel Xeons since
// Sapphire Rapids) the seven products of a tile pair run on AMX tiles
// (TDPBF16PS: a 16 x 32 BF16 tile times a 32 x 16 one into 16 x 16 f32)
// instead of VDPBF16PS, which there runs at half the FP32 FMA rate while the
// tiles run at ~15x it. Everything else (packing, softmax, P and dS rounded
// to bf16, the statistics) is the dot-product tiles' code, so the results
// are those of NOTE [bf16 attention tiles] up to the order of the f32 sums.
// AmxDot computes exactly what the dot-product tiles' Dot computes (the
// attention_bf16_tiles.cc comment above Dot): for r < m rows and w columns
// (a multiple of 16),
//   c[r*ldc + col] (+)= sum_{p < np} dot(a pair (r, p), b pair (p, col)),
// a pair at a + 2*(r*ars + p*acs), b pairs rows at b + 2*(p*ldb): b's pair
// rows are AMX's B layout already; a is read as rows of contiguous pairs
// (acs == 1) in place, or transposed into a scratch block first (ars == 1:
// P and dS, written pair-interleaved by the softmax pass), 16 x 16 pairs
// at a time in registers. Rows of a past m are read (a must hold
// round_up(m, 16) rows: every caller's is a kTile-row tile) but their
// results are discarded; pairs past np are read as zeros. Tri skips work
// at 16-row granularity; the skipped terms are the causally masked zeros,
// so a few more of them may be summed than Dot sums. The tile
// configuration is loaded at every call (oneDNN's AMX kernels on the same
// thread load their own in between) and released at its end, so no thread
// keeps AMX state between calls (measured: the release costs nothing the
// noise shows, octet_attention_bench isa:4).
OCTET_AMX_TARGET void AmxDot(bool accumulate, const uint16_t* a, int64_t ars, int64_t acs, int64_t np,
                             const uint16_t* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t w, Tri tri);

// ---------------------------------------------------------------------------
// Tile pairs: the products and softmax of one (query tile, key tile) pair.

struct FwdPairTile {
  bool amx;            // products on AMX tiles (AmxDot) instead of VDPBF16PS
  const uint16_t* k;   // keys (kn x Dp rows)
  const uint16_t* qv;  // Qᵀ of the query tile (pairs^T)
  const uint16_t* vv;  // V of the key tile (pair rows)
  int64_t dp, qn, kn;
  bool diagonal;
  float c;             // scale * log2(e)
  float* st;           // (kTile, kTile) scores, keys x queries
  uint16_t* pv;        // (kTile/2, kTile) pairs: P, two keys per pair
  float* o;            // (kTile, Dp) unnormalised output rows
  float* m;            // (kTile) running max, log2 domain
  float* l;            // (kTile) running sum
};

// One online-softmax step: updates m, l and o.
OCTET_BF16_TARGET void FwdPairTileFn(const FwdPairTile& t);

struct BwdPairTile {
  bool amx;                  // products on AMX tiles (AmxDot) instead of VDPBF16PS
  const uint16_t *k, *v;     // keys and values of the key tile (rows)
  const uint16_t *qv, *dov;  // Qᵀ and dOᵀ of the query tile (pairs^T)
  const uint16_t *qp, *dop;  // Q and dO of the query tile (pair rows)
  const uint16_t* kp;        // K of the key tile (pair rows)
  const float* lse2;         // (kTile) log-sum-exp * log2(e); +inf past qn
  const float* di;           // (kTile) rowsum(dO o O); 0 past qn
  int64_t dp, qn, kn;
  bool diagonal;
  float c;                   // scale * log2(e)
  float *st, *dst;           // (kTile, kTile) f32: S^T, dP^T
  uint16_t *pt, *dst16;      // (kTile, kTile) bf16 rows: P^T, dS^T
  uint16_t* dsv;             // (kTile/2, kTile) pairs: dS, two keys per pair
  float *dk, *dv, *dq;       // (kTile, Dp) accumulators (unscaled), each may be null
};

// Adds this pair's share into dk, dv, dq.
OCTET_BF16_TARGET void BwdPairTileFn(const BwdPairTile& t);

}  // namespace octet::cpu::attn
