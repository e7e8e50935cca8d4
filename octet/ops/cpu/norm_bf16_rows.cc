// The norms' short and bf16 rows on AVX-512 BF16 (see norm_bf16_rows.h).
//
// NOTE [native bf16 norm output]: a bf16 row's output was computed into
// f32 scratch by the generic loop and narrowed by a second pass
// (FloatToBf16Row); on short rows that pass and its store were most of what
// bf16 paid over f32 (NOTE [paired row statistics] in norm_cpu.cc). On CPUs with AVX-512
// BF16 the forward's output row (LayerNorm, RMSNorm, AddLayerNorm) and
// LayerNorm's dx row (without a dsum) are instead computed and narrowed in
// registers, 32 lanes at a time (FloatToBf16x32Native), with the generic
// loop's operations: y = fma((x - mu) * rs, w, b) and dx = rs * fma(-xhat,
// mean_gx, fma(dy, w, -mean_g)). Those FMAs are written out (std::fma) in
// the generic loops too: left to -ffp-contract, the -O1 sanitizer build did
// not fuse them and its two paths disagreed. The tail runs the same
// operations on masked lanes. Norm.NativeBf16RowsMatchTheGenericLoop holds
// the two to the same bits (a one-FMA difference changes a bf16 result about
// once in 2^16 elements, so it compares millions). Measured (octet_norm_bench,
// two threads, Zen 5, 2026-11-28, three alternating runs against the library
// before, bf16 time over f32 time, before -> after): LayerNorm forward (2048,
// 128) 1.28-1.40 -> 1.02-1.24, (1024, 768) 1.15-1.21 -> 0.93-0.99, (4096,
// 768) 1.11-1.17 -> 0.93-1.06; forward + backward (2048, 128) 1.17-1.39 ->
// 1.13-1.19, (1024, 768) 0.94-1.05 -> 0.94-0.98.
#include <octet/ops/cpu/norm_bf16_rows.h>

#if OCTET_CONVERT_X86_KERNELS
#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include <octet/core/bf16_avx512_internal.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/cpu/transpose16x16.h>

namespace octet::cpu {
namespace {

// 16 lanes of the output: (x - mu) * rs, then one FMA with w and b.
OCTET_TARGET_AVX512_BF16 OCTET_INLINE __m512 NormOutputLanes(__m512 x, __m512 mu, __m512 rs, __m512 w, __m512 b) {
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(x, mu), rs), w, b);
}

// 16 lanes of LayerNorm's dx, rs * (dy * w - mean_g - (x - mu) * rs * mean_gx),
// with the roundings NormBwdRows's loop spells out (NOTE [native bf16 norm
// output]).
OCTET_TARGET_AVX512_BF16 OCTET_INLINE __m512 LayerNormDxLanes(__m512 x, __m512 dy, __m512 w, __m512 mu, __m512 rs,
                                                              __m512 mean_g, __m512 mean_gx) {
  const __m512 g = _mm512_fmsub_ps(dy, w, mean_g);
  const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(x, mu), rs);
  return _mm512_mul_ps(rs, _mm512_fnmadd_ps(xhat, mean_gx, g));
}

// A forward row's elements as LoadFloatx16 reads them: bf16 bits, or f32.
OCTET_INLINE const uint16_t* RowLanes(const bfloat16* p) { return reinterpret_cast<const uint16_t*>(p); }
OCTET_INLINE const float* RowLanes(const float* p) { return p; }

// 32 output values (lo: the first 16) stored at y: narrowed to bf16, or f32.
OCTET_TARGET_AVX512_BF16 OCTET_INLINE void StoreOutputLanes(bfloat16* y, __m512 lo, __m512 hi) {
  _mm512_storeu_si512(reinterpret_cast<uint16_t*>(y), convert_internal::FloatToBf16x32Native(lo, hi));
}
OCTET_TARGET_AVX512_BF16 OCTET_INLINE void StoreOutputLanes(float* y, __m512 lo, __m512 hi) {
  _mm512_storeu_ps(y, lo);
  _mm512_storeu_ps(y + 16, hi);
}

// NOTE [short bf16 rows in registers]: the forward reads a row three times
// (mean, variance, output: NOTE [paired row statistics] in norm_cpu.cc),
// and a bf16 row is widened on each read, two instructions per 16 values on
// the vector ports an f32 row leaves to its loads. On short rows, whose data sits in L1,
// those widenings and the output's narrowing were what bf16 paid over f32:
// LayerNorm forward at the default GPT's (2048, 128) took 100 us in bf16
// against 91 in f32 (octet_norm_bench, AMX Xeon, 2026-11-29). A row of at
// most kShortRowMaxBlocks x 16 values, a multiple of 64, is therefore
// widened once into registers and the three passes run on the registers,
// three rows at a time up to 128 values and two above: the passes are
// chains of dependent adds (and the lanes' sum in order), so rows side by
// side hide each other's latency. Measured (octet_norm_bench
// BM_LayerNormFwd, medians of 3, three alternating rounds, us, f32 / bf16):
// (2048, 128) 86-93 / 100 before, 89-95 / 90-99 with two rows, 89-94 /
// 82-88 with three, 94-95 / 90-92 with four (spilled); (1024, 256) 84-86 /
// 95-100 with one row, 81-86 with two. The arithmetic is that of RowStats
// (norm_cpu.cc) and NormOutputLanes: lane l of the mean and of the variance accumulates
// elements l, l + 16, ... from a zero start in block order, the variance's
// products fused, and the lanes are added in order (Lanes::Sum), so the
// bits are the generic loop's (Norm.NativeBf16RowsMatchTheGenericLoop).

constexpr int64_t kShortRowMaxBlocks = 16;

// Rows [r, r + kRows) of a forward without residual or FP8 output, kBlocks
// x 16 values each (NOTE [short bf16 rows in registers]).
template <int kBlocks, int kRows, bool kCenter, typename T>
OCTET_TARGET_AVX512_BF16 OCTET_INLINE void ShortRows(const ShortNormFwdRows<T>& a, int64_t r) {
  using namespace convert_internal;
  __m512 x[kRows][kBlocks];
  for (int k = 0; k < kRows; ++k)
    for (int j = 0; j < kBlocks; ++j) x[k][j] = LoadFloatx16(RowLanes(a.x + (r + k) * a.c) + 16 * j);
  float mu[kRows] = {}, var[kRows];
  if constexpr (kCenter) {
    __m512 acc[kRows];
    for (int k = 0; k < kRows; ++k) acc[k] = _mm512_setzero_ps();
    for (int j = 0; j < kBlocks; ++j)
      for (int k = 0; k < kRows; ++k) acc[k] = _mm512_add_ps(acc[k], x[k][j]);
    // NOTE [unfused row statistics] in norm_cpu.cc.
    for (int k = 0; k < kRows; ++k) mu[k] = Unfused(SumLanesInOrder(acc[k]) * a.inv_c);
  }
  {
    __m512 acc[kRows], vmu[kRows];
    for (int k = 0; k < kRows; ++k) {
      acc[k] = _mm512_setzero_ps();
      vmu[k] = _mm512_set1_ps(mu[k]);
    }
    for (int j = 0; j < kBlocks; ++j)
      for (int k = 0; k < kRows; ++k) {
        const __m512 d = _mm512_sub_ps(x[k][j], vmu[k]);
        acc[k] = _mm512_fmadd_ps(d, d, acc[k]);
      }
    for (int k = 0; k < kRows; ++k) var[k] = Unfused(SumLanesInOrder(acc[k]) * a.inv_c);
  }
  for (int k = 0; k < kRows; ++k) {
    const float rs = 1.0f / std::sqrt(var[k] + a.eps);
    if constexpr (kCenter) a.mean[r + k] = mu[k];
    a.rstd[r + k] = rs;
    const __m512 vmu = _mm512_set1_ps(mu[k]), vrs = _mm512_set1_ps(rs);
    T* y = a.y + (r + k) * a.c;
    for (int j = 0; j < kBlocks; j += 2) {
      const __m512 lo = NormOutputLanes(x[k][j], vmu, vrs, LoadFloatx16(a.w + 16 * j), LoadFloatx16(a.b + 16 * j));
      const __m512 hi =
          NormOutputLanes(x[k][j + 1], vmu, vrs, LoadFloatx16(a.w + 16 * j + 16), LoadFloatx16(a.b + 16 * j + 16));
      StoreOutputLanes(y + 16 * j, lo, hi);
    }
  }
}

// SumLanesInOrder of each of 16 vectors, as lane k of the result: the
// vectors transposed (lane l of all 16 in one register), then added in lane
// order from zero, sixteen rows' chains side by side (NOTE [row statistics
// sixteen rows at a time]).
OCTET_TARGET_AVX512_BF16 OCTET_INLINE __m512 SumLanesInOrder16(const __m512 (&v)[16]) {
  __m512i in[16], out[16];
  for (int k = 0; k < 16; ++k) in[k] = _mm512_castps_si512(v[k]);
  Transpose16x16Epi32(in, out);
  __m512 s = _mm512_setzero_ps();
  for (int l = 0; l < 16; ++l) s = _mm512_add_ps(s, _mm512_castsi512_ps(out[l]));
  return s;
}

// NOTE [row statistics sixteen rows at a time]: SumLanesInOrder adds a
// row's 16 lanes one after another, a chain of dependent scalar adds that a
// short row's few blocks of arithmetic cannot hide; the mean's chain must
// end before the variance's pass, and the variance's before the output. So
// full batches of 16 rows take their statistics together: each row's lane
// sums are formed as before (lane l takes elements l, l + 16, ... from a
// zero start, in block order), the 16 sums are transposed so that one
// register holds lane l of every row, and 16 vector adds in lane order give
// the 16 rows' in-order sums at once; 1 / sqrt(var + eps) in vector form is
// the same correctly rounded operations as the scalar one (the multiply by
// 1/C and the add of eps in their rounding forms: NOTE [unfused row
// statistics] in norm_cpu.cc). A bf16 batch is widened once into f32
// scratch (16 rows of at most 256 values) and every pass reads it from L1.
// The same operations on every value, so the bits of the single-row kernels
// and of the generic loop (Norm.NativeBf16RowsMatchTheGenericLoop, bf16 and
// f32; Norm.RowsGiveTheSameBitsAloneAsInABatch). f32 rows of these widths
// take the same kernel where the CPU has AVX-512 BF16 (its target; elsewhere
// they take the generic loop). octet_norm_bench BM_LayerNormFwd and
// BM_LayerNormFwdBwd, AMX Xeon, two threads, libgomp's default wait policy,
// 2026-11-29, medians of 3 in three alternating rounds, us, before -> after:
// forward (2048, 128) f32 38-39 -> 22-23, bf16 36-37 -> 25-27; (1024, 256)
// f32 31-33 -> 21-23, bf16 36-37 -> 23-27; forward + backward (2048, 128)
// f32 105-107 -> 93-95, bf16 95-99 -> 84-93. The bf16 forward, 1.08-1.14x
// f32's time before, is 1.1-1.2x the faster f32 one now: its widening and
// narrowing are what is left (the narrowing's check for NaN and subnormal
// lanes alone ~2 us of its 25). The backward's two sums taken the same way
// (two passes of 16 rows, g rounded before its sum) measured no gain (86-87
// against 86 us at (2048, 128), 90-91 against 90-94 at (1024, 256)) and
// were not kept.
template <int kBlocks, bool kCenter, typename T>
OCTET_TARGET_AVX512_BF16 OCTET_INLINE void ShortRowsBatch16(const ShortNormFwdRows<T>& a, int64_t r) {
  using namespace convert_internal;
  const int64_t c = a.c;
  const float* x = nullptr;  // the batch's rows as f32, ld apart
  int64_t ld = c;
  alignas(64) float widened[std::is_same_v<T, float> ? 1 : 16 * 16 * kBlocks];
  if constexpr (std::is_same_v<T, float>) {
    x = a.x + r * c;
  } else {
    const uint16_t* xb = RowLanes(a.x + r * c);
    for (int k = 0; k < 16; ++k)
      for (int j = 0; j < kBlocks; ++j)
        _mm512_store_ps(widened + (k * kBlocks + j) * 16, LoadFloatx16(xb + k * c + 16 * j));
    x = widened;
    ld = 16 * kBlocks;
  }
  // The rounding forms keep GCC from fusing the multiplies by 1/C into what
  // follows (-ffp-contract=fast fuses plain vector arithmetic): the scalar
  // code rounds mu and var, then var + eps.
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 inv_c = _mm512_set1_ps(a.inv_c);
  alignas(64) float mu[16] = {}, rs[16];
  __m512 acc[16];
  if constexpr (kCenter) {
    for (int k = 0; k < 16; ++k) {
      acc[k] = _mm512_setzero_ps();
      for (int j = 0; j < kBlocks; ++j) acc[k] = _mm512_add_ps(acc[k], LoadFloatx16(x + k * ld + 16 * j));
    }
    const __m512 m = _mm512_mul_round_ps(SumLanesInOrder16(acc), inv_c, kRne);
    _mm512_store_ps(mu, m);
    _mm512_storeu_ps(a.mean + r, m);
  }
  for (int k = 0; k < 16; ++k) {
    const __m512 vmu = _mm512_set1_ps(mu[k]);
    acc[k] = _mm512_setzero_ps();
    for (int j = 0; j < kBlocks; ++j) {
      const __m512 d = _mm512_sub_ps(LoadFloatx16(x + k * ld + 16 * j), vmu);
      acc[k] = _mm512_fmadd_ps(d, d, acc[k]);
    }
  }
  const __m512 var = _mm512_mul_round_ps(SumLanesInOrder16(acc), inv_c, kRne);
  const __m512 vrs = _mm512_div_ps(_mm512_set1_ps(1.0f),
                                   _mm512_sqrt_ps(_mm512_add_round_ps(var, _mm512_set1_ps(a.eps), kRne)));
  _mm512_store_ps(rs, vrs);
  _mm512_storeu_ps(a.rstd + r, vrs);
  for (int k = 0; k < 16; ++k) {
    const __m512 vmu = _mm512_set1_ps(mu[k]), vr = _mm512_set1_ps(rs[k]);
    T* y = a.y + (r + k) * c;
    for (int j = 0; j < kBlocks; j += 2) {
      const __m512 lo = NormOutputLanes(LoadFloatx16(x + k * ld + 16 * j), vmu, vr, LoadFloatx16(a.w + 16 * j),
                                        LoadFloatx16(a.b + 16 * j));
      const __m512 hi = NormOutputLanes(LoadFloatx16(x + k * ld + 16 * j + 16), vmu, vr,
                                        LoadFloatx16(a.w + 16 * j + 16), LoadFloatx16(a.b + 16 * j + 16));
      StoreOutputLanes(y + 16 * j, lo, hi);
    }
  }
}

// Rows [r0, r1): batches of 16 (NOTE [row statistics sixteen rows at a
// time]), then as ShortRows takes them: three at a time up to 8 blocks, else
// two (NOTE [short bf16 rows in registers]).
template <int kBlocks, bool kCenter, typename T>
OCTET_TARGET_AVX512_BF16 void ShortRowsRange(const ShortNormFwdRows<T>& a, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 16 <= r1; r += 16) ShortRowsBatch16<kBlocks, kCenter>(a, r);
  if constexpr (kBlocks <= 8)
    for (; r + 3 <= r1; r += 3) ShortRows<kBlocks, 3, kCenter>(a, r);
  for (; r + 2 <= r1; r += 2) ShortRows<kBlocks, 2, kCenter>(a, r);
  for (; r < r1; ++r) ShortRows<kBlocks, 1, kCenter>(a, r);
}

// The backward's side of NOTE [short bf16 rows in registers]: a row's x and
// dy are widened once (two rows side by side up to 128 values) and its two
// sums, dx, and the dweight / dbias terms all run on the registers, with
// NormBwdRows' arithmetic: its lane sums in order, g * xhat and dy * xhat
// fused into their sums, explicitly in both (NOTE [explicit fused sums] in
// norm_cpu.cc). Norm.NativeBf16RowsMatchTheGenericLoop holds dx to the
// generic loop's bits in every build;
// dweight and dbias it sees only after their rounding to bf16. LayerNorm
// forward + backward (octet_norm_bench BM_LayerNormFwdBwd, medians of 3,
// three rounds, us, f32 / bf16): (2048, 128) 209-222 / 227-254 before ->
// 188-199 after; (1024, 256) 215-219 / 207 -> 178-189.
template <int kBlocks, int kRows, bool kCenter>
OCTET_TARGET_AVX512_BF16 OCTET_INLINE void ShortBwdRowsBf16(const Bf16NormBwdRows& a, int64_t r,
                                                            float* dw_acc, float* db_acc) {
  using namespace convert_internal;
  __m512 x[kRows][kBlocks], dy[kRows][kBlocks];
  for (int k = 0; k < kRows; ++k)
    for (int j = 0; j < kBlocks; ++j) {
      x[k][j] = LoadFloatx16(reinterpret_cast<const uint16_t*>(a.x + (r + k) * a.c) + 16 * j);
      dy[k][j] = LoadFloatx16(reinterpret_cast<const uint16_t*>(a.dy + (r + k) * a.c) + 16 * j);
    }
  __m512 vmu[kRows], vrs[kRows];
  for (int k = 0; k < kRows; ++k) {
    vmu[k] = _mm512_set1_ps(kCenter ? a.mean[r + k] : 0.0f);
    vrs[k] = _mm512_set1_ps(a.rstd[r + k]);
  }
  if (a.dx != nullptr) {
    __m512 sg[kRows], sgx[kRows];
    for (int k = 0; k < kRows; ++k) sg[k] = sgx[k] = _mm512_setzero_ps();
    for (int j = 0; j < kBlocks; ++j) {
      const __m512 w = _mm512_loadu_ps(a.w + 16 * j);
      for (int k = 0; k < kRows; ++k) {
        const __m512 g = _mm512_mul_ps(dy[k][j], w);
        sg[k] = _mm512_add_ps(sg[k], g);
        sgx[k] = _mm512_fmadd_ps(g, _mm512_mul_ps(_mm512_sub_ps(x[k][j], vmu[k]), vrs[k]), sgx[k]);
      }
    }
    for (int k = 0; k < kRows; ++k) {
      const float mean_g = kCenter ? SumLanesInOrder(sg[k]) * a.inv_c : 0.0f;
      const float mean_gx = SumLanesInOrder(sgx[k]) * a.inv_c;
      const __m512 vg = _mm512_set1_ps(mean_g), vgx = _mm512_set1_ps(mean_gx);
      auto* out = reinterpret_cast<uint16_t*>(a.dx + (r + k) * a.c);
      for (int j = 0; j < kBlocks; j += 2) {
        const __m512 lo =
            LayerNormDxLanes(x[k][j], dy[k][j], _mm512_loadu_ps(a.w + 16 * j), vmu[k], vrs[k], vg, vgx);
        const __m512 hi =
            LayerNormDxLanes(x[k][j + 1], dy[k][j + 1], _mm512_loadu_ps(a.w + 16 * j + 16), vmu[k], vrs[k], vg, vgx);
        _mm512_storeu_si512(out + 16 * j, FloatToBf16x32Native(lo, hi));
      }
    }
  }
  for (int k = 0; k < kRows; ++k)
    for (int j = 0; j < kBlocks; ++j) {
      if (dw_acc != nullptr) {
        const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(x[k][j], vmu[k]), vrs[k]);
        _mm512_storeu_ps(dw_acc + 16 * j, _mm512_fmadd_ps(dy[k][j], xhat, _mm512_loadu_ps(dw_acc + 16 * j)));
      }
      if (db_acc != nullptr)
        _mm512_storeu_ps(db_acc + 16 * j, _mm512_add_ps(_mm512_loadu_ps(db_acc + 16 * j), dy[k][j]));
    }
}

template <int kBlocks, bool kCenter>
OCTET_TARGET_AVX512_BF16 void ShortBwdRangeBf16(const Bf16NormBwdRows& a, int64_t r0, int64_t r1,
                                                float* dw_acc, float* db_acc) {
  int64_t r = r0;
  if constexpr (kBlocks <= 8)
    for (; r + 2 <= r1; r += 2) ShortBwdRowsBf16<kBlocks, 2, kCenter>(a, r, dw_acc, db_acc);
  for (; r < r1; ++r) ShortBwdRowsBf16<kBlocks, 1, kCenter>(a, r, dw_acc, db_acc);
}

}  // namespace

OCTET_TARGET_AVX512_BF16 void NormOutputRowBf16Native(const bfloat16* x, float mu, float rs, const float* w,
                                                      const float* b, bfloat16* y, int64_t c) {
  using namespace convert_internal;
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  auto* ys = reinterpret_cast<uint16_t*>(y);
  const __m512 vmu = _mm512_set1_ps(mu), vrs = _mm512_set1_ps(rs);
  int64_t i = 0;
  for (; i + 32 <= c; i += 32) {
    const __m512 lo = NormOutputLanes(LoadFloatx16(xs + i), vmu, vrs, LoadFloatx16(w + i), LoadFloatx16(b + i));
    const __m512 hi =
        NormOutputLanes(LoadFloatx16(xs + i + 16), vmu, vrs, LoadFloatx16(w + i + 16), LoadFloatx16(b + i + 16));
    _mm512_storeu_si512(ys + i, FloatToBf16x32Native(lo, hi));
  }
  for (; i < c; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(LowBits64(c - i));
    const __m512 v = NormOutputLanes(MaskLoadFloatx16(m, xs + i), vmu, vrs, MaskLoadFloatx16(m, w + i),
                                     MaskLoadFloatx16(m, b + i));
    _mm256_mask_storeu_epi16(ys + i, m, FloatToBf16x16Native(v));
  }
}

// LayerNorm's dx row (no dsum) in bf16, narrowed in registers.
OCTET_TARGET_AVX512_BF16 void LayerNormDxRowBf16Native(const bfloat16* x, const bfloat16* dy, const float* w, float mu,
                                                       float rs, float mean_g, float mean_gx, bfloat16* dx,
                                                       int64_t c) {
  using namespace convert_internal;
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  auto* out = reinterpret_cast<uint16_t*>(dx);
  const __m512 vmu = _mm512_set1_ps(mu), vrs = _mm512_set1_ps(rs);
  const __m512 vg = _mm512_set1_ps(mean_g), vgx = _mm512_set1_ps(mean_gx);
  int64_t i = 0;
  for (; i + 32 <= c; i += 32) {
    const __m512 lo =
        LayerNormDxLanes(LoadFloatx16(xs + i), LoadFloatx16(dys + i), LoadFloatx16(w + i), vmu, vrs, vg, vgx);
    const __m512 hi = LayerNormDxLanes(LoadFloatx16(xs + i + 16), LoadFloatx16(dys + i + 16), LoadFloatx16(w + i + 16),
                                       vmu, vrs, vg, vgx);
    _mm512_storeu_si512(out + i, FloatToBf16x32Native(lo, hi));
  }
  for (; i < c; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(LowBits64(c - i));
    const __m512 v = LayerNormDxLanes(MaskLoadFloatx16(m, xs + i), MaskLoadFloatx16(m, dys + i),
                                      MaskLoadFloatx16(m, w + i), vmu, vrs, vg, vgx);
    _mm256_mask_storeu_epi16(out + i, m, FloatToBf16x16Native(v));
  }
}

template <typename T>
ShortNormFwdRowsFn<T> ShortNormFwdRowsFor(bool center, int64_t c) {
  if (c % 64 != 0) return nullptr;
  switch (c / 16) {
    case 4: return center ? &ShortRowsRange<4, true, T> : &ShortRowsRange<4, false, T>;
    case 8: return center ? &ShortRowsRange<8, true, T> : &ShortRowsRange<8, false, T>;
    case 12: return center ? &ShortRowsRange<12, true, T> : &ShortRowsRange<12, false, T>;
    case 16: return center ? &ShortRowsRange<16, true, T> : &ShortRowsRange<16, false, T>;
    default: return nullptr;
  }
}
template ShortNormFwdRowsFn<bfloat16> ShortNormFwdRowsFor<bfloat16>(bool center, int64_t c);
template ShortNormFwdRowsFn<float> ShortNormFwdRowsFor<float>(bool center, int64_t c);

Bf16NormBwdRowsFn ShortBf16LayerNormBwdRowsFor(int64_t c) {
  if (c % 64 != 0) return nullptr;
  switch (c / 16) {
    case 4: return &ShortBwdRangeBf16<4, true>;
    case 8: return &ShortBwdRangeBf16<8, true>;
    case 12: return &ShortBwdRangeBf16<12, true>;
    case 16: return &ShortBwdRangeBf16<16, true>;
    default: return nullptr;
  }
}
static_assert(kShortRowMaxBlocks == 16, "the cases of ShortNormFwdRowsFor and ShortBf16LayerNormBwdRowsFor");

}  // namespace octet::cpu

#endif  // OCTET_CONVERT_X86_KERNELS
