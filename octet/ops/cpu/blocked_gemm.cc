// NOTE [blocked gemm]: the FP32-FMA path (NOTE [CPU GEMM path] in
// ops/cpu_gemm_path.h) runs BF16 and FP8 GEMMs on FP32 FMAs. Through
// oneDNN 2.6 that takes two buffers and two passes of their own around
// every GEMM: its f32 matmul reads only f32 and writes only f32, so A is
// widened into an f32 copy first and a bf16 output narrowed from an f32 one
// after (NOTE [FP32-FMA path costs] in matmul_cpu.cc). This GEMM widens its
// operands while it packs them and scales, biases and narrows its output
// while it stores it: what issue 12 asks of the path ("widening to FP32
// while packing").
//
// Structure: Goto's algorithm as BLIS has it. B is packed once per call,
// in kKc-deep blocks of 32-column panels ([block][panel][k][32],
// zero-padded), by all threads together; each task then takes a block of
// output rows x up to kNcMax columns, packs its A rows kKc columns at a
// time into 12-row panels ([panel][k][12]) and runs the register-tile
// kernel (12 x 32: 24 zmm accumulators, two B vectors, A broadcast from
// memory) on every (row panel, column panel) pair, column panel outer: the
// B panel (48 KiB) stays in L1/L2 while the A block streams from L2, and
// the kernel of a column's last row panel prefetches the next B panel.
// Tasks are claimed from a shared counter, column block outer so that
// consecutive tasks share their B block (NOTE [balanced split] in loops.h
// for why not a fixed split). Blocks after the first add to the output's
// f32 partial sums (the output itself when it is f32, a per-task buffer
// when it is bf16); the last block's store applies the scale and the bias
// and writes f32, or rounds in the registers to bf16 exactly as
// FloatToBf16Bits does, so a bf16 output's bits are the rounding of this
// GEMM's f32 result. Every output element is summed over
// k in one fixed order, whatever the thread count.
//
// Measured (Zen 5 VM, 2 threads, 2026-11-27; the FP32-FMA path forced with
// OCTET_CPU_GEMM=fp32; "before" is oneDNN's f32 matmul with the two
// passes, OCTET_BENCH_FP32FMA_ONEDNN=1 / the */fp32fma_onednn benchmarks):
// - the kernel alone (A and B in cache) runs at 215-220 GFLOP/s, 98-100 %
//   of one thread's FP32 FMA peak; the whole GEMM at 0.90-1.00x oneDNN's
//   f32 matmul speed (B column-major, f32; 0.92-0.99 at the GPT shapes);
// - octet_matmul_bench */fp32fma against */fp32fma_onednn: 1.00-1.09x the
//   time in a loop that keeps everything in cache;
// - octet_train_step_bench, three alternating rounds: step time the same
//   within the VM's noise (small O2 79.2 / 79.8 / 85.0 ms against 74.1 /
//   83.3 / 80.9; wide O2 296 / 287 / 309 against 275 / 299 / 309), one
//   process per wide config 1-2 % slower (284 / 285 / 294 against 280 /
//   283 / 290 ms at O2 / O1 / O1 with FP8 state); peak RSS 26-28 MiB
//   lower (wide O2 293 against 319 MiB, O1 322 against 350, O1 with FP8
//   state 250 against 277): the f32 copy of A and the f32 output are gone.
// So it is kept for the memory, at the speed of what it replaced; it does
// not make O2 or O1 faster than O0 on this path (the widening and
// narrowing arithmetic is still done, now inside the GEMM).
//
// AVX-512 only. A 6 x 16 AVX2 version (12 ymm accumulators, the same
// packing) ran 8-12 % slower than oneDNN's gemm:jit plus the two passes
// (octet_matmul_bench with ONEDNN_MAX_CPU_ISA=AVX2 OCTET_DISABLE_AVX512=1 on
// the same Zen 5: 2048^3 91-93 against 83-84 ms), so CPUs without AVX-512
// keep oneDNN; it was not measured on a real AVX2-only CPU.
#include <octet/ops/cpu/blocked_gemm.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/ops/cpu/isa.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define OCTET_BLOCKED_GEMM_X86 1
#include <octet/core/bf16_simd_internal.h>
#else
#define OCTET_BLOCKED_GEMM_X86 0
#endif

namespace octet::cpu {

#if OCTET_BLOCKED_GEMM_X86
static std::atomic<int64_t> calls{0};
static std::atomic<bool> enabled{true};  // internal::SetBlockedGemmEnabledForTesting

namespace {

// Where one register tile goes. Blocks before the last store (first block)
// or add (later blocks) the raw sums; the last one also multiplies by
// *scale and adds bias[j].
struct TileOut {
  float* c;          // (rows, cols) with row stride ldc
  int64_t ldc;
  int rows, cols;    // <= mr, <= nr
  bool accumulate;   // c += sums, else c = sums
  const float* scale;  // null: no scale
  const float* bias;   // bias of this tile's first column, or null
  const float* next_b;  // the B panel the next tile reads from another cache level, or null
  uint16_t* c16;        // when set, the tile goes here as bf16 (row stride ldc16) instead of to c
  int64_t ldc16;
};

// The register tile: kMr rows x kNr columns of C.
constexpr int kMr = 12, kNr = 32;
// Blocking. Swept on the Zen 5 (kc 192-512, rows per task 48-192, columns
// 256-3072; whole GEMM against oneDNN's f32 matmul): these were best or
// within the noise of best at the GPT shapes.
constexpr int64_t kKc = 384;      // k per block
constexpr int64_t kMcTarget = 120;  // rows per task, about
constexpr int64_t kNcMax = 768;   // columns per task, at most
constexpr int64_t kBGroup = 256;  // columns of a row-major B widened per pass

// ---- kernels (AVX-512) --------------------------------------------------------------------------

OCTET_AVX512_TARGET inline __mmask16 LaneMask16(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// FloatToBf16Bits of 16 lanes (round to nearest even, NaN -> the canonical
// NaN, subnormals kept; core/bfloat16.h) as 16 words.
OCTET_AVX512_TARGET inline __m256i NarrowToBf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(kBf16CanonicalNaN));
  return _mm512_cvtepi32_epi16(r);
}

// c (+)= a (a kc x 12 panel, [k][12]) · b (a kc x 32 panel, [k][32]), then
// TileOut's epilogue.
OCTET_AVX512_TARGET void Kernel(int64_t kc, const float* __restrict a, const float* __restrict b, const TileOut& o) {
  // The partial sums come from L2 or L3: ask for them now, so they are in
  // L1 when the k loop is done.
  if (o.accumulate)
    for (int i = 0; i < o.rows; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(o.c + i * o.ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(o.c + i * o.ldc + 16), _MM_HINT_T0);
    }
  __m512 acc0[kMr], acc1[kMr];
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const float* next_b = o.next_b != nullptr ? o.next_b : b;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * 32), b1 = _mm512_load_ps(b + k * 32 + 16);
    _mm_prefetch(reinterpret_cast<const char*>(next_b + k * 32), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next_b + k * 32 + 16), _MM_HINT_T0);
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      const __m512 av = _mm512_set1_ps(a[k * kMr + i]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
  }
  const __mmask16 m0 = LaneMask16(o.cols), m1 = LaneMask16(o.cols - 16);
  const __m512 scale = _mm512_set1_ps(o.scale != nullptr ? *o.scale : 1.0f);
  const __m512 bias0 = o.bias != nullptr ? _mm512_maskz_loadu_ps(m0, o.bias) : _mm512_setzero_ps();
  const __m512 bias1 = o.bias != nullptr ? _mm512_maskz_loadu_ps(m1, o.bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) {
    if (i >= o.rows) break;
    float* c = o.c + i * o.ldc;
    __m512 v0 = acc0[i], v1 = acc1[i];
    if (o.accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    if (o.scale != nullptr) {
      v0 = _mm512_mul_ps(v0, scale);
      v1 = _mm512_mul_ps(v1, scale);
    }
    if (o.bias != nullptr) {
      v0 = _mm512_add_ps(v0, bias0);
      v1 = _mm512_add_ps(v1, bias1);
    }
    if (o.c16 != nullptr) {
      uint16_t* c16 = o.c16 + i * o.ldc16;
      _mm256_mask_storeu_epi16(c16, m0, NarrowToBf16(v0));
      _mm256_mask_storeu_epi16(c16 + 16, m1, NarrowToBf16(v1));
    } else {
      _mm512_mask_storeu_ps(c, m0, v0);
      _mm512_mask_storeu_ps(c + 16, m1, v1);
    }
  }
}

// r[i] (i < 16) becomes column i of the 16 x 16 matrix whose rows were r.
OCTET_AVX512_TARGET inline void Transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

// dst[t * ld + i] = rows[i][t] for i < nrows, 0 for nrows <= i < ld; t < len.
// ld is a multiple of 4 (masked 16-lane stores).
OCTET_AVX512_TARGET void Transpose(const float* const* rows, int nrows, int64_t len, float* dst, int ld) {
  for (int g = 0; g < ld; g += 16) {
    const __mmask16 store_mask = LaneMask16(ld - g);
    for (int64_t t0 = 0; t0 < len; t0 += 16) {
      const int tl = static_cast<int>(std::min<int64_t>(16, len - t0));
      const __mmask16 load_mask = LaneMask16(tl);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = g + i < nrows ? _mm512_maskz_loadu_ps(load_mask, rows[g + i] + t0) : _mm512_setzero_ps();
      Transpose16x16(r);
      for (int t = 0; t < tl; ++t) _mm512_mask_storeu_ps(dst + (t0 + t) * ld + g, store_mask, r[t]);
    }
  }
}

// ---- packing ----------------------------------------------------------------------------

const void* At(const GemmOperand& x, int64_t i, int64_t j) {
  return static_cast<const char*>(x.data) + (i * x.row_stride + j * x.col_stride) * static_cast<int64_t>(SizeOf(x.dtype));
}

// dst[0, n) = the f32 values of n consecutive elements at src (bf16 and FP8
// exactly; an f32 run rounded to bf16 values when round_bf16).
void WidenRun(const void* src, DType dtype, bool round_bf16, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kFloat32:
      if (round_bf16)
        convert_internal::RoundToBf16Row(static_cast<const float*>(src), n, dst);
      else
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16: Bf16ToFloatRow(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2: DequantizeRow(static_cast<const uint8_t*>(src), dtype, 1.0f, dst, n); return;
    default: OCTET_FAIL("matmul: the blocked GEMM takes no ", Name(dtype), " operand");
  }
}

// The f32 run at src, read in place when it needs no conversion, else widened into tmp.
const float* RunOf(const void* src, DType dtype, bool round_bf16, int64_t n, float* tmp) {
  if (dtype == DType::kFloat32 && !round_bf16) return static_cast<const float*>(src);
  WidenRun(src, dtype, round_bf16, n, tmp);
  return tmp;
}

// Per-thread buffers (64-byte aligned; grown, never shrunk).
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(data_); }
  float* Get(int64_t floats) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(floats, 16)) * sizeof(float);
    if (bytes > capacity_) {
      std::free(data_);
      capacity_ = (bytes + 4095) / 4096 * 4096;
      data_ = static_cast<float*>(std::aligned_alloc(64, capacity_));
      if (data_ == nullptr) {
        capacity_ = 0;
        OCTET_FAIL("matmul: could not allocate ", bytes, " bytes for the blocked GEMM");
      }
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

struct ThreadBuffers {
  Buffer packed_a, partial, widen, packed_b;
};
ThreadBuffers& Buffers() {
  thread_local ThreadBuffers buffers;
  return buffers;
}

// A's rows [i0, i0 + mc) x columns [p0, p0 + kc) as mr-row panels [panel][k][mr].
void PackA(const GemmOperand& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* out,
           float* tmp) {
  constexpr int mr = kMr;
  if (a.col_stride == 1) {  // row-major: each row's run widened, then transposed
    const float* rows[kMr];
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const int nrows = static_cast<int>(std::min<int64_t>(mr, mc - ir));
      for (int i = 0; i < nrows; ++i) rows[i] = RunOf(At(a, i0 + ir + i, p0), a.dtype, false, kc, tmp + i * kc);
      Transpose(rows, nrows, kc, out + ir * kc, mr);
    }
    return;
  }
  // column-major: each column's run of mc rows widened, then cut into panels
  for (int64_t k = 0; k < kc; ++k) {
    const float* col = RunOf(At(a, i0, p0 + k), a.dtype, false, mc, tmp);
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const int64_t nrows = std::min<int64_t>(mr, mc - ir);
      float* dst = out + ir * kc + k * mr;
      std::memcpy(dst, col + ir, static_cast<size_t>(nrows) * sizeof(float));
      for (int64_t i = nrows; i < mr; ++i) dst[i] = 0.0f;
    }
  }
}

struct PackedB {
  float* data;
  int64_t panels;  // ceil(n / nr)
  // The panel (kc x kNr, [k][kNr]) of columns [jr * kNr, ...) in the block of rows [p0, p0 + kc).
  float* Panel(int64_t p0, int64_t kc, int64_t jr) const { return data + (p0 * panels + jr * kc) * kNr; }
};

// One pack-B work item: rows [p0, p0 + kc) and the columns of panel group
// `group` (row-major b: kBGroup columns; column-major: one panel).
void PackBItem(const BlockedGemmArgs& g, const PackedB& pb, int64_t p0, int64_t kc, int64_t group,
               float* tmp) {
  constexpr int nr = kNr;
  const GemmOperand& b = g.b;
  if (b.col_stride == 1) {  // row-major: each row's run widened, then cut into panels
    const int64_t j0 = group * kBGroup, w = std::min<int64_t>(kBGroup, g.n - j0);
    for (int64_t k = 0; k < kc; ++k) {
      const float* row = RunOf(At(b, p0 + k, j0), b.dtype, g.b_round_bf16, w, tmp);
      for (int64_t j = 0; j < w; j += nr) {
        const int64_t cols = std::min<int64_t>(nr, w - j);
        float* dst = pb.Panel(p0, kc, (j0 + j) / nr) + k * nr;
        std::memcpy(dst, row + j, static_cast<size_t>(cols) * sizeof(float));
        for (int64_t c = cols; c < nr; ++c) dst[c] = 0.0f;
      }
    }
    return;
  }
  // column-major: each column's run widened, then transposed into the panel
  const int64_t j0 = group * nr;
  const int ncols = static_cast<int>(std::min<int64_t>(nr, g.n - j0));
  const float* cols[kNr];
  for (int j = 0; j < ncols; ++j) cols[j] = RunOf(At(b, p0, j0 + j), b.dtype, g.b_round_bf16, kc, tmp + j * kc);
  Transpose(cols, ncols, kc, pb.Panel(p0, kc, group), nr);
}

void CheckOperand(const GemmOperand& x, const char* name) {
  OCTET_CHECK(x.dtype == DType::kFloat32 || x.dtype == DType::kBFloat16 || IsFp8(x.dtype), "matmul: the blocked GEMM's ",
              name, " is ", Name(x.dtype), "; it takes float32, bfloat16 or FP8");
  OCTET_CHECK(x.col_stride == 1 || x.row_stride == 1, "matmul: the blocked GEMM's ", name,
              " is neither row- nor column-major (strides ", x.row_stride, ", ", x.col_stride, ")");
}

}  // namespace

bool BlockedGemmAvailable() { return enabled.load(std::memory_order_relaxed) && UseAvx512Kernels(); }

int64_t BlockedGemmCalls() { return calls.load(std::memory_order_relaxed); }

void BlockedGemm(const BlockedGemmArgs& g) {
  OCTET_CHECK(UseAvx512Kernels(), "matmul: the blocked GEMM needs AVX-512, which this CPU lacks or has disabled");
  CheckOperand(g.a, "a");
  CheckOperand(g.b, "b");
  OCTET_CHECK(!g.b_round_bf16 || g.b.dtype == DType::kFloat32, "matmul: b_round_bf16 needs an f32 b");
  OCTET_CHECK(g.out_dtype == DType::kFloat32 || g.out_dtype == DType::kBFloat16,
              "matmul: the blocked GEMM writes float32 or bfloat16, not ", Name(g.out_dtype));
  calls.fetch_add(1, std::memory_order_relaxed);
  if (g.m <= 0 || g.n <= 0) return;
  OCTET_CHECK(g.k > 0, "matmul: the blocked GEMM needs k > 0");
  constexpr int mr = kMr, nr = kNr;
  const int64_t m = g.m, n = g.n, k = g.k;
  const PackedB pb{Buffers().packed_b.Get((n + nr - 1) / nr * nr * k), (n + nr - 1) / nr};
  const int64_t kblocks = (k + kKc - 1) / kKc;
  const int64_t bgroups = g.b.col_stride == 1 ? (n + kBGroup - 1) / kBGroup : pb.panels;
  const bool f32_out = g.out_dtype == DType::kFloat32;
  uint16_t* const out16 = f32_out ? nullptr : static_cast<uint16_t*>(g.out);
  // Small products run on the calling thread (a region's fork and join
  // costs more than they do: NOTE [fork-join cost] in loops.h).
  const int max_threads = omp_in_parallel() || m * n * k < (int64_t{1} << 21) ? 1 : omp_get_max_threads();
  // Tasks: row tiles x column tiles, cut in whole panels as evenly as can be,
  // their number a multiple of the thread count where that is possible.
  const int64_t row_panels = (m + mr - 1) / mr;
  const int64_t ntiles = (pb.panels * nr + kNcMax - 1) / kNcMax;
  int64_t mtiles = std::max<int64_t>(1, (m + kMcTarget / 2) / kMcTarget);
  if (max_threads > 1) {
    const int64_t t = max_threads;
    const int64_t tasks0 = (mtiles * ntiles + t - 1) / t * t;
    if (tasks0 % ntiles == 0) mtiles = tasks0 / ntiles;
  }
  mtiles = std::min(mtiles, row_panels);
  const int64_t tasks = mtiles * ntiles;
  const int64_t mc_max = (row_panels + mtiles - 1) / mtiles * mr;
  const int64_t nc_max = (pb.panels + ntiles - 1) / ntiles * nr;
  const int threads = static_cast<int>(std::min<int64_t>(max_threads, tasks));
  std::atomic<int64_t> next_task{0};
  // An exception must not leave an OpenMP region: a thread whose buffers
  // cannot be allocated (the only thing that can throw once the arguments
  // are checked) records it, every thread still meets the packing loop's
  // barrier, and the error is rethrown after the region.
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(threads)
  {
    float *widen = nullptr, *packed_a = nullptr, *partial = nullptr;
    try {
      ThreadBuffers& buffers = Buffers();
      widen = buffers.widen.Get(std::max<int64_t>({kNr * kKc, kBGroup, mc_max}));
      packed_a = buffers.packed_a.Get(mc_max * kKc);
      partial = f32_out ? nullptr : buffers.partial.Get(mc_max * nc_max);
    } catch (...) {
#pragma omp critical(octet_blocked_gemm_error)
      if (!error) error = std::current_exception();
      failed.store(true);
    }
#pragma omp for schedule(static)
    for (int64_t item = 0; item < kblocks * bgroups; ++item) {
      const int64_t p0 = item / bgroups * kKc;
      if (widen != nullptr) PackBItem(g, pb, p0, std::min(kKc, k - p0), item % bgroups, widen);
    }
    // (the loop's barrier: B is packed, or failed is set)
    for (int64_t task = failed.load() ? tasks : next_task.fetch_add(1, std::memory_order_relaxed); task < tasks;
         task = next_task.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t ti = task % mtiles, tj = task / mtiles;  // column tile outer: consecutive tasks share a B block
      const int64_t i0 = row_panels * ti / mtiles * mr, i1 = std::min(m, row_panels * (ti + 1) / mtiles * mr);
      const int64_t j0 = pb.panels * tj / ntiles * nr, j1 = std::min(n, pb.panels * (tj + 1) / ntiles * nr);
      const int64_t mc = i1 - i0, nc = j1 - j0;
      // The f32 sums of this task's block: the output itself, or `partial`
      // (a bf16 output takes the last block's sums from the registers).
      float* c = f32_out ? static_cast<float*>(g.out) + i0 * g.out_row_stride + j0 : partial;
      const int64_t ldc = f32_out ? g.out_row_stride : nc_max;
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t kc = std::min(kKc, k - p0);
        const bool last = p0 + kc == k;
        PackA(g.a, i0, mc, p0, kc, packed_a, widen);
        for (int64_t jr = j0 / nr; jr * nr < j0 + nc; ++jr) {
          const int64_t jt = jr * nr - j0;  // the tile's first column within the block
          const float* bpanel = pb.Panel(p0, kc, jr);
          for (int64_t ir = 0; ir < mc; ir += mr) {
            TileOut o{c + ir * ldc + jt,
                      ldc,
                      static_cast<int>(std::min<int64_t>(mr, mc - ir)),
                      static_cast<int>(std::min<int64_t>(nr, nc - jt)),
                      p0 > 0,
                      last && g.has_scale ? &g.scale : nullptr,
                      last && g.bias != nullptr ? g.bias + j0 + jt : nullptr,
                      ir + mr >= mc && (jr + 1) * nr < j1 ? pb.Panel(p0, kc, jr + 1) : nullptr,
                      last && !f32_out ? out16 + (i0 + ir) * g.out_row_stride + j0 + jt : nullptr,
                      g.out_row_stride};
            Kernel(kc, packed_a + ir * kc, bpanel, o);
          }
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

#else  // not x86-64

bool BlockedGemmAvailable() { return false; }
int64_t BlockedGemmCalls() { return 0; }
void BlockedGemm(const BlockedGemmArgs&) { OCTET_FAIL("matmul: the blocked GEMM runs only on x86-64"); }

#endif

}  // namespace octet::cpu

namespace octet::internal {
void SetBlockedGemmEnabledForTesting(bool on) {
#if OCTET_BLOCKED_GEMM_X86
  cpu::enabled.store(on, std::memory_order_relaxed);
#else
  (void)on;
#endif
}
}  // namespace octet::internal
