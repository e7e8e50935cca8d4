#include <octet/ops/cpu/gemm_pack.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#include <octet/core/bf16_avx512_internal.h>
#include <octet/core/bf16_simd_internal.h>
#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/transpose8x8.h>

namespace octet::cpu {
namespace {

constexpr int64_t kMaxKBlock = 32;
constexpr int64_t kMaxNBlock = 64;

// dst[0, bytes) = src[0, bytes). The runs packing copies are whole rows or
// columns of a block: 32 to 256 bytes. Those sizes are fixed-size copies the
// compiler inlines as one to four vector loads and stores; through memcpy's
// length dispatch, the 64-byte FP8 rows alone cost 2-3 % of a small GPT step
// at O1 (perf, Zen 5).
inline void CopyRun(void* dst, const void* src, int64_t bytes) {
  switch (bytes) {
    case 32: std::memcpy(dst, src, 32); return;
    case 64: std::memcpy(dst, src, 64); return;
    case 128: std::memcpy(dst, src, 128); return;
    case 256: std::memcpy(dst, src, 256); return;
    default: std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
}

// dst[0, n) = src[0, n), bf16 bits (FP8 blocks go through NOTE [fp8 packing]).
inline void LoadRow(const void* src, int64_t n, uint16_t* dst) { CopyRun(dst, src, n * 2); }

inline uint16_t LoadOne(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Raw FP8 codes, for the tiles NOTE [fp8 packing] converts in one call.
inline void CopyBytes(const char* p, int64_t n, uint8_t* row) { CopyRun(row, p, n); }
inline uint8_t ByteAt(const char* p) { return static_cast<uint8_t>(*p); }

// o[2n] = r0[n], o[2n + 1] = r1[n] for n in [0, nb). The compiler does not
// find the shuffle net for this loop; with AVX2 it is two unpacks and two
// lane permutes per 16 pairs (`octet_matmul_bench --benchmark_filter=PackB`).
inline void InterleaveRows(const uint16_t* r0, const uint16_t* r1, int64_t nb, uint16_t* o) {
  int64_t n = 0;
#if defined(__AVX2__)
  for (; n + 16 <= nb; n += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + n));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + n));
    // Per 128-bit lane: lo = a0 b0 .. a3 b3 | a8 b8 .. a11 b11, hi = a4 b4 .. a7 b7 | a12 b12 ..
    const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * n), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * n + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
#endif
  for (; n < nb; ++n) {
    o[2 * n] = r0[n];
    o[2 * n + 1] = r1[n];
  }
}

// One kb x nb block from a tile held k-major (tile[k * nb + n]): rows 2p and
// 2p+1 interleaved.
inline void InterleaveKMajor(const uint16_t* tile, int64_t kb, int64_t nb, uint16_t* out) {
  for (int64_t p = 0; p < kb / 2; ++p) InterleaveRows(tile + 2 * p * nb, tile + (2 * p + 1) * nb, nb, out + p * 2 * nb);
}

// One kb x nb block from a tile held n-major (tile[n * kb + k]): the pair
// (k, k+1) is already adjacent, so this transposes 32-bit units,
// out32[p * nb + n] = tile32[n * kb/2 + p].
inline void TransposePairs(const uint16_t* tile, int64_t kb, int64_t nb, uint16_t* out) {
  const int64_t pairs = kb / 2;
#if defined(__AVX2__)
  if (pairs % 8 == 0 && nb % 8 == 0) {
    for (int64_t n = 0; n < nb; n += 8)
      for (int64_t p = 0; p < pairs; p += 8)
        Transpose8x8Dwords(reinterpret_cast<const float*>(tile + 2 * (n * pairs + p)), pairs,
                           reinterpret_cast<float*>(out + 2 * (p * nb + n)), nb);
    return;
  }
#endif
  uint32_t t32[kMaxNBlock * kMaxKBlock / 2];
  uint32_t o32[kMaxNBlock * kMaxKBlock / 2];
  std::memcpy(t32, tile, static_cast<size_t>(nb * kb) * 2);
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t p = 0; p < pairs; ++p) o32[p * nb + n] = t32[n * pairs + p];
  std::memcpy(out, o32, static_cast<size_t>(nb * kb) * 2);
}

// f32 values of a row of src_dtype (float32 or bfloat16). Rows are short (64
// elements, 16 from a column-major B), so bf16 is widened inline — a shift
// the compiler vectorises — rather than by the row converter, whose per-call
// dispatch made packing 3-5 % of a wide GPT step on the fp32-FMA path (perf,
// Zen 5). PackB 768 x 3072 bf16 -> f32: row-major 334 -> 214 us,
// column-major 866 -> 375 us.
inline void LoadF32Row(const char* src, DType dtype, int64_t n, float* dst) {
  if (dtype == DType::kFloat32) {
    CopyRun(dst, src, n * 4);
  } else {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = Bf16BitsToFloat(s[i]);
  }
}

// dst[i] = the f32 value of src[i] (f32) rounded to bf16 precision (NOTE
// [narrowed B]): what widening FloatToBf16Bits(src[i]) gives, so the FP32-FMA
// path computes on exactly the bf16 values the BF16 path would.
inline void LoadF32RoundedRow(const char* src, int64_t n, float* dst) {
  convert_internal::RoundToBf16Row(reinterpret_cast<const float*>(src), n, dst);
}

// NOTE [narrowed B] for an f32 B: each element rounded as FloatToBf16Bits
// does, eight at a time with AVX2 integer arithmetic, straight from B into
// the tile or the block. (A first version rounded in a plain loop per
// element, which the compiler did not vectorise well: packing went from 4 %
// to 7 % of a wide GPT step at O2; gathering each block as f32 and rounding
// it with one FloatToBf16Row call was no faster, two extra passes over the
// block.)

// dst[i] = FloatToBf16Bits(src[i]), i < n: a contiguous run of an f32 B.
inline void NarrowRun(const char* src, int64_t n, uint16_t* dst) {
  const float* s = reinterpret_cast<const float*>(src);
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), convert_internal::FloatToBf16x16(s + i));
#endif
  for (; i < n; ++i) dst[i] = FloatToBf16Bits(s[i]);
}

inline uint16_t NarrowOne(const char* p) {
  float v;
  std::memcpy(&v, p, 4);
  return FloatToBf16Bits(v);
}

// o[2n] = bf16(r0[n]), o[2n + 1] = bf16(r1[n]), n < nb: two rows of an f32 B
// rounded and interleaved in one step (the pair is one 32-bit word, r1's
// value in the high half).
inline void NarrowInterleaveRows(const float* r0, const float* r1, int64_t nb, uint16_t* o) {
  int64_t n = 0;
#if defined(__AVX2__)
  for (; n + 8 <= nb; n += 8) {
    const __m256i a = convert_internal::FloatToBf16x8(_mm256_loadu_ps(r0 + n));
    const __m256i b = convert_internal::FloatToBf16x8(_mm256_loadu_ps(r1 + n));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * n), _mm256_or_si256(a, _mm256_slli_epi32(b, 16)));
  }
#endif
  for (; n < nb; ++n) {
    o[2 * n] = FloatToBf16Bits(r0[n]);
    o[2 * n + 1] = FloatToBf16Bits(r1[n]);
  }
}

#if OCTET_CONVERT_X86_KERNELS
// NOTE [native narrowing in packing]: at O2 every forward and input-gradient
// GEMM packs its weight from the f32 master, rounding each value to bf16
// (NOTE [narrowed B]): into the VNNI layout on the BF16 path, to bf16 values
// kept in f32 on the FP32-FMA path. With AVX2 integer arithmetic that
// rounding made the f32 -> VNNI pack the slowest of all from memory
// (octet_matmul_bench PackB/.../dtype:4/cold:1 on a Zen 5: 600-657 us for
// 768 x 3072, against 177-218 for a bf16 B and 356-437 for an f32 -> f32
// pack of the same bytes). Where the CPU has AVX-512 BF16 (and the
// converters use it: CpuHasAvx512Bf16), whole blocks are rounded with its
// conversion instructions instead (FloatToBf16x32Native /
// FloatToBf16x16Native: the same bits, subnormal and NaN lanes redone by the
// integer form); partial edge blocks keep the AVX2 code, except in a
// column-major VNNI tile, whose short runs load masked. The FP32-FMA path
// matters on such CPUs too: the Intel Xeons it exists for have AVX-512 BF16
// at half rate. Measured (minima of 5, alternating with the AVX2 form):
// VNNI row-major 600-608 -> 434-445 us from memory, column-major 656-657 ->
// 450-468; rounded f32 row-major 456-493 -> 425-453, column-major 422-432 ->
// 354-387. (Loading every column run of the VNNI tile with masks was slower
// than AVX2, 858-863 us: whole runs load unmasked.)

// A whole kb x nb block of a row-major f32 B (row k at s0 + k * sk), rounded
// and interleaved in k pairs: out[p * 2 * nb + 2 * n + i] = B(2p + i, n).
OCTET_TARGET_AVX512_BF16 void NarrowInterleaveBlockNative(const float* s0, int64_t sk, int64_t kb, int64_t nb,
                                                          uint16_t* out) {
  // FloatToBf16x32Native(r0, r1) holds r0's 16 words, then r1's: interleave.
  alignas(64) static constexpr uint16_t kIdx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  for (int64_t p = 0; p < kb / 2; ++p) {
    const float* r0 = s0 + 2 * p * sk;
    const float* r1 = r0 + sk;
    uint16_t* o = out + p * 2 * nb;
    int64_t n = 0;
    for (; n + 16 <= nb; n += 16) {
      const __m512i w = convert_internal::FloatToBf16x32Native(_mm512_loadu_ps(r0 + n), _mm512_loadu_ps(r1 + n));
      _mm512_storeu_si512(o + 2 * n, _mm512_permutexvar_epi16(idx, w));
    }
    for (; n < nb; ++n) {
      o[2 * n] = FloatToBf16Bits(r0[n]);
      o[2 * n + 1] = FloatToBf16Bits(r1[n]);
    }
  }
}

// tile[n * kb + k] = bf16 of B(k0 + k, n0 + n), zero-padded to kb x nb, from
// a column-major f32 B (columns of K values, sn apart): LoadColumnTile with
// NarrowRun, 32 values per conversion, the padding from masked loads (+0.0
// narrows to 0).
OCTET_TARGET_AVX512_BF16 void NarrowColumnTileNative(const float* base, int64_t sn, int64_t k0, int64_t n0,
                                                     int64_t kn, int64_t nn, int64_t kb, int64_t nb,
                                                     uint16_t* tile) {
  for (int64_t n = 0; n < nb; ++n) {
    uint16_t* t = tile + n * kb;
    if (n >= nn) {
      std::fill(t, t + kb, uint16_t{0});
      continue;
    }
    const float* col = base + (n0 + n) * sn + k0;
    if (kn == 32 && kb == 32) {  // a whole run: no masks
      _mm512_storeu_si512(t, convert_internal::FloatToBf16x32Native(_mm512_loadu_ps(col), _mm512_loadu_ps(col + 16)));
      continue;
    }
    for (int64_t k = 0; k < kb; k += 32) {
      const int64_t left = std::clamp<int64_t>(kn - k, 0, 32);
      const __mmask16 lo = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
      const __mmask16 hi = static_cast<__mmask16>(left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1);
      const __m512i w = convert_internal::FloatToBf16x32Native(_mm512_maskz_loadu_ps(lo, col + k),
                                                               _mm512_maskz_loadu_ps(hi, col + k + 16));
      const int64_t words = std::min<int64_t>(32, kb - k);
      _mm512_mask_storeu_epi16(t + k, static_cast<__mmask32>(words >= 32 ? 0xFFFFFFFFu : (1u << words) - 1), w);
    }
  }
}

// The f32 values of 16 lanes rounded to bf16 precision (RoundToBf16Row's
// values): the FP32-FMA path's form of a narrowed B.
OCTET_TARGET_AVX512_BF16 OCTET_INLINE __m512 RoundToBf16x16Native(__m512 x) {
  const __m512i words = _mm512_cvtepu16_epi32(convert_internal::FloatToBf16x16Native(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
}

// A whole kb x nb block of a row-major f32 B (row k at s0 + k * sk) rounded
// to bf16 precision into the f32 layout's block (row k at out + k * nb);
// nb a multiple of 16.
OCTET_TARGET_AVX512_BF16 void RoundRowBlockNative(const float* s0, int64_t sk, int64_t kb, int64_t nb, float* out) {
  for (int64_t k = 0; k < kb; ++k)
    for (int64_t n = 0; n < nb; n += 16)
      _mm512_storeu_ps(out + k * nb + n, RoundToBf16x16Native(_mm512_loadu_ps(s0 + k * sk + n)));
}

// The same from a column-major f32 B (column n of the block at c0 + n * sn)
// into a column-major tile (column n at tile + n * kb) for the caller to
// transpose; kb a multiple of 16.
OCTET_TARGET_AVX512_BF16 void RoundColumnTileNative(const float* c0, int64_t sn, int64_t kb, int64_t nb,
                                                    float* tile) {
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t k = 0; k < kb; k += 16)
      _mm512_storeu_ps(tile + n * kb + k, RoundToBf16x16Native(_mm512_loadu_ps(c0 + n * sn + k)));
}
#endif  // OCTET_CONVERT_X86_KERNELS

void CheckLayout(const char* who, const PackedBLayout& l, int64_t K, int64_t N, bool pairs) {
  const int64_t kb = l.k_block, nb = l.n_block;
  OCTET_CHECK(kb > 0 && kb <= kMaxKBlock && (!pairs || kb % 2 == 0) && nb > 0 && nb <= kMaxNBlock &&
                  l.k_padded % kb == 0 && l.n_padded % nb == 0 && l.k_padded >= K && l.n_padded >= N &&
                  l.stride_kb >= kb * nb && l.stride_nb >= kb * nb,
              who, ": unsupported layout (blocks ", kb, " x ", nb, ", padded ", l.k_padded, " x ", l.n_padded,
              ") for B ", K, " x ", N);
}

// One kb x nb block of B: its first element (k0, n0) and how much of it
// lies inside B (kn rows, nn columns; the rest is padding).
struct Block {
  int64_t k0, n0, kn, nn;
};

// NOTE [pack order]: in a training step packing mostly reads B from memory,
// not from a cache: a weight or an activation was last touched long before
// its GEMM. Visited in the order of the output (down each nb-wide column
// panel, k blocks inner), a row-major B is read as kb rows of nb elements,
// each row a separate stream 3-12 KiB from the next, and the hardware
// prefetchers do not follow; a column-major B as nb column streams, too many
// for them to track. So a row-major B is visited along its rows (n blocks
// inner: each of the kb row streams runs on across the blocks) and a
// column-major one down its columns (k blocks inner) with the next run of
// each column prefetched in software (PrefetchColumnRuns).
// Measured on a Zen 5 (2 threads, 2026-11-24; minima of 5 runs, old -> new):
// octet_matmul_bench PackB, 768 x 3072, from memory (cold:1), row-major /
// column-major, in us: bf16 -> VNNI 300 -> 221-245 / 317-325 -> 183-184;
// f32 -> VNNI 767-873 -> 483-531 / 793-898 -> 524-616; f32 -> f32 459-463
// -> 363-366 / 676-679 -> 362-393; bf16 -> f32 538-555 -> 244-284 / 591-605
// -> 297-328. From the cache (cold:0) the new order is 10-35 % slower (the
// output is no longer written in order; row-major bf16 84 -> 115 us), and a
// training step sees mostly the first case: in octet_train_step_bench,
// timing every pack call, six alternating runs of the wide GPT at O2 gave
// 0.535 -> 0.449 ms per call (lower in each pair; ~2.3 ms of a 168 ms
// step), five of the small one at O2 0.072 -> 0.063 ms and of the wide one
// at O0 0.760 -> 0.695 ms.
enum class PackOrder {
  kAlongRows,     // n blocks inner: a row-major B
  kDownColumns,   // k blocks inner: a column-major (or any other) B
};

// Calls fn(block, tile, out) for every block of `l` that overlaps B, on the
// OpenMP pool, in `order` (NOTE [pack order]); out is the block's place in
// dst and tile a per-thread scratch of kMaxKBlock x kMaxNBlock elements.
// Blocks wholly in the padding are zeroed here.
template <typename E, typename F>
void ForEachBlock(const PackedBLayout& l, int64_t K, int64_t N, E* dst, PackOrder order, F&& fn) {
  const int64_t kb = l.k_block, nb = l.n_block, kblocks = l.k_padded / kb, nblocks = l.n_padded / nb;
  const bool along_rows = order == PackOrder::kAlongRows;
  ParallelFor(kblocks * nblocks, 16, [&](int64_t b0, int64_t b1) {
    alignas(64) E tile[kMaxNBlock * kMaxKBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t nbi = along_rows ? b % nblocks : b / kblocks, kbi = along_rows ? b / nblocks : b % kblocks;
      const Block blk{kbi * kb, nbi * nb, std::clamp<int64_t>(K - kbi * kb, 0, kb),
                      std::clamp<int64_t>(N - nbi * nb, 0, nb)};
      E* out = dst + kbi * l.stride_kb + nbi * l.stride_nb;
      if (blk.kn == 0 || blk.nn == 0) {
        std::fill(out, out + kb * nb, E{0});
        continue;
      }
      fn(blk, tile, out);
    }
  });
}

// Prefetches, in each column of blk in a column-major B of K rows, the run
// of the block kPrefetchBytes further down (NOTE [pack order]; 64 to 1024
// bytes measured, 128-256 best). Always inlined: GCC takes a function whose
// only effect is a prefetch for pure, and drops the calls to it.
inline constexpr int64_t kPrefetchBytes = 128;
OCTET_INLINE void PrefetchColumnRuns(const char* base, int64_t esz, int64_t sn, const Block& blk, int64_t kb, int64_t K) {
  const int64_t ahead = std::max<int64_t>(1, kPrefetchBytes / (kb * esz));
  const int64_t k0 = blk.k0 + ahead * kb;
  if (k0 >= K) return;
  const int64_t bytes = std::min(kb, K - k0) * esz;
  for (int64_t n = 0; n < blk.nn; ++n) {
    const char* p = base + ((blk.n0 + n) * sn + k0) * esz;
    for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch(p + c, /*rw=*/0, /*locality=*/3);
  }
}

// tile[n * kb + k] = B(k0 + k, n0 + n), zero-padded to kb x nb, from a
// column-major B (its columns are contiguous runs of K elements of esz
// bytes, sn elements apart); load(p, n, row) converts n elements.
template <typename E, typename Load>
void LoadColumnTile(const char* base, int64_t esz, int64_t sn, const Block& blk, int64_t kb, int64_t nb,
                    Load&& load, E* tile) {
  for (int64_t n = 0; n < nb; ++n) {
    E* t = tile + n * kb;
    if (n < blk.nn) {
      load(base + ((blk.n0 + n) * sn + blk.k0) * esz, blk.kn, t);
      std::fill(t + blk.kn, t + kb, E{0});
    } else {
      std::fill(t, t + kb, E{0});
    }
  }
}

// tile[k * nb + n] = B(k0 + k, n0 + n), zero-padded to kb x nb, for any
// strides: whole runs through load() when B is row-major, else element by
// element through load_one(p).
template <typename E, typename Load, typename LoadOneFn>
void LoadRowTile(const char* base, int64_t esz, int64_t sk, int64_t sn, const Block& blk, int64_t kb, int64_t nb,
                 Load&& load, LoadOneFn&& load_one, E* tile) {
  for (int64_t k = 0; k < kb; ++k) {
    E* row = tile + k * nb;
    if (k >= blk.kn) {
      std::fill(row, row + nb, E{0});
      continue;
    }
    const char* s = base + ((blk.k0 + k) * sk + blk.n0 * sn) * esz;
    if (sn == 1) {
      load(s, blk.nn, row);
    } else {
      for (int64_t n = 0; n < blk.nn; ++n) row[n] = load_one(s + n * sn * esz);
    }
    std::fill(row + blk.nn, row + nb, E{0});
  }
}

}  // namespace

int64_t PackedElements(const PackedBLayout& l) {
  const int64_t kbs = l.k_padded / l.k_block, nbs = l.n_padded / l.n_block;
  if (kbs == 0 || nbs == 0) return 0;
  return (kbs - 1) * l.stride_kb + (nbs - 1) * l.stride_nb + l.k_block * l.n_block;
}

void PackVnniB(const void* src, DType src_dtype, int64_t K, int64_t N, int64_t sk, int64_t sn,
               const PackedBLayout& layout, uint16_t* dst) {
  CheckLayout("PackVnniB", layout, K, N, /*pairs=*/true);
  const int64_t kb = layout.k_block, nb = layout.n_block;
  const bool fp8 = IsFp8(src_dtype), f32 = src_dtype == DType::kFloat32;
  OCTET_CHECK(fp8 || f32 || src_dtype == DType::kBFloat16, "PackVnniB: B must be bfloat16, float32 or FP8, got ",
              Name(src_dtype));
  const int64_t esz = SizeOf(src_dtype);
  const char* base = static_cast<const char*>(src);
  // NOTE [fp8 packing]: an FP8 block is first gathered as bytes (a plain
  // copy, padding zero = FP8 +0) and then converted in one call over the
  // whole kb x nb tile. Converting each 32- or 64-element run on its own
  // paid the converter's dispatch and table loads per run: with FP8 B
  // operands at O1 that was most of the conversion time in a wide GPT step
  // (perf, Zen 5). An f32 B is rounded as it is read (NOTE [narrowed B]).
  // NOTE [native narrowing in packing] for an f32 B where the CPU has AVX-512 BF16.
  [[maybe_unused]] const bool native = OCTET_CONVERT_X86_KERNELS && f32 && CpuHasAvx512Bf16();
  const PackOrder order = sn == 1 ? PackOrder::kAlongRows : PackOrder::kDownColumns;
  ForEachBlock(layout, K, N, dst, order, [&](const Block& blk, uint16_t* tile, uint16_t* out) {
    alignas(64) uint8_t bytes[kMaxNBlock * kMaxKBlock];
    if (sn != 1 && sk == 1) {  // column-major: pairs (k, k+1) are adjacent in B
      PrefetchColumnRuns(base, esz, sn, blk, kb, K);
      if (fp8) {
        LoadColumnTile(base, esz, sn, blk, kb, nb, CopyBytes, bytes);
        Fp8ToBf16Row(bytes, src_dtype, tile, kb * nb);
      } else if (f32) {
#if OCTET_CONVERT_X86_KERNELS
        if (native) {
          NarrowColumnTileNative(reinterpret_cast<const float*>(base), sn, blk.k0, blk.n0, blk.kn, blk.nn, kb, nb, tile);
          TransposePairs(tile, kb, nb, out);
          return;
        }
#endif
        LoadColumnTile(base, esz, sn, blk, kb, nb, NarrowRun, tile);
      } else {
        LoadColumnTile(base, esz, sn, blk, kb, nb, LoadRow, tile);
      }
      TransposePairs(tile, kb, nb, out);
      return;
    }
    // A whole block of a row-major FP8 B: converted and interleaved in one
    // pass where the converters have VBMI (NOTE [fp8 vnni pairs]).
    if (sn == 1 && fp8 && blk.kn == kb && blk.nn == nb && nb == 64 &&
        Fp8ToBf16PairRows64(reinterpret_cast<const uint8_t*>(base) + blk.k0 * sk + blk.n0, sk, kb / 2, src_dtype,
                            out))
      return;
    if (sn == 1 && !fp8 && blk.kn == kb && blk.nn == nb) {
      // A whole block of a row-major bf16 or f32 B: interleave straight from B.
      if (f32) {
        const float* s0 = reinterpret_cast<const float*>(base) + blk.k0 * sk + blk.n0;
#if OCTET_CONVERT_X86_KERNELS
        if (native) return NarrowInterleaveBlockNative(s0, sk, kb, nb, out);
#endif
        for (int64_t p = 0; p < kb / 2; ++p)
          NarrowInterleaveRows(s0 + 2 * p * sk, s0 + (2 * p + 1) * sk, nb, out + p * 2 * nb);
        return;
      }
      const uint16_t* s0 = reinterpret_cast<const uint16_t*>(base) + blk.k0 * sk + blk.n0;
      for (int64_t p = 0; p < kb / 2; ++p) InterleaveRows(s0 + 2 * p * sk, s0 + (2 * p + 1) * sk, nb, out + p * 2 * nb);
      return;
    }
    if (fp8) {
      LoadRowTile(base, esz, sk, sn, blk, kb, nb, CopyBytes, ByteAt, bytes);
      Fp8ToBf16Row(bytes, src_dtype, tile, kb * nb);
    } else if (f32) {
      LoadRowTile(base, esz, sk, sn, blk, kb, nb, NarrowRun, NarrowOne, tile);
    } else {
      LoadRowTile(base, esz, sk, sn, blk, kb, nb, LoadRow, LoadOne, tile);
    }
    InterleaveKMajor(tile, kb, nb, out);
  });
}

void PackF32B(const void* src, DType src_dtype, int64_t K, int64_t N, int64_t sk, int64_t sn,
              const PackedBLayout& layout, float* dst, bool round_to_bf16) {
  const bool fp8 = IsFp8(src_dtype);
  OCTET_CHECK(src_dtype == DType::kFloat32 || src_dtype == DType::kBFloat16 || fp8, "PackF32B: B must be float32, ",
              "bfloat16 or FP8, got ", Name(src_dtype));
  CheckLayout("PackF32B", layout, K, N, /*pairs=*/false);
  const int64_t kb = layout.k_block, nb = layout.n_block;
  const int64_t esz = fp8 ? 1 : src_dtype == DType::kFloat32 ? 4 : 2;
  const char* base = static_cast<const char*>(src);
  // FP8: NOTE [fp8 packing] (bytes gathered, then one conversion per block).
  // `load` reads a run of an f32 or bf16 B; the block loop is instantiated
  // once per load so the common, unrounded one stays branch-free.
  // NOTE [native narrowing in packing]: whole blocks of a rounded f32 B with
  // AVX-512 BF16 where the CPU has it.
  [[maybe_unused]] const bool native =
      OCTET_CONVERT_X86_KERNELS && round_to_bf16 && src_dtype == DType::kFloat32 && CpuHasAvx512Bf16();
  auto pack = [&](auto&& load) {
    auto load_one = [&](const char* p) {
      float v;
      load(p, 1, &v);
      return v;
    };
    const PackOrder order = sn == 1 ? PackOrder::kAlongRows : PackOrder::kDownColumns;
    ForEachBlock(layout, K, N, dst, order, [&](const Block& blk, float* tile, float* out) {
      alignas(64) uint8_t bytes[kMaxNBlock * kMaxKBlock];
      if (sn != 1 && sk == 1) {  // column-major: transpose a tile of B's columns
        PrefetchColumnRuns(base, esz, sn, blk, kb, K);
        if (fp8) {
          LoadColumnTile(base, esz, sn, blk, kb, nb, CopyBytes, bytes);
          DequantizeRow(bytes, src_dtype, 1.0f, tile, kb * nb);  // exact: FP8 values are f32 values
        } else {
#if OCTET_CONVERT_X86_KERNELS
          if (native && blk.kn == kb && blk.nn == nb && kb % 16 == 0)
            RoundColumnTileNative(reinterpret_cast<const float*>(base) + blk.n0 * sn + blk.k0, sn, kb, nb, tile);
          else
#endif
            LoadColumnTile(base, esz, sn, blk, kb, nb, load, tile);
        }
#if defined(__AVX2__)
        if (kb % 8 == 0 && nb % 8 == 0) {
          for (int64_t n = 0; n < nb; n += 8)
            for (int64_t k = 0; k < kb; k += 8) Transpose8x8Dwords(tile + n * kb + k, kb, out + k * nb + n, nb);
          return;
        }
#endif
        for (int64_t k = 0; k < kb; ++k)
          for (int64_t n = 0; n < nb; ++n) out[k * nb + n] = tile[n * kb + k];
        return;
      }
      // The block is row-major already: rows of B go straight into it.
#if OCTET_CONVERT_X86_KERNELS
      if (native && sn == 1 && blk.kn == kb && blk.nn == nb && nb % 16 == 0)
        return RoundRowBlockNative(reinterpret_cast<const float*>(base) + blk.k0 * sk + blk.n0, sk, kb, nb, out);
#endif
      if (fp8) {
        LoadRowTile(base, esz, sk, sn, blk, kb, nb, CopyBytes, ByteAt, bytes);
        DequantizeRow(bytes, src_dtype, 1.0f, out, kb * nb);
      } else {
        LoadRowTile(base, esz, sk, sn, blk, kb, nb, load, load_one, out);
      }
    });
  };
  // bf16 and FP8 values are bf16 values already: only an f32 B is rounded.
  if (round_to_bf16 && src_dtype == DType::kFloat32)
    pack([](const char* p, int64_t n, float* row) { LoadF32RoundedRow(p, n, row); });
  else
    pack([&](const char* p, int64_t n, float* row) { LoadF32Row(p, src_dtype, n, row); });
}

}  // namespace octet::cpu
