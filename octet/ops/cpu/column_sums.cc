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

#include <algorithm>

#include <octet/core/convert.h>
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

template <typename T>
void ColumnSumsTyped(const T* x, int64_t R, int64_t C, float* out) {
  // As many equal blocks as threads (a multiple of 16 columns), at most
  // kMaxCols wide: each thread one contiguous share of the columns.
  const int64_t threads = std::max(omp_get_max_threads(), 1);
  const int64_t cols = std::clamp<int64_t>(((C + threads - 1) / threads + 15) / 16 * 16, 16, kMaxCols);
  const int64_t nblocks = (C + cols - 1) / cols;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(R * cols, 1));
  const auto add_rows = IsaBuild<&AddRowsBody<T>>();
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
