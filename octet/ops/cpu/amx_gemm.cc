// A BF16 GEMM on AMX tiles (see amx_gemm.h).
//
// NOTE [amx gemm]: where oneDNN 2.6 runs its bf16 matmul on AMX
// (brg:avx512_core_amx_bf16), its kernels reached 1540-2080 GFLOP/s on two
// threads inside the wide O1 step (ONEDNN_VERBOSE), a quarter of the tiles'
// peak (7.1 TFLOP/s), and least where K is 3072 or the output is f32 (the
// weight gradients). This GEMM reads the same operands — a row-major bf16 A and B
// packed by PackVnniB into the layout oneDNN chose, whose 32-row blocks are
// AMX's pair-row B tiles (a tile of 16 columns is 16 rows of 64 bytes,
// 4 * n_block bytes apart) — and computes 32 x 32 blocks of C on four
// accumulator tiles: per 32 values of K two A tiles (16 rows each, loaded in
// place) and two B tiles, four TDPBF16PS. The work is cut into chunks of
// 256 rows x 64 columns, ordered rows-major so that a thread's consecutive
// chunks share their A rows (in L2) and stream B; inside a chunk the two
// 32-column blocks of a row block come one after the other, so each output
// row gets 128 contiguous bytes (bf16) at a time; the accumulators go
// through a 32 x 32 f32 block on the stack, where the epilogue adds the bias,
// scales, and rounds to bf16 or stores f32. Rows past m come from a
// zero-padded copy of the last rows (tile loads read 16 whole rows);
// columns past n are B's zero padding, computed and dropped.
//
// Measured on the AMX Xeon (2 threads), per call inside the wide O1 step
// (ONEDNN_VERBOSE for oneDNN's, the same calls timed around AmxGemm), ms:
//   M x K x N         out    oneDNN  this
//   1024x3072x768     bf16   2.90    2.46   (forward proj, dgrad fc)
//   1024x2304x768     bf16   1.74    1.54
//   1024x768x768      bf16   0.63    0.65
//   2304x1024x768     f32    2.02    1.88   (weight gradients)
//   3072x1024x768     f32    2.62    2.32
//   768x1024x3072     f32    3.14    2.92
//   768x1024x768      f32    0.79    0.70
//   1024x768x2304     bf16   1.99    2.10
//   1024x768x3072     bf16   2.45    2.93   (forward fc, dgrad proj)
// oneDNN wins only where N > 3 K (a wide output from a short K), so those
// stay on oneDNN (RunsOnAmxGemm in dnnl_gemm.cc); the wide O1 step went from
// 99.4 / 100 / 97.6 to 95.4 / 95.4 / 95.0 ms, O2 from 92.2 / 91.3 / 88.6 to
// 87.2 / 88.3 / 86.0 (octet_train_step_bench, alternating
// OCTET_CPU_AMX_GEMM=0 and 1). The loop itself with its operands in L1 runs at
// 3400-3550 GFLOP/s a thread (the probe's peak), with one of them from L2
// at ~3000, with both from L2 at 1800-2200: what bounds it is operand
// traffic, not the loop. Tried and not kept: blocking K (128-768) with the
// accumulators through an f32 buffer, software prefetch of the next A panel
// and B chunk (both 0-10 % slower), chunks of 0.5-2 MiB of A instead of 256
// rows, and column blocks outermost (both slower on every shape), 512-row
// chunks, non-temporal stores of the output (+3 ms a wide O1 step). Writing
// the output is a fair part of the wide-output GEMMs: without the epilogue
// 1024x768x3072 took 2.17 ms against 2.81, 768x1024x3072 (f32) 2.12 against
// 2.87, which is where oneDNN's 2.45 on the former comes from. Fetching the
// output lines for writing (PREFETCHW) while the tiles compute: mean call
// 1.902 / 1.925 -> 1.856 / 1.862 ms (1024x768x3072 2.94 / 2.98 -> 2.87 /
// 2.84), wide O2 step 97.7 / 96.5 / 96.9 -> 92.9 / 93.4 / 96.1 ms on a noisy
// stretch; still not enough for the N > 3 K shapes. 64-column
// chunks (the two blocks of a row block back to back) against 32: mean call
// 1.646 / 1.584 / 1.610 against 1.669 / 1.687 / 1.662 ms over the step's
// AMX GEMMs in three alternating runs, ~1.3 ms a wide O1 step; they did not
// win back the N > 3 K shapes (1024x768x3072 2.70 against 2.95). Preparing
// an FP8 or transposed A inside the kernel, a chunk of rows at a time into
// an L2 buffer (instead of the conversion and row-major copy passes of
// matmul_cpu.cc), lost 2-3 ms a wide O1 step and 2-8 ms a small one: the
// separate passes stream A faster than the threads prepare it between their
// tiles. A's rows
// must be 64-byte aligned to be fast (half the speed otherwise): K a
// multiple of 32 and octet's 64-byte aligned storage give that.
#include <octet/ops/cpu/amx_gemm.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <octet/core/convert.h>
#include <octet/core/env.h>
#include <octet/core/error.h>
#include <octet/ops/cpu/dnnl_gemm.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu_gemm_path.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include <octet/ops/cpu/amx_tiles.h>
#endif

namespace octet::cpu {
namespace {

constexpr int64_t kRows = 32;        // rows of a C block (two tiles)
constexpr int64_t kCols = 32;        // columns of a C block (two tiles)
constexpr int64_t kChunkRows = 256;  // rows of a chunk (NOTE [amx gemm])
constexpr int64_t kChunkCols = 64;   // columns of a chunk: two C blocks side by side

std::atomic<int> g_forced{-1};

// Whether the CPU may run it at all: AMX granted, oneDNN's ISA includes it,
// and the environment does not make this CPU one without AVX-512 or its BF16
// extension (EnvironmentConverterIsa, not the converters' ISA word, which
// tests change).
bool Permitted() {
  return octet::internal::AmxTilesPermitted() && DnnlUsesAmxBf16() && octet::internal::EnvironmentConverterIsa().bf16;
}

bool Decide() {
  // Read first, so that a bad value is an error on every CPU.
  const bool wanted = ::octet::internal::ReadEnvSwitch("OCTET_CPU_AMX_GEMM") == 0;  // 1, the default
  return wanted && Permitted();
}

#if defined(__x86_64__)
#define OCTET_AMX_GEMM_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,amx-tile,amx-bf16,prfchw")))

// The epilogue of one C block: acc (32 x 32 f32, row-major) into out rows
// [r0, r0 + rows) and columns [c0, c0 + cols).
OCTET_AMX_GEMM_TARGET void Epilogue(const AmxGemmArgs& g, const float* acc, int64_t r0, int64_t rows, int64_t c0,
                                    int64_t cols) {
  const __m512 scale = _mm512_set1_ps(g.scale != nullptr ? *g.scale : 1.0f);
  const uint32_t mask32 = cols >= 32 ? 0xFFFFFFFFu : (1u << cols) - 1u;
  const __mmask16 m0 = static_cast<__mmask16>(mask32), m1 = static_cast<__mmask16>(mask32 >> 16);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (g.bias != nullptr) {
    bias0 = _mm512_maskz_loadu_ps(m0, g.bias + c0);
    bias1 = _mm512_maskz_loadu_ps(m1, g.bias + c0 + 16);
  }
  for (int64_t r = 0; r < rows; ++r) {
    __m512 v0 = _mm512_load_ps(acc + r * kCols), v1 = _mm512_load_ps(acc + r * kCols + 16);
    if (g.bias_first) {
      v0 = _mm512_add_ps(v0, bias0);
      v1 = _mm512_add_ps(v1, bias1);
    }
    if (g.scale != nullptr) {
      v0 = _mm512_mul_ps(v0, scale);
      v1 = _mm512_mul_ps(v1, scale);
    }
    if (g.bias != nullptr && !g.bias_first) {
      v0 = _mm512_add_ps(v0, bias0);
      v1 = _mm512_add_ps(v1, bias1);
    }
    if (g.out_dtype == DType::kFloat32) {
      float* o = static_cast<float*>(g.out) + (r0 + r) * g.ldc + c0;
      _mm512_mask_storeu_ps(o, m0, v0);
      _mm512_mask_storeu_ps(o + 16, m1, v1);
    } else {
      uint16_t* o = static_cast<uint16_t*>(g.out) + (r0 + r) * g.ldc + c0;
      _mm256_mask_storeu_epi16(o, m0, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v0)));
      _mm256_mask_storeu_epi16(o + 16, m1, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v1)));
    }
  }
}

// Chunks [w0, w1) of the grid (row chunks major, column blocks minor).
// tail: the last m % 32 rows, zero-padded to 32 rows of k (or null).
OCTET_AMX_GEMM_TARGET void Chunks(const AmxGemmArgs& g, const uint16_t* tail, int64_t nblocks, int64_t w0,
                                  int64_t w1) {
  const PackedBLayout& L = g.layout;
  const int64_t full_rows = g.m / kRows * kRows;
  const int64_t b_row_bytes = 4 * L.n_block;  // one pair-row of a block
  alignas(64) float acc[kRows * kCols];
  const int64_t out_size = g.out_dtype == DType::kFloat32 ? 4 : 2;
  _tile_loadconfig(&FullTiles());
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t mc = w / nblocks, cc = w % nblocks * kChunkCols;
    const int64_t r_end = std::min(g.m, (mc + 1) * kChunkRows);
    for (int64_t r0 = mc * kChunkRows; r0 < r_end; r0 += kRows) {
      const uint16_t* a0 = r0 < full_rows ? g.a + r0 * g.lda : tail;
      const int64_t lda = r0 < full_rows ? g.lda : g.k;
      const uint16_t* a1 = a0 + 16 * lda;
      const bool two_rows = r0 + 16 < g.m;
      const int64_t rows = std::min(kRows, g.m - r0);
      const int64_t per_step = (rows + g.k / 32 - 1) / (g.k / 32);  // output rows prefetched a step of K
      for (int64_t c0 = cc; c0 < std::min(g.n, cc + kChunkCols); c0 += kCols) {
        const bool two_cols = c0 + 16 < L.n_padded;
        // B's tiles for columns c0 and c0 + 16 at k-block 0.
        const uint16_t* b0 = g.b + c0 / L.n_block * L.stride_nb + c0 % L.n_block * 2;
        const uint16_t* b1 = g.b + (c0 + 16) / L.n_block * L.stride_nb + (c0 + 16) % L.n_block * 2;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        char* out_row0 = static_cast<char*>(g.out) + (r0 * g.ldc + c0) * out_size;
        for (int64_t kb = 0, kk = 0; kk < g.k; ++kb, kk += 32) {
          // The block's output lines, fetched for writing while the tiles
          // compute (PREFETCHW): a few rows each step of K.
          for (int64_t r = kb * per_step; r < std::min(rows, (kb + 1) * per_step); ++r) {
            char* line = out_row0 + r * g.ldc * out_size;
            __builtin_prefetch(line, 1, 3);
            if (out_size == 4) __builtin_prefetch(line + 64, 1, 3);
          }
          _tile_loadd(4, a0 + kk, lda * 2);
          _tile_loadd(6, b0 + kb * L.stride_kb, b_row_bytes);
          _tile_dpbf16ps(0, 4, 6);
          if (two_cols) {
            _tile_loadd(7, b1 + kb * L.stride_kb, b_row_bytes);
            _tile_dpbf16ps(1, 4, 7);
          }
          if (two_rows) {
            _tile_loadd(5, a1 + kk, lda * 2);
            _tile_dpbf16ps(2, 5, 6);
            if (two_cols) _tile_dpbf16ps(3, 5, 7);
          }
        }
        _tile_stored(0, acc, kCols * 4);
        _tile_stored(1, acc + 16, kCols * 4);
        _tile_stored(2, acc + 16 * kCols, kCols * 4);
        _tile_stored(3, acc + 16 * kCols + 16, kCols * 4);
        asm volatile("" : : "r"(acc) : "memory");  // the tile stores wrote acc
        Epilogue(g, acc, r0, rows, c0, std::min(kCols, g.n - c0));
      }
    }
  }
  _tile_release();
}
#endif  // __x86_64__

}  // namespace

bool AmxGemmEnabled() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  static const bool decided = Decide();
  if (forced >= 0) return forced == 1 && Permitted();
  return decided;
}

void SetAmxGemmForTesting(int forced) { g_forced.store(forced, std::memory_order_relaxed); }

bool AmxGemmTakes(const PackedBLayout& layout, int64_t k, DType out_dtype) {
  return k > 0 && k % 32 == 0 && layout.k_block == 32 && layout.n_block % 16 == 0 && layout.n_block > 0 &&
         layout.k_padded >= k && (out_dtype == DType::kFloat32 || out_dtype == DType::kBFloat16);
}

void AmxGemm(const AmxGemmArgs& g) {
  OCTET_CHECK(AmxGemmEnabled(), "AmxGemm: this process does not run the AMX GEMM (AmxGemmEnabled() is false)");
  OCTET_CHECK(AmxGemmTakes(g.layout, g.k, g.out_dtype), "AmxGemm: unsupported geometry: k ", g.k, ", k_block ",
              g.layout.k_block, ", n_block ", g.layout.n_block, ", out ", Name(g.out_dtype));
  OCTET_CHECK(g.m > 0 && g.n > 0 && g.n <= g.layout.n_padded && g.lda >= g.k && g.ldc >= g.n,
              "AmxGemm: bad dims: m ", g.m, ", n ", g.n, " (padded ", g.layout.n_padded, "), lda ", g.lda, ", ldc ",
              g.ldc);
#if defined(__x86_64__)
  // The last m % 32 rows, zero-padded (tile loads read 16 whole rows).
  thread_local std::vector<uint16_t> tail;
  const int64_t full_rows = g.m / kRows * kRows;
  const uint16_t* tail_rows = nullptr;
  if (full_rows < g.m) {
    tail.assign(static_cast<size_t>(kRows * g.k), 0);
    for (int64_t r = full_rows; r < g.m; ++r)
      std::memcpy(tail.data() + (r - full_rows) * g.k, g.a + r * g.lda, static_cast<size_t>(g.k) * 2);
    tail_rows = tail.data();
  }
  const int64_t nblocks = (g.n + kChunkCols - 1) / kChunkCols;
  const int64_t mchunks = (g.m + kChunkRows - 1) / kChunkRows;
  ParallelFor(mchunks * nblocks, 1, [&](int64_t w0, int64_t w1) { Chunks(g, tail_rows, nblocks, w0, w1); });
#else
  OCTET_FAIL("AmxGemm: not an x86-64 build");
#endif
}

}  // namespace octet::cpu
