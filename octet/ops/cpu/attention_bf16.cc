// The fused CPU attention on BF16 dot products: packing into pair layouts,
// the products and softmax of one tile pair, and the forward and backward
// drivers. See NOTE [bf16 attention tiles] in attention_bf16.h.
#include <octet/ops/cpu/attention_bf16.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/error.h>
#include <octet/ops/cpu/attention_pack.h>
#include <octet/ops/cpu/attention_simd.h>
#include <octet/ops/cpu/attention_work.h>
#include <octet/ops/cpu/row_helpers.h>

namespace octet::cpu::attn {

#if defined(__x86_64__)
namespace {

#define OCTET_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

using S = Simd<float, 64>;
using V = S::V;
using I = S::I;
constexpr int L = S::kLanes;       // 16 f32 lanes
constexpr int NQ = kTile / L;      // vectors per row of kTile columns
constexpr int64_t kBf16Pad = 32;   // Dp: D rounded up to 64 bytes of bf16
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

// ---------------------------------------------------------------------------
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
OCTET_BF16_TARGET void CopyTile(const uint16_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp, uint16_t* dst) {
  for (int64_t r = 0; r < kTile; ++r) {
    for (int64_t c = 0; c < dp; c += 32) {
      const int64_t left = r < n ? std::clamp<int64_t>(d - c, 0, 32) : 0;
      const __mmask32 mask = left == 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
      _mm512_storeu_si512(dst + r * dp + c, _mm512_maskz_loadu_epi16(mask, src + r * rs + c));
    }
  }
}

// CopyTile for FP8 codes: each code's bf16 bits from the 256-entry lut, 32
// at a time (four 64-entry VPERMI2W lookups, blended by the code's top two
// bits).
OCTET_BF16_TARGET void LookupTile(const uint8_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp,
                                  const uint16_t* lut, uint16_t* dst) {
  __m512i table[8];
  for (int i = 0; i < 8; ++i) table[i] = _mm512_loadu_si512(lut + 32 * i);
  const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
  for (int64_t r = 0; r < kTile; ++r) {
    for (int64_t c = 0; c < dp; c += 32) {
      const int64_t left = r < n ? std::clamp<int64_t>(d - c, 0, 32) : 0;
      const __mmask32 mask = left == 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
      const __m512i idx = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, src + r * rs + c));
      const __mmask32 hi6 = _mm512_test_epi16_mask(idx, bit6), hi7 = _mm512_test_epi16_mask(idx, bit7);
      const __m512i lo = _mm512_mask_blend_epi16(hi6, _mm512_permutex2var_epi16(table[0], idx, table[1]),
                                                 _mm512_permutex2var_epi16(table[2], idx, table[3]));
      const __m512i hi = _mm512_mask_blend_epi16(hi6, _mm512_permutex2var_epi16(table[4], idx, table[5]),
                                                 _mm512_permutex2var_epi16(table[6], idx, table[7]));
      _mm512_storeu_si512(dst + r * dp + c, _mm512_maskz_mov_epi16(mask, _mm512_mask_blend_epi16(hi7, lo, hi)));
    }
  }
}

// dst (kTile x dp): rows [0, n) of src (row stride rs, column stride cs, d
// columns) as bf16 bits, zero elsewhere.
template <typename TIn>
void PlainTile(const TIn* src, int64_t rs, int64_t cs, int64_t n, int64_t d, int64_t dp, const uint16_t* lut,
               uint16_t* dst) {
  if (cs == 1) {
    if constexpr (std::is_same_v<TIn, bfloat16>) return CopyTile(reinterpret_cast<const uint16_t*>(src), rs, n, d, dp, dst);
    if constexpr (std::is_same_v<TIn, Fp8Code>) return LookupTile(reinterpret_cast<const uint8_t*>(src), rs, n, d, dp, lut, dst);
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
OCTET_BF16_TARGET void InterleaveRowPairs(const uint16_t* plain, int64_t dp, uint16_t* out) {
  alignas(64) uint16_t lo_idx[32], hi_idx[32];
  for (int i = 0; i < 16; ++i) {
    lo_idx[2 * i] = static_cast<uint16_t>(i);
    lo_idx[2 * i + 1] = static_cast<uint16_t>(32 + i);
    hi_idx[2 * i] = static_cast<uint16_t>(16 + i);
    hi_idx[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  for (int64_t r = 0; r < kTile / 2; ++r) {
    const uint16_t* a = plain + 2 * r * dp;
    const uint16_t* b = a + dp;
    uint16_t* o = out + 2 * r * dp;
    for (int64_t c = 0; c < dp; c += 32) {
      const __m512i x = _mm512_loadu_si512(a + c), y = _mm512_loadu_si512(b + c);
      _mm512_storeu_si512(o + 2 * c, _mm512_permutex2var_epi16(x, lo, y));
      _mm512_storeu_si512(o + 2 * c + 32, _mm512_permutex2var_epi16(x, hi, y));
    }
  }
}

// out (dp/2 pair rows x kTile): the 32-bit pairs of plain (kTile x dp) transposed.
OCTET_BF16_TARGET void TransposePairs(const uint16_t* plain, int64_t dp, uint16_t* out) {
  const int64_t w = dp / 2;  // pairs per plain row
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(static_cast<int>(w)));
  for (int64_t p = 0; p < w; ++p)
    for (int64_t i = 0; i < kTile; i += L)
      _mm512_storeu_si512(out + 2 * (p * kTile + i), _mm512_i32gather_epi32(idx, plain + 2 * (i * w + p), 4));
}

// ---------------------------------------------------------------------------
// The products: for r < m rows and w f32 columns (a multiple of 16),
//   c[r*ldc + col] (+)= sum_{p < np} dot(a pair (r, p), b pair (p, col)),
// pairs of a at a + 2*(r*ars + p*acs) (broadcast), rows of pairs of b at
// b + 2*(p*ldb) (strides in pairs).

template <int R, int NV, bool kAccumulate>
OCTET_BF16_TARGET OCTET_INLINE void DotBlock(const uint16_t* a, int64_t ars, int64_t acs, int64_t np,
                                             const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  __m512 acc[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = kAccumulate ? _mm512_loadu_ps(c + r * ldc + v * L) : _mm512_setzero_ps();
  for (int64_t p = 0; p < np; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + 2 * (p * ldb + v * L));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, a + 2 * (r * ars + p * acs), sizeof(pair));
      const __m512bh s = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], s, bv[v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + v * L, acc[r][v]);
}

template <int R, bool kAccumulate>
OCTET_BF16_TARGET OCTET_INLINE void DotRows(int nv, const uint16_t* a, int64_t ars, int64_t acs, int64_t np,
                                            const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  switch (nv) {
    case 4: return DotBlock<R, 4, kAccumulate>(a, ars, acs, np, b, ldb, c, ldc);
    case 3: return DotBlock<R, 3, kAccumulate>(a, ars, acs, np, b, ldb, c, ldc);
    case 2: return DotBlock<R, 2, kAccumulate>(a, ars, acs, np, b, ldb, c, ldc);
    default: return DotBlock<R, 1, kAccumulate>(a, ars, acs, np, b, ldb, c, ldc);
  }
}

// The product above over m rows, blocks of 4 rows x 64 columns, with the
// causal skipping of Tri (in pairs: rows start at multiples of 4, so a
// row block's first contracted index is even).
template <bool kAccumulate>
OCTET_BF16_TARGET OCTET_INLINE void Dot(const uint16_t* a, int64_t ars, int64_t acs, int64_t np, const uint16_t* b,
                                        int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t w, Tri tri) {
  constexpr int RB = 4, NVB = 4;
  for (int64_t r0 = 0; r0 < m; r0 += RB) {
    const int64_t rows = std::min<int64_t>(RB, m - r0);
    int64_t p0 = 0, p1 = np, col0 = 0;
    if (tri == Tri::kColsFromRow) col0 = r0 / L * L;
    if (tri == Tri::kContractFromRow) p0 = std::min(r0 / 2, np);
    if (tri == Tri::kContractToRow) p1 = std::min(np, (r0 + rows + 1) / 2);
    const uint16_t* ar = a + 2 * (r0 * ars + p0 * acs);
    for (int64_t c0 = col0; c0 < w; c0 += NVB * L) {
      const int nv = static_cast<int>(std::min<int64_t>(NVB, (w - c0) / L));
      const uint16_t* br = b + 2 * (p0 * ldb + c0);
      float* cr = c + r0 * ldc + c0;
      switch (rows) {
        case 4: DotRows<4, kAccumulate>(nv, ar, ars, acs, p1 - p0, br, ldb, cr, ldc); break;
        case 3: DotRows<3, kAccumulate>(nv, ar, ars, acs, p1 - p0, br, ldb, cr, ldc); break;
        case 2: DotRows<2, kAccumulate>(nv, ar, ars, acs, p1 - p0, br, ldb, cr, ldc); break;
        default: DotRows<1, kAccumulate>(nv, ar, ars, acs, p1 - p0, br, ldb, cr, ldc); break;
      }
    }
  }
}

// Lane i: bf16(lo[i]) in the low half, bf16(hi[i]) in the high half.
OCTET_BF16_TARGET OCTET_INLINE __m512i PairBf16(V lo, V hi, __m512i interleave) {
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh((__m512)hi, (__m512)lo);  // lo in words 0..15
  return _mm512_permutexvar_epi16(interleave, both);
}
OCTET_BF16_TARGET OCTET_INLINE __m512i InterleaveIndex() {
  return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19,
                          3, 18, 2, 17, 1, 16, 0);
}
// The 16 words of half h (0: low) of x at dst.
OCTET_BF16_TARGET OCTET_INLINE void StoreHalf(uint16_t* dst, __m512i x, int h) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h == 0 ? _mm512_castsi512_si256(x)
                                                               : _mm512_extracti64x4_epi64(x, 1));
}
OCTET_INLINE I LaneIndex(int v) {
  I lane;
  for (int i = 0; i < L; ++i) lane[i] = v * L + i;
  return lane;
}

// ---------------------------------------------------------------------------
// Tile pairs.

struct FwdPairTile {
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

OCTET_BF16_TARGET void FwdPairTileFn(const FwdPairTile& t) {
  const int64_t hp = t.dp / 2;
  Dot<false>(t.k, hp, 1, hp, t.qv, kTile, t.st, kTile, t.kn, kTile, t.diagonal ? Tri::kColsFromRow : Tri::kFull);
  const V c = Splat<V>(t.c);
  const V neg_inf = Splat<V>(-std::numeric_limits<float>::infinity());
  V mnew[NQ], alpha[NQ], sum[NQ];
#pragma GCC unroll 4
  for (int v = 0; v < NQ; ++v) mnew[v] = LoadV<V>(t.m + v * L);
  // Scores in the log2 domain; on the diagonal, key j > query i masked
  // (entries Dot left unwritten are among them).
  for (int64_t j = 0; j < t.kn; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) {
      V s = LoadV<V>(t.st + j * kTile + v * L) * c;
      if (t.diagonal) s = LaneIndex(v) >= static_cast<int32_t>(j) ? s : neg_inf;
      StoreV(t.st + j * kTile + v * L, s);
      mnew[v] = MaxV(mnew[v], s);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NQ; ++v) {
    alpha[v] = Exp2<S>(LoadV<V>(t.m + v * L) - mnew[v]);
    StoreV(t.m + v * L, mnew[v]);
    sum[v] = V{};
  }
  const __m512i interleave = InterleaveIndex();
  for (int64_t j = 0; j < t.kn; j += 2) {
    const bool two = j + 1 < t.kn;
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) {
      const V p0 = Exp2<S>(LoadV<V>(t.st + j * kTile + v * L) - mnew[v]);
      const V p1 = two ? Exp2<S>(LoadV<V>(t.st + (j + 1) * kTile + v * L) - mnew[v]) : V{};
      sum[v] += p0;
      sum[v] += p1;
      _mm512_storeu_si512(t.pv + 2 * ((j / 2) * kTile + v * L), PairBf16(p0, p1, interleave));
    }
  }
  RescaleRows<S, NQ>(alpha, sum, t.l, t.o, t.qn, t.dp);
  // O (qn x Dp) += P (qn x kn) . V (kn x Dp): pair (i, j/2) of P at pv[j/2][i].
  Dot<true>(t.pv, 1, kTile, (t.kn + 1) / 2, t.vv, t.dp, t.o, t.dp, t.qn, t.dp,
            t.diagonal ? Tri::kContractToRow : Tri::kFull);
}

struct BwdPairTile {
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

// Row j, vector v of P^T = exp2(S^T c - lse2) and dS^T = P^T o (dP^T - D);
// masked entries are selected to 0 (what Dot left unwritten may be anything).
OCTET_BF16_TARGET OCTET_INLINE void Grads(const BwdPairTile& t, int64_t j, int v, V c, V lse2, V di, V* p, V* ds) {
  *p = Exp2<S>(LoadV<V>(t.st + j * kTile + v * L) * c - lse2);
  *ds = *p * (LoadV<V>(t.dst + j * kTile + v * L) - di);
  if (t.diagonal) {
    const I keep = LaneIndex(v) >= static_cast<int32_t>(j);
    *p = keep ? *p : V{};
    *ds = keep ? *ds : V{};
  }
}

OCTET_BF16_TARGET void BwdPairTileFn(const BwdPairTile& t) {
  const int64_t hp = t.dp / 2;
  const Tri cols = t.diagonal ? Tri::kColsFromRow : Tri::kFull;
  Dot<false>(t.k, hp, 1, hp, t.qv, kTile, t.st, kTile, t.kn, kTile, cols);     // S^T = K Q^T
  Dot<false>(t.v, hp, 1, hp, t.dov, kTile, t.dst, kTile, t.kn, kTile, cols);   // dP^T = V dO^T
  V lse2[NQ], di[NQ];
#pragma GCC unroll 4
  for (int v = 0; v < NQ; ++v) {
    lse2[v] = LoadV<V>(t.lse2 + v * L);
    di[v] = LoadV<V>(t.di + v * L);
  }
  const V c = Splat<V>(t.c);
  const __m512i interleave = InterleaveIndex();
  for (int64_t j = 0; j < t.kn; j += 2) {
    const bool two = j + 1 < t.kn;
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) {
      V p0, ds0, p1 = V{}, ds1 = V{};
      Grads(t, j, v, c, lse2[v], di[v], &p0, &ds0);
      if (two) Grads(t, j + 1, v, c, lse2[v], di[v], &p1, &ds1);
      // One conversion per two rows: words 0..15 row j, 16..31 row j + 1.
      const __m512i p01 = (__m512i)_mm512_cvtne2ps_pbh((__m512)p1, (__m512)p0);
      const __m512i ds01 = (__m512i)_mm512_cvtne2ps_pbh((__m512)ds1, (__m512)ds0);
      StoreHalf(t.pt + j * kTile + v * L, p01, 0);
      StoreHalf(t.dst16 + j * kTile + v * L, ds01, 0);
      if (two) {
        StoreHalf(t.pt + (j + 1) * kTile + v * L, p01, 1);
        StoreHalf(t.dst16 + (j + 1) * kTile + v * L, ds01, 1);
      }
      _mm512_storeu_si512(t.dsv + 2 * ((j / 2) * kTile + v * L), _mm512_permutexvar_epi16(interleave, ds01));
    }
  }
  // dV (kn x Dp) += P^T dO; dK += dS^T Q; dQ (qn x Dp) += dS K.
  const Tri from = t.diagonal ? Tri::kContractFromRow : Tri::kFull;
  const Tri to = t.diagonal ? Tri::kContractToRow : Tri::kFull;
  const int64_t qpairs = (t.qn + 1) / 2;
  if (t.dv) Dot<true>(t.pt, kTile / 2, 1, qpairs, t.dop, t.dp, t.dv, t.dp, t.kn, t.dp, from);
  if (t.dk) Dot<true>(t.dst16, kTile / 2, 1, qpairs, t.qp, t.dp, t.dk, t.dp, t.kn, t.dp, from);
  if (t.dq) Dot<true>(t.dsv, 1, kTile, (t.kn + 1) / 2, t.kp, t.dp, t.dq, t.dp, t.qn, t.dp, to);
}

// ---------------------------------------------------------------------------
// Drivers.

// One head's packed blocks (see Packing above).
struct PackLayout {
  PackLayout(const Geometry& g, int blocks) : dp(g.dp), block(g.nt * kTile * g.dp), size(blocks * block) {}
  uint16_t* At(uint16_t* base, int which, int64_t tile) const { return base + which * block + tile * kTile * dp; }
  int64_t dp, block, size;
};

enum FwdBlock { kFwdK, kFwdQt, kFwdV, kFwdBlocks };
enum BwdBlock { kK, kV, kQt, kDOt, kQPairs, kDOPairs, kKPairs, kBwdBlocks };

template <typename TIn>
void PackFwdTile(const Operand<TIn>& q, const Operand<TIn>& k, const Operand<TIn>& v, const Geometry& g,
                 const PackLayout& lay, uint16_t* base, uint16_t* tmp, int64_t bh, int64_t tile,
                 const uint16_t* lut) {
  const int64_t t0 = tile * kTile, n = g.TileRows(tile);
  PlainTile(k.Row(bh, t0), k.st, k.sd, n, g.d, g.dp, lut, lay.At(base, kFwdK, tile));
  PlainTile(q.Row(bh, t0), q.st, q.sd, n, g.d, g.dp, lut, tmp);
  TransposePairs(tmp, g.dp, lay.At(base, kFwdQt, tile));
  PlainTile(v.Row(bh, t0), v.st, v.sd, n, g.d, g.dp, lut, tmp);
  InterleaveRowPairs(tmp, g.dp, lay.At(base, kFwdV, tile));
}

struct FwdWorkspace {
  FwdWorkspace(const Geometry& g, int64_t pack_size)
      : pack(pack_size), tmp(kTile * g.dp), pv(kTile * kTile), st(kTile * kTile), o(kTile * g.dp), m(kTile),
        l(kTile) {}
  Buffer<uint16_t> pack, tmp, pv;
  Buffer<float> st, o, m, l;
};

}  // namespace

template <typename TIn>
void ForwardBf16Dot(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, double scale, const Tensor& out_t,
                    const Tensor& lse_t, const uint16_t* lut) {
  const Geometry g(q_t, kBf16Pad);
  const Operand<TIn> q(q_t), k(k_t), v(v_t);
  const OutOperand<bfloat16> out(out_t);
  float* lse = lse_t.data<float>();  // (B,H,T)
  const PackLayout lay(g, kFwdBlocks);
  const float c = static_cast<float>(scale * kLog2e);

  auto query_tile = [&](FwdWorkspace& ws, uint16_t* base, int64_t bh, int64_t qtile) {
    const int64_t q0 = qtile * kTile, qn = g.TileRows(qtile);
    std::fill(ws.m.get(), ws.m.get() + kTile, -std::numeric_limits<float>::infinity());
    std::fill(ws.l.get(), ws.l.get() + kTile, 0.0f);
    std::fill(ws.o.get(), ws.o.get() + qn * g.dp, 0.0f);
    FwdPairTile t{};
    t.qv = lay.At(base, kFwdQt, qtile);
    t.dp = g.dp;
    t.qn = qn;
    t.c = c;
    t.st = ws.st.get();
    t.pv = ws.pv.get();
    t.o = ws.o.get();
    t.m = ws.m.get();
    t.l = ws.l.get();
    for (int64_t ktile = 0; ktile <= qtile; ++ktile) {
      t.k = lay.At(base, kFwdK, ktile);
      t.vv = lay.At(base, kFwdV, ktile);
      t.kn = g.TileRows(ktile);
      t.diagonal = ktile == qtile;
      FwdPairTileFn(t);
    }
    const float* o = ws.o.get();
    const float* m = ws.m.get();
    const float* l = ws.l.get();
    for (int64_t i = 0; i < qn; ++i) {
      StoreRows(o + i * g.dp, g.dp, 1, g.d, 1.0f / l[i], out, bh, q0 + i);
      lse[bh * g.t + q0 + i] = static_cast<float>((m[i] + std::log2(l[i])) * static_cast<float>(kLn2));
    }
  };

  if (HeadsFillThreads(g)) {  // NOTE [forward per head]
    ParallelItems(
        g.bh, [&] { return FwdWorkspace(g, lay.size); },
        [&](FwdWorkspace& ws, int64_t bh) {
          uint16_t* base = ws.pack.get();
          for (int64_t tile = 0; tile < g.nt; ++tile) PackFwdTile(q, k, v, g, lay, base, ws.tmp.get(), bh, tile, lut);
          for (int64_t qtile = g.nt - 1; qtile >= 0; --qtile) query_tile(ws, base, bh, qtile);
        });
    return;
  }
  // Few heads: every head packed first (its tiles in parallel), then (head, query tile) items.
  Buffer<uint16_t> packs(g.bh * lay.size);
  ParallelItems(
      g.bh * g.nt, [&] { return Buffer<uint16_t>(kTile * g.dp); },
      [&](Buffer<uint16_t>& tmp, int64_t item) {
        const int64_t bh = item / g.nt;
        PackFwdTile(q, k, v, g, lay, packs.get() + bh * lay.size, tmp.get(), bh, item % g.nt, lut);
      });
  ParallelItems(
      g.bh * g.nt, [&] { return FwdWorkspace(g, 0); },
      [&](FwdWorkspace& ws, int64_t item) {
        const int64_t qtile = g.nt - 1 - item / g.bh, bh = item % g.bh;  // largest first
        query_tile(ws, packs.get() + bh * lay.size, bh, qtile);
      });
}

namespace {

template <typename TIn>
struct BwdInputs {
  BwdInputs(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t, const Tensor& dout_t,
            const Tensor& lse_t, const uint16_t* lut_)
      : q(q_t), k(k_t), v(v_t), dout(dout_t), out(out_t), lse(lse_t.data<float>()), lut(lut_) {}
  Operand<TIn> q, k, v;
  Operand<bfloat16> dout, out;
  const float* lse;
  const uint16_t* lut;
};

// Packs tile `tile` of head bh; stats: the head's lse*log2(e) (Tp) then D (Tp).
template <typename TIn>
void PackBwdTile(const BwdInputs<TIn>& in, const Geometry& g, const PackLayout& lay, uint16_t* base, float* stats,
                 uint16_t* tmp, int64_t bh, int64_t tile) {
  const int64_t t0 = tile * kTile, n = g.TileRows(tile);
  uint16_t* kr = lay.At(base, kK, tile);
  PlainTile(in.k.Row(bh, t0), in.k.st, in.k.sd, n, g.d, g.dp, in.lut, kr);
  InterleaveRowPairs(kr, g.dp, lay.At(base, kKPairs, tile));
  PlainTile(in.v.Row(bh, t0), in.v.st, in.v.sd, n, g.d, g.dp, in.lut, lay.At(base, kV, tile));
  PlainTile(in.q.Row(bh, t0), in.q.st, in.q.sd, n, g.d, g.dp, in.lut, tmp);
  TransposePairs(tmp, g.dp, lay.At(base, kQt, tile));
  InterleaveRowPairs(tmp, g.dp, lay.At(base, kQPairs, tile));
  PlainTile<bfloat16>(in.dout.Row(bh, t0), in.dout.st, in.dout.sd, n, g.d, g.dp, nullptr, tmp);
  TransposePairs(tmp, g.dp, lay.At(base, kDOt, tile));
  InterleaveRowPairs(tmp, g.dp, lay.At(base, kDOPairs, tile));
  const int64_t tp = g.nt * kTile;
  float* lse2 = stats + t0;
  float* di = stats + tp + t0;
  std::vector<bfloat16> o_row(in.out.sd == 1 ? 0 : g.d);
  for (int64_t i = 0; i < kTile; ++i) {
    if (i < n) {
      lse2[i] = in.lse[bh * g.t + t0 + i] * static_cast<float>(kLog2e);
      // D_i = rowsum(dO_i o O_i) in f32 (the products of bf16 are exact).
      const bfloat16* o = in.out.Row(bh, t0 + i);
      if (in.out.sd != 1) {  // a row of O with strided columns, gathered
        for (int64_t col = 0; col < g.d; ++col) o_row[col] = o[col * in.out.sd];
        o = o_row.data();
      }
      di[i] = LaneDot<float>(g.d, reinterpret_cast<const bfloat16*>(tmp + i * g.dp), o);
    } else {
      lse2[i] = std::numeric_limits<float>::infinity();  // P = 0 for padding rows
      di[i] = 0.0f;
    }
  }
}

struct BwdWorkspace {
  BwdWorkspace(const Geometry& g, int64_t pack_size, int64_t dq_rows)
      : pack(pack_size), tmp(kTile * g.dp), pt(kTile * kTile), dst16(kTile * kTile), dsv(kTile * kTile),
        stats(pack_size > 0 ? 2 * g.nt * kTile : 0), st(kTile * kTile), dst(kTile * kTile), dk(kTile * g.dp),
        dv(kTile * g.dp), dq(dq_rows * g.dp) {}
  Buffer<uint16_t> pack, tmp, pt, dst16, dsv;
  Buffer<float> stats, st, dst, dk, dv, dq;
};

BwdPairTile MakeTile(const Geometry& g, const PackLayout& lay, uint16_t* base, const float* stats, int64_t qtile,
                     int64_t ktile, float c, BwdWorkspace& ws) {
  BwdPairTile t{};
  t.k = lay.At(base, kK, ktile);
  t.v = lay.At(base, kV, ktile);
  t.kp = lay.At(base, kKPairs, ktile);
  t.qv = lay.At(base, kQt, qtile);
  t.dov = lay.At(base, kDOt, qtile);
  t.qp = lay.At(base, kQPairs, qtile);
  t.dop = lay.At(base, kDOPairs, qtile);
  t.lse2 = stats + qtile * kTile;
  t.di = stats + g.nt * kTile + qtile * kTile;
  t.dp = g.dp;
  t.qn = g.TileRows(qtile);
  t.kn = g.TileRows(ktile);
  t.diagonal = qtile == ktile;
  t.c = c;
  t.st = ws.st.get();
  t.dst = ws.dst.get();
  t.pt = ws.pt.get();
  t.dst16 = ws.dst16.get();
  t.dsv = ws.dsv.get();
  return t;
}

}  // namespace

template <typename TIn>
void BackwardBf16Dot(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t,
                     const Tensor& dout_t, const Tensor& lse_t, double scale, const Tensor& dq_t, const Tensor& dk_t,
                     const Tensor& dv_t, const uint16_t* lut) {
  const Geometry g(q_t, kBf16Pad);
  const BwdInputs<TIn> in(q_t, k_t, v_t, out_t, dout_t, lse_t, lut);
  const PackLayout lay(g, kBwdBlocks);
  const int64_t stats_size = 2 * g.nt * kTile;
  const float c = static_cast<float>(scale * kLog2e);
  const float s = static_cast<float>(scale);
  const OutOperand<bfloat16> dq(dq_t), dk(dk_t), dv(dv_t);  // each may be undefined
  const bool want_kv = dk || dv;

  // Accumulates the dK/dV of key tile `ktile` over query tiles ktile.. and stores them.
  auto key_tile = [&](BwdWorkspace& ws, uint16_t* base, const float* stats, int64_t bh, int64_t ktile,
                      float* dq_head) {
    std::fill(ws.dk.get(), ws.dk.get() + kTile * g.dp, 0.0f);
    std::fill(ws.dv.get(), ws.dv.get() + kTile * g.dp, 0.0f);
    for (int64_t qtile = ktile; qtile < g.nt; ++qtile) {
      BwdPairTile t = MakeTile(g, lay, base, stats, qtile, ktile, c, ws);
      t.dk = dk ? ws.dk.get() : nullptr;
      t.dv = dv ? ws.dv.get() : nullptr;
      t.dq = dq_head ? dq_head + qtile * kTile * g.dp : nullptr;
      BwdPairTileFn(t);
    }
    const int64_t kn = g.TileRows(ktile), k0 = ktile * kTile;
    if (dk) StoreRows(ws.dk.get(), g.dp, kn, g.d, s, dk, bh, k0);
    if (dv) StoreRows(ws.dv.get(), g.dp, kn, g.d, 1.0f, dv, bh, k0);
  };

  if (dq && want_kv && HeadsFillThreads(g)) {
    // One work item per head: all three gradients in one sweep.
    ParallelItems(
        g.bh, [&] { return BwdWorkspace(g, lay.size, g.nt * kTile); },
        [&](BwdWorkspace& ws, int64_t bh) {
          uint16_t* base = ws.pack.get();
          float* stats = ws.stats.get();
          for (int64_t tile = 0; tile < g.nt; ++tile) PackBwdTile(in, g, lay, base, stats, ws.tmp.get(), bh, tile);
          float* dq_head = ws.dq.get();
          std::fill(dq_head, dq_head + g.nt * kTile * g.dp, 0.0f);
          for (int64_t ktile = 0; ktile < g.nt; ++ktile) key_tile(ws, base, stats, bh, ktile, dq_head);
          StoreRows(dq_head, g.dp, g.t, g.d, s, dq, bh, 0);
        });
    return;
  }

  // Few heads: pack every head first, then dK/dV over key tiles and dQ over query tiles.
  Buffer<uint16_t> packs(g.bh * lay.size);
  Buffer<float> stats(g.bh * stats_size);
  ParallelItems(
      g.bh * g.nt, [&] { return Buffer<uint16_t>(kTile * g.dp); },
      [&](Buffer<uint16_t>& tmp, int64_t item) {
        const int64_t bh = item / g.nt;
        PackBwdTile(in, g, lay, packs.get() + bh * lay.size, stats.get() + bh * stats_size, tmp.get(), bh,
                    item % g.nt);
      });
  if (want_kv) {
    ParallelItems(
        g.bh * g.nt, [&] { return BwdWorkspace(g, 0, 0); },
        [&](BwdWorkspace& ws, int64_t item) {
          const int64_t ktile = item / g.bh, bh = item % g.bh;  // most query tiles first
          key_tile(ws, packs.get() + bh * lay.size, stats.get() + bh * stats_size, bh, ktile, nullptr);
        });
  }
  if (dq) {
    ParallelItems(
        g.bh * g.nt, [&] { return BwdWorkspace(g, 0, kTile); },
        [&](BwdWorkspace& ws, int64_t item) {
          const int64_t qtile = g.nt - 1 - item / g.bh, bh = item % g.bh;  // most key tiles first
          uint16_t* base = packs.get() + bh * lay.size;
          float* acc = ws.dq.get();
          std::fill(acc, acc + kTile * g.dp, 0.0f);
          for (int64_t ktile = 0; ktile <= qtile; ++ktile) {
            BwdPairTile t = MakeTile(g, lay, base, stats.get() + bh * stats_size, qtile, ktile, c, ws);
            t.dq = acc;
            BwdPairTileFn(t);
          }
          StoreRows(acc, g.dp, g.TileRows(qtile), g.d, s, dq, bh, qtile * kTile);
        });
  }
}

#else  // not x86-64: the dispatcher never selects kAvx512Bf16.

template <typename TIn>
void ForwardBf16Dot(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                    const uint16_t*) {
  OCTET_CHECK(false, "causal_attention: BF16 dot-product tiles need an x86-64 CPU with AVX-512 BF16");
}
template <typename TIn>
void BackwardBf16Dot(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     double, const Tensor&, const Tensor&, const Tensor&, const uint16_t*) {
  OCTET_CHECK(false, "causal_attention: BF16 dot-product tiles need an x86-64 CPU with AVX-512 BF16");
}

#endif

template void ForwardBf16Dot<bfloat16>(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                                       const Tensor&, const uint16_t*);
template void ForwardBf16Dot<Fp8Code>(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                                      const Tensor&, const uint16_t*);
template void BackwardBf16Dot<bfloat16>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, double, const Tensor&, const Tensor&, const Tensor&,
                                        const uint16_t*);
template void BackwardBf16Dot<Fp8Code>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, double, const Tensor&, const Tensor&, const Tensor&,
                                       const uint16_t*);

}  // namespace octet::cpu::attn
