// NOTE [column sums]: a bias gradient is the column sum of an output
// gradient (R, C), and its defined order is Sum's: every column adds its rows
// 0..R-1 in f32, from +0. Threads take blocks of columns and walk down the
// rows; inside a block the kernel holds a column's running sum in a register
// across four rows (((acc + x0) + x1) + x2) + x3, the same additions in the
// same order as row by row, with one load and store of the accumulator per
// four rows instead of one per row, and bf16 rows widened inside the loop (a
// shift). It is compiled for AVX-512 as well (NOTE [pointwise isa dispatch]).
// It replaced a fused form (widen a row segment into a buffer, quantize it,
// add it: three calls per row segment) and a separate loop in the
// reductions that agreed with it only by following the same order. Measured
// (Zen 5 VM, 2 threads, 2026-11-24): in the small O1 GPT step the bias-
// gradient casts fell from ~4.1 % to ~1.9 % of CPU samples (perf); in
// alternating wall-clock runs of QuantizeWithBiasGrad on bf16 (1024-4096 x
// 256-3072) both forms took 0.10-0.15 ns an element, within this VM's noise.
#include <octet/ops/cpu/column_sums.h>

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <type_traits>

#include <octet/core/convert.h>
#include <octet/core/convert_internal.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/isa.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/row_helpers.h>

namespace octet::cpu {
namespace {

// The widest column block: its accumulators (4 KiB) stay in L1.
constexpr int64_t kMaxCols = 1024;

// acc[0, w) += rows [0, R) of x (row stride ld elements) as f32, in row
// order. f32 and bf16 rows are read in place (bf16 widened inside the loop);
// f16 and f64 rows are widened into bufs (4 x w floats) first.
template <typename T>
OCTET_INLINE void AddRowsBody(const T* x, int64_t R, int64_t ld, int64_t w, float* acc, float* bufs) {
  int64_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const RowIn<T, float> x0(x + r * ld, w, bufs), x1(x + (r + 1) * ld, w, bufs + w),
        x2(x + (r + 2) * ld, w, bufs + 2 * w), x3(x + (r + 3) * ld, w, bufs + 3 * w);
    float* __restrict a = acc;
    for (int64_t j = 0; j < w; ++j) {
      float s = a[j];
      s += x0[j];
      s += x1[j];
      s += x2[j];
      s += x3[j];
      a[j] = s;
    }
  }
  for (; r < R; ++r) {
    const RowIn<T, float> xr(x + r * ld, w, bufs);
    float* __restrict a = acc;
    for (int64_t j = 0; j < w; ++j) a[j] += xr[j];
  }
}

#if OCTET_CONVERT_X86_KERNELS
// acc[c, w) += rows [0, R) of bf16 bits xs, a column at a time (the vector
// kernels' last columns), each adding its rows in order as AddRowsBody does.
OCTET_INLINE void AddBf16ColumnsOneByOne(const uint16_t* xs, int64_t R, int64_t ld, int64_t c, int64_t w, float* acc) {
  for (; c < w; ++c) {
    float s = acc[c];
    for (int64_t r = 0; r < R; ++r) s += Bf16BitsToFloat(xs[r * ld + c]);
    acc[c] = s;
  }
}

// NOTE [bf16 column sums in even and odd lanes]: a bf16 row segment widened
// 16 values at a time (a zero-extend and a shift, both on the vector ports)
// left the bf16 column sums port-bound where the f32 ones wait on their add
// chains: the default GPT's bias gradient (2048, 128) took 8.6 us in bf16
// against 7.6 in f32 (octet_norm_bench BM_BiasGrad, active wait, AMX Xeon,
// 2026-11-29). On AVX-512 CPUs a bf16 block is summed 32 columns per 64-byte
// load instead: the even columns are the load shifted left by 16 bits, the
// odd ones the load with its low halves cleared, each into its own
// accumulator, up to 128 columns held in registers down all the rows, and
// put back in column order at the end. Every column still adds its rows in
// order from the block's accumulator, so the bits are the loop's
// (BiasGrad.SumsAreRowOrderFloatSumsInBothIsaBuilds). octet_norm_bench
// BM_BiasGrad, active wait, medians of 3, three rounds, us, f32 / bf16:
// (2048, 128) 6.6-7.1 / 6.5-7.0 (bf16 was 8.6); (2048, 512) 84-90 / 30-35;
// (1024, 3072) 280-283 / 136-143.
template <int kUnits>
OCTET_TARGET_AVX512 OCTET_INLINE void AddRowsBf16Units(const uint16_t* x, int64_t R, int64_t ld, float* acc) {
  __m512 even[kUnits], odd[kUnits];
  const __m512i idx_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i idx_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int u = 0; u < kUnits; ++u) {
    // The accumulator's columns split the same way (f32 lanes, not bf16).
    const __m512 a0 = _mm512_loadu_ps(acc + 32 * u), a1 = _mm512_loadu_ps(acc + 32 * u + 16);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    even[u] = _mm512_permutex2var_ps(a0, ev, a1);
    odd[u] = _mm512_permutex2var_ps(a0, _mm512_add_epi32(ev, _mm512_set1_epi32(1)), a1);
  }
  for (int64_t r = 0; r < R; ++r) {
    const uint16_t* row = x + r * ld;
    for (int u = 0; u < kUnits; ++u) {
      const __m512i v = _mm512_loadu_si512(row + 32 * u);
      even[u] = _mm512_add_ps(even[u], _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
      odd[u] = _mm512_add_ps(odd[u], _mm512_castsi512_ps(_mm512_and_si512(v, high)));
    }
  }
  for (int u = 0; u < kUnits; ++u) {
    _mm512_storeu_ps(acc + 32 * u, _mm512_permutex2var_ps(even[u], idx_lo, odd[u]));
    _mm512_storeu_ps(acc + 32 * u + 16, _mm512_permutex2var_ps(even[u], idx_hi, odd[u]));
  }
}

// acc[0, w) += rows [0, R) of a bf16 x (NOTE [bf16 column sums in even and
// odd lanes]); the last w % 32 columns as AddRowsBody adds them.
OCTET_TARGET_AVX512 void AddRowsBf16Avx512(const bfloat16* x, int64_t R, int64_t ld, int64_t w, float* acc,
                                           float* /*bufs*/) {
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  int64_t c = 0;
  for (; c + 128 <= w; c += 128) AddRowsBf16Units<4>(xs + c, R, ld, acc + c);
  for (; c + 32 <= w; c += 32) AddRowsBf16Units<1>(xs + c, R, ld, acc + c);
  AddBf16ColumnsOneByOne(xs, R, ld, c, w, acc);
}
#endif

#if OCTET_CONVERT_X86_KERNELS && defined(__AVX2__)
// NOTE [bf16 column sums in even and odd lanes] on AVX2 (the library's
// baseline build where the CPU runs it): 16 columns per 32-byte load, the
// even ones the load shifted left by 16 bits and the odd ones the load with
// its low halves cleared, up to 64 columns (8 accumulators, enough to cover
// the adds' latency) held in registers down all the rows. Before, the bf16
// sums took f32's time or more on an AVX2-only CPU (the generic loop widens
// 8 values per zero-extending load and a shift). octet_norm_bench
// BM_BiasGrad, AMD EPYC Zen 3, 2 threads, three alternating rounds, medians
// of 3, us, bf16 before -> after (f32 in the same sitting): (1024, 256)
// 15.3-16.8 -> 9.3-9.6 (14.0-15.7); (1024, 768) 34-36 -> 24-25 (39-41);
// (1024, 3072) 167-186 -> 123-126 (169-178); (2048, 128) 16.4-18.2 ->
// 8.9-9.1 (15.2-15.5); (2048, 512) 49-55 -> 32-36 (54). In the small O2 GPT
// step (scripts/omp_regions.sh) 49 -> 32 us a call.
template <int kUnits>
OCTET_INLINE void AddRowsBf16UnitsAvx2(const uint16_t* x, int64_t R, int64_t ld, float* acc) {
  __m256 even[kUnits], odd[kUnits];
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int u = 0; u < kUnits; ++u) {
    // Columns [0, 8) and [8, 16) as (0 2 4 6 1 3 5 7) and (8 10 .. 15).
    const __m256 p0 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(acc + 16 * u), split);
    const __m256 p1 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(acc + 16 * u + 8), split);
    even[u] = _mm256_permute2f128_ps(p0, p1, 0x20);
    odd[u] = _mm256_permute2f128_ps(p0, p1, 0x31);
  }
  for (int64_t r = 0; r < R; ++r) {
    const uint16_t* row = x + r * ld;
    for (int u = 0; u < kUnits; ++u) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 * u));
      even[u] = _mm256_add_ps(even[u], _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
      odd[u] = _mm256_add_ps(odd[u], _mm256_castsi256_ps(_mm256_and_si256(v, high)));
    }
  }
  for (int u = 0; u < kUnits; ++u) {
    // Per 128-bit lane, unpacklo gives columns (0 1 2 3 | 8 9 10 11) and
    // unpackhi (4 5 6 7 | 12 13 14 15).
    const __m256 lo = _mm256_unpacklo_ps(even[u], odd[u]), hi = _mm256_unpackhi_ps(even[u], odd[u]);
    _mm256_storeu_ps(acc + 16 * u, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(acc + 16 * u + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
}

// acc[0, w) += rows [0, R) of a bf16 x on AVX2; the last w % 16 columns as
// AddRowsBody adds them.
void AddRowsBf16Avx2(const bfloat16* x, int64_t R, int64_t ld, int64_t w, float* acc, float* /*bufs*/) {
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  int64_t c = 0;
  for (; c + 64 <= w; c += 64) AddRowsBf16UnitsAvx2<4>(xs + c, R, ld, acc + c);
  for (; c + 32 <= w; c += 32) AddRowsBf16UnitsAvx2<2>(xs + c, R, ld, acc + c);
  for (; c + 16 <= w; c += 16) AddRowsBf16UnitsAvx2<1>(xs + c, R, ld, acc + c);
  AddBf16ColumnsOneByOne(xs, R, ld, c, w, acc);
}
#endif

template <typename T>
void ColumnSumsTyped(const T* x, int64_t R, int64_t C, float* out) {
  // As many equal blocks as threads (a multiple of 16 columns), at most
  // kMaxCols wide: each thread one contiguous share of the columns.
  const int64_t threads = std::max(omp_get_max_threads(), 1);
  const int64_t cols = std::clamp<int64_t>(((C + threads - 1) / threads + 15) / 16 * 16, 16, kMaxCols);
  const int64_t nblocks = (C + cols - 1) / cols;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(R * cols, 1));
  auto add_rows = IsaBuild<&AddRowsBody<T>>();
#if OCTET_CONVERT_X86_KERNELS
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (UseAvx512Kernels()) add_rows = &AddRowsBf16Avx512;  // NOTE [bf16 column sums in even and odd lanes]
#if defined(__AVX2__)
    else if (octet::internal::ActiveConverterIsa().avx2)
      add_rows = &AddRowsBf16Avx2;
#endif
  }
#endif
  ParallelFor(nblocks, grain, [&](int64_t b0, int64_t b1) {
    alignas(64) float acc[kMaxCols];
    alignas(64) float bufs[RowIn<T, float>::kInPlace ? 1 : 4 * kMaxCols];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * cols, w = std::min(cols, C - c0);
      std::fill(acc, acc + w, 0.0f);
      add_rows(x + c0, R, C, w, acc, bufs);
      std::copy(acc, acc + w, out + c0);
    }
  });
}

}  // namespace

void ColumnSumsF32(const void* x, DType dtype, int64_t R, int64_t C, float* out) {
  if (C <= 0) return;
  if (R <= 0) {
    std::fill(out, out + C, 0.0f);
    return;
  }
  Dispatch<DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64>(
      dtype, "column sums", [&]<typename T>() { ColumnSumsTyped(static_cast<const T*>(x), R, C, out); });
}

}  // namespace octet::cpu
