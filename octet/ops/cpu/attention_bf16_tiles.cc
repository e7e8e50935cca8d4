// The AVX-512 BF16 code of the CPU attention on BF16 dot products: packers,
// the one product shape, and the tile-pair functions (NOTE [bf16 attention
// tiles] in attention_bf16.h; declarations in attention_bf16_tiles.h).
#include <octet/ops/cpu/attention_bf16_tiles.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include <octet/core/bf16_avx512_internal.h>
#include <octet/core/convert.h>

#include <octet/ops/cpu/attention_simd.h>

namespace octet::cpu::attn {
namespace {

using S = Simd<float, 64>;
using V = S::V;
using I = S::I;
constexpr int L = S::kLanes;   // 16 f32 lanes
constexpr int NQ = kTile / L;  // vectors per row of kTile columns

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

// Two rows of 16 f32 as bf16 words: row0 in words 0..15, row1 in 16..31
// (one VCVTNE2PS2BF16). InterleaveIndex permutes them into 16 pairs.
OCTET_BF16_TARGET OCTET_INLINE __m512i TwoRowsBf16(V row0, V row1) {
  return (__m512i)_mm512_cvtne2ps_pbh((__m512)row1, (__m512)row0);
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
// Which of a row's 32 bf16 columns from c on a masked load takes: those
// below d, none for rows at or past n.
OCTET_INLINE __mmask32 ColumnMask(int64_t r, int64_t n, int64_t c, int64_t d) {
  const int64_t left = r < n ? std::clamp<int64_t>(d - c, 0, 32) : 0;
  return left == 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
}
OCTET_INLINE I LaneIndex(int v) {
  I lane;
  for (int i = 0; i < L; ++i) lane[i] = v * L + i;
  return lane;
}

}  // namespace

// ---------------------------------------------------------------------------
// Packers.

OCTET_BF16_TARGET void CopyTile(const uint16_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp, uint16_t* dst) {
  for (int64_t r = 0; r < kTile; ++r) {
    for (int64_t c = 0; c < dp; c += 32) {
      const __mmask32 mask = ColumnMask(r, n, c, d);
      _mm512_storeu_si512(dst + r * dp + c, _mm512_maskz_loadu_epi16(mask, src + r * rs + c));
    }
  }
}

namespace {

// LookupTile through 16-bit tables, 32 codes a step: columns from `from` (a
// multiple of 32) of the first `done` rows, every column of the others (the
// rows at or past n get zeros).
OCTET_BF16_TARGET void LookupTileWords(const uint8_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp,
                                       const uint16_t* lut, uint16_t* dst, int64_t done, int64_t from) {
  __m512i table[8];
  for (int i = 0; i < 8; ++i) table[i] = _mm512_loadu_si512(lut + 32 * i);
  const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
  for (int64_t r = 0; r < kTile; ++r) {
    for (int64_t c = r < done ? from : 0; c < dp; c += 32) {
      const __mmask32 mask = ColumnMask(r, n, c, d);
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

// NOTE [fp8 tile lookup]: with AVX-512 VBMI the lut is split into byte
// planes (the low and the high bytes of its 256 entries) and codes are looked
// up 64 at a time, two vpermi2b per plane and the code's top bit choosing the
// half: about half the instructions per code of LookupTileWords' word
// tables. Whole 64-code runs of rows below n, or, at a head size of 32, two
// rows at a time; the rest goes through LookupTileWords.
// (No BF16 in the target: LookupRowsF32 below runs on VBMI CPUs without it.)
#define OCTET_VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))

struct ByteTables {
  __m512i lo[4], hi[4];
  __m512i first, second;  // qword orders (below)
};

OCTET_VBMI_TARGET OCTET_INLINE ByteTables MakeByteTables(const uint16_t* lut) {
  ByteTables t;
  for (int i = 0; i < 4; ++i) {
    const __m512i w0 = _mm512_loadu_si512(lut + 64 * i), w1 = _mm512_loadu_si512(lut + 64 * i + 32);
    t.lo[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(w0)), _mm512_cvtepi16_epi8(w1), 1);
    t.hi[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(w0, 8))),
                                 _mm512_cvtepi16_epi8(_mm512_srli_epi16(w1, 8)), 1);
  }
  // unpack{lo,hi}_epi8 interleave within 128-bit lanes: lane L of the first
  // holds codes 16L..16L+7, of the second 16L+8..16L+15. These qword indices
  // put them back in memory order: codes 0-31, then 32-63.
  t.first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  t.second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  return t;
}

// The low (*l) and high (*h) bytes of the table entries of 64 codes, in
// code order: two vpermi2b per plane, the code's top bit choosing the half.
OCTET_VBMI_TARGET OCTET_INLINE void LookupBytePlanes(const ByteTables& t, __m512i codes, __m512i* l, __m512i* h) {
  const __mmask64 upper = _mm512_movepi8_mask(codes);
  *l = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(t.lo[0], codes, t.lo[1]),
                              _mm512_permutex2var_epi8(t.lo[2], codes, t.lo[3]));
  *h = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(t.hi[0], codes, t.hi[1]),
                              _mm512_permutex2var_epi8(t.hi[2], codes, t.hi[3]));
}

// The 32 codes of row r and the 32 of row r + 1 (rows rs bytes apart) in one
// register: a head size of 32, two rows a lookup.
OCTET_VBMI_TARGET OCTET_INLINE __m512i LoadTwoRows32(const uint8_t* src, int64_t rs, int64_t r) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + r * rs))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (r + 1) * rs)), 1);
}

// The bf16 bits of 64 codes: codes 0-31 to out0, 32-63 to out1.
OCTET_VBMI_TARGET OCTET_INLINE void Lookup64(const ByteTables& t, __m512i codes, uint16_t* out0, uint16_t* out1) {
  __m512i l, h;
  LookupBytePlanes(t, codes, &l, &h);
  const __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);
  _mm512_storeu_si512(out0, _mm512_permutex2var_epi64(w0, t.first, w1));
  _mm512_storeu_si512(out1, _mm512_permutex2var_epi64(w0, t.second, w1));
}

// NOTE [fp8 f32 lookup]: the f32 attention tiles (the FP32-FMA path) read
// FP8 q, k, v codes through a table of f32 values that are bf16 values
// widened (Fp8CodeTable<bfloat16>: the compute dtype is bf16), so their low
// halves are zero and the byte planes above give their top halves. With
// VBMI, PackRows looks whole 64-code runs up here, 64 at a time, instead of
// in AVX2 gathers of 8: each dword gets its two bytes from the planes by one
// zero-masked vpermt2b, then the multiply. At a head size of 32 (the GPT
// example's) two rows share a lookup. Other tables (f32 compute, low halves
// not zero) keep the gathers. OCTET_CPU_GEMM=fp32 train_gpt --amp O1 (head
// size 32), 200 steps, two alternating rounds: 54.7 / 56.6 -> 53.1 / 55.2
// ms a step with the two-row form, the same losses.
OCTET_VBMI_TARGET int64_t LookupRowsF32Vbmi(const uint8_t* src, int64_t rs, int64_t rows, int64_t cols, float mul,
                                            const float* lut, float* dst, int64_t ldd) {
  alignas(64) uint16_t top[256];
  __m512i low_halves = _mm512_setzero_si512();
  for (int i = 0; i < 16; ++i) {
    const __m512i v = _mm512_loadu_si512(lut + 16 * i);
    low_halves = _mm512_or_si512(low_halves, _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(top + 16 * i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
  }
  if (_mm512_test_epi32_mask(low_halves, low_halves) != 0) return 0;
  const ByteTables t = MakeByteTables(top);
  // Dword d of quarter k takes byte 2 from l[16k + d] and byte 3 from h[16k + d]
  // (vpermt2b indices: l's bytes are 0-63, h's 64-127; the other bytes are masked).
  alignas(64) static constexpr auto kQuarterIdx = [] {
    std::array<std::array<uint8_t, 64>, 4> b{};
    for (int k = 0; k < 4; ++k)
      for (int d = 0; d < 16; ++d) {
        b[k][4 * d + 2] = static_cast<uint8_t>(16 * k + d);
        b[k][4 * d + 3] = static_cast<uint8_t>(64 + 16 * k + d);
      }
    return b;
  }();
  __m512i idx[4];
  for (int k = 0; k < 4; ++k) idx[k] = _mm512_load_si512(kQuarterIdx[k].data());
  const __mmask64 top_bytes = 0xCCCCCCCCCCCCCCCCull;
  const __m512 m = _mm512_set1_ps(mul);
  // 64 codes to f32: quarter k to out[k] (16 values each; `quarters` of them).
  auto lookup = [&](__m512i codes, float* const (&out)[4], int quarters) OCTET_VBMI_TARGET {
    __m512i l, h;
    LookupBytePlanes(t, codes, &l, &h);
    for (int k = 0; k < quarters; ++k) {
      const __m512 v = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(top_bytes, l, idx[k], h));
      _mm512_storeu_ps(out[k], _mm512_mul_ps(m, v));
    }
  };
  if (cols == 32) {  // head size 32: two rows a step, as LookupTileBytes does
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      float* const out[4] = {dst + r * ldd, dst + r * ldd + 16, dst + (r + 1) * ldd, dst + (r + 1) * ldd + 16};
      lookup(LoadTwoRows32(src, rs, r), out, 4);
    }
    if (r < rows) {
      const __m512i codes =
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + r * rs)));
      float* const out[4] = {dst + r * ldd, dst + r * ldd + 16, nullptr, nullptr};
      lookup(codes, out, 2);
    }
    return 32;
  }
  const int64_t whole = cols / 64 * 64;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < whole; c += 64) {
      float* const out[4] = {dst + r * ldd + c, dst + r * ldd + c + 16, dst + r * ldd + c + 32,
                             dst + r * ldd + c + 48};
      lookup(_mm512_loadu_si512(src + r * rs + c), out, 4);
    }
  return whole;
}

OCTET_VBMI_TARGET void LookupTileBytes(const uint8_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp,
                                       const uint16_t* lut, uint16_t* dst) {
  const ByteTables t = MakeByteTables(lut);
  const int64_t rows = std::min<int64_t>(n, kTile);
  if (d == 32) {  // two rows a step
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2) Lookup64(t, LoadTwoRows32(src, rs, r), dst + r * dp, dst + (r + 1) * dp);
    return LookupTileWords(src, rs, n, d, dp, lut, dst, r, 32);
  }
  const int64_t whole = d / 64 * 64;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < whole; c += 64)
      Lookup64(t, _mm512_loadu_si512(src + r * rs + c), dst + r * dp + c, dst + r * dp + c + 32);
  LookupTileWords(src, rs, n, d, dp, lut, dst, rows, whole);
}

}  // namespace

int64_t LookupRowsF32(const uint8_t* src, int64_t rs, int64_t rows, int64_t cols, float mul, const float* lut,
                      float* dst, int64_t ldd) {
  if ((cols < 64 && cols != 32) || !octet::internal::ActiveConverterIsa().vbmi) return 0;
  return LookupRowsF32Vbmi(src, rs, rows, cols, mul, lut, dst, ldd);
}

OCTET_BF16_TARGET void LookupTile(const uint8_t* src, int64_t rs, int64_t n, int64_t d, int64_t dp,
                                  const uint16_t* lut, uint16_t* dst) {
  if ((d >= 64 || d == 32) && octet::internal::ActiveConverterIsa().vbmi)
    return LookupTileBytes(src, rs, n, d, dp, lut, dst);
  LookupTileWords(src, rs, n, d, dp, lut, dst, 0, 0);
}

namespace {
// One row of StoreRowsBf16: s[0, d) * m narrowed into dst.
OCTET_BF16_TARGET inline __attribute__((always_inline)) void StoreRowBf16(const float* s, __m512 m, uint16_t* dst,
                                                                         int64_t d) {
  int64_t c = 0;
  for (; c + 32 <= d; c += 32) {
    const __m512 lo = _mm512_mul_ps(m, _mm512_loadu_ps(s + c)), hi = _mm512_mul_ps(m, _mm512_loadu_ps(s + c + 16));
    _mm512_storeu_si512(dst + c, convert_internal::FloatToBf16x32Native(lo, hi));
  }
  if (c < d) {  // 1-31 values: masked lanes read as 0, which narrows plainly
    const int64_t n = d - c;
    const __mmask32 words = static_cast<__mmask32>((uint64_t{1} << n) - 1);
    const __mmask16 lo_lanes = static_cast<__mmask16>(words), hi_lanes = static_cast<__mmask16>(words >> 16);
    const __m512 lo = _mm512_mul_ps(m, _mm512_maskz_loadu_ps(lo_lanes, s + c));
    const __m512 hi = _mm512_mul_ps(m, _mm512_maskz_loadu_ps(hi_lanes, s + c + 16));
    _mm512_mask_storeu_epi16(dst + c, words, convert_internal::FloatToBf16x32Native(lo, hi));
  }
}
}  // namespace

OCTET_BF16_TARGET void StoreRowsBf16(const float* src, int64_t sp, int64_t rows, int64_t d, float mul,
                                     const OutOperand<bfloat16>& out, int64_t bh, int64_t t0, const float* row_mul) {
  if (out.sd != 1) return StoreRows(src, sp, rows, d, mul, out, bh, t0, row_mul);
  uint16_t* const first = reinterpret_cast<uint16_t*>(out.Row(bh, t0));  // NOTE [attention row addressing]
  if (row_mul != nullptr) {
    for (int64_t r = 0; r < rows; ++r) StoreRowBf16(src + r * sp, _mm512_set1_ps(row_mul[r]), first + r * out.st, d);
  } else {
    const __m512 m = _mm512_set1_ps(mul);
    for (int64_t r = 0; r < rows; ++r) StoreRowBf16(src + r * sp, m, first + r * out.st, d);
  }
}

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

OCTET_BF16_TARGET void TransposePairs(const uint16_t* plain, int64_t dp, uint16_t* out) {
  const int64_t w = dp / 2;  // pairs per plain row: a multiple of 16 (kBf16Pad)
  TransposeEpi32Blocks(reinterpret_cast<const uint32_t*>(plain), w, kTile, kTile, w, reinterpret_cast<uint32_t*>(out),
                       kTile);
}

// ---------------------------------------------------------------------------
// Tile pairs.

// Dot, or AmxDot where the tile pair asks for AMX.
template <bool kAccumulate>
OCTET_BF16_TARGET OCTET_INLINE void Product(bool amx, const uint16_t* a, int64_t ars, int64_t acs, int64_t np,
                                            const uint16_t* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                                            int64_t w, Tri tri) {
  if (amx) return AmxDot(kAccumulate, a, ars, acs, np, b, ldb, c, ldc, m, w, tri);
  Dot<kAccumulate>(a, ars, acs, np, b, ldb, c, ldc, m, w, tri);
}

OCTET_BF16_TARGET void FwdPairTileFn(const FwdPairTile& t) {
  const int64_t hp = t.dp / 2;
  Product<false>(t.amx, t.k, hp, 1, hp, t.qv, kTile, t.st, kTile, t.kn, kTile,
                 t.diagonal ? Tri::kColsFromRow : Tri::kFull);
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
      _mm512_storeu_si512(t.pv + 2 * ((j / 2) * kTile + v * L),
                          _mm512_permutexvar_epi16(interleave, TwoRowsBf16(p0, p1)));
    }
  }
  RescaleRows<S, NQ>(alpha, sum, t.l, t.o, t.qn, t.dp);
  // O (qn x Dp) += P (qn x kn) . V (kn x Dp): pair (i, j/2) of P at pv[j/2][i].
  Product<true>(t.amx, t.pv, 1, kTile, (t.kn + 1) / 2, t.vv, t.dp, t.o, t.dp, t.qn, t.dp,
                t.diagonal ? Tri::kContractToRow : Tri::kFull);
}

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
  Product<false>(t.amx, t.k, hp, 1, hp, t.qv, kTile, t.st, kTile, t.kn, kTile, cols);    // S^T = K Q^T
  Product<false>(t.amx, t.v, hp, 1, hp, t.dov, kTile, t.dst, kTile, t.kn, kTile, cols);  // dP^T = V dO^T
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
      const __m512i p01 = TwoRowsBf16(p0, p1), ds01 = TwoRowsBf16(ds0, ds1);
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
  if (t.dv) Product<true>(t.amx, t.pt, kTile / 2, 1, qpairs, t.dop, t.dp, t.dv, t.dp, t.kn, t.dp, from);
  if (t.dk) Product<true>(t.amx, t.dst16, kTile / 2, 1, qpairs, t.qp, t.dp, t.dk, t.dp, t.kn, t.dp, from);
  if (t.dq) Product<true>(t.amx, t.dsv, 1, kTile, (t.kn + 1) / 2, t.kp, t.dp, t.dq, t.dp, t.qn, t.dp, to);
}

}  // namespace octet::cpu::attn

#endif  // __x86_64__
