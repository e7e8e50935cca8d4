// NOTE [row-major A for AMX] (gemm_transpose_a.h).
#include <octet/ops/cpu/gemm_transpose_a.h>

#include <algorithm>

#include <octet/core/error.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/transpose16x16.h>

namespace octet::cpu {
namespace {

// K rows a panel: 16 pairs, one 64-byte row of the output per m.
constexpr int64_t kPanel = 32;

#if defined(__x86_64__)
// GCC 12 warns that the __Y of its own AVX-512 intrinsic headers "may be
// used uninitialized" once Transpose16x16Epi32 is inlined here (its
// _mm512_undefined_* placeholders; a plain or masked load of the operands
// warns alike): not a use of any value of ours, so the warning is off for
// this function alone.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// dst[m * ldd + r] = rows[r * rs + m] for r < kn, m < M (kn <= kPanel).
__attribute__((target("avx512f,avx512bw"))) void TransposePanel(const uint16_t* rows, int64_t rs, int64_t kn,
                                                                 int64_t M, uint16_t* dst, int64_t ldd) {
  int64_t m0 = 0;
  if (kn == kPanel) {
    alignas(64) uint16_t idx[32];
    for (int j = 0; j < 16; ++j) {
      idx[2 * j] = static_cast<uint16_t>(j);
      idx[2 * j + 1] = static_cast<uint16_t>(32 + j);
    }
    const __m512i interleave = _mm512_load_si512(idx);
    for (; m0 + 16 <= M; m0 += 16) {
      __m512i pairs[16], cols[16];
      for (int i = 0; i < 16; ++i) {  // pair row i: (row 2i, row 2i+1) of columns m0..m0+15, interleaved
        const __m512i a = _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + (2 * i) * rs + m0)));
        const __m512i b = _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + (2 * i + 1) * rs + m0)));
        pairs[i] = _mm512_permutex2var_epi16(a, interleave, b);
      }
      Transpose16x16Epi32(pairs, cols);  // cols[j]: the 32 values of column m0 + j
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(dst + (m0 + j) * ldd, cols[j]);
    }
  }
  for (int64_t m = m0; m < M; ++m)
    for (int64_t r = 0; r < kn; ++r) dst[m * ldd + r] = rows[r * rs + m];
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void RowMajorBf16A(const uint16_t* src, int64_t M, int64_t K, int64_t ld, uint16_t* dst) {
#if defined(__x86_64__)
  const int64_t panels = (K + kPanel - 1) / kPanel;
  ParallelFor(panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t k0 = p * kPanel;
      TransposePanel(src + k0 * ld, ld, std::min(kPanel, K - k0), M, dst + k0, K);
    }
  });
#else
  OCTET_FAIL("matmul: RowMajorBf16A needs x86-64 (AMX)");
#endif
}

}  // namespace octet::cpu
