#include <octet/ops/cpu/gemm_pack.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/ops/cpu/loops.h>

namespace octet::cpu {
namespace {

constexpr int64_t kMaxKBlock = 32;
constexpr int64_t kMaxNBlock = 64;

// dst[0, n) = src[0, n) as bf16 bits (bf16 copied, FP8 converted exactly).
inline void LoadRow(const void* src, DType dtype, int64_t n, uint16_t* dst) {
  if (dtype == DType::kBFloat16) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 2);
  } else {
    Fp8ToBf16Row(static_cast<const uint8_t*>(src), dtype, dst, n);
  }
}

inline uint16_t LoadOne(const char* p, DType dtype) {
  uint16_t v;
  if (dtype == DType::kBFloat16) {
    std::memcpy(&v, p, 2);
  } else {
    Fp8ToBf16Row(reinterpret_cast<const uint8_t*>(p), dtype, &v, 1);
  }
  return v;
}

// One kb x nb block from a tile held k-major (tile[k * nb + n]): rows 2p and
// 2p+1 interleaved.
inline void InterleaveKMajor(const uint16_t* tile, int64_t kb, int64_t nb, uint16_t* out) {
  for (int64_t p = 0; p < kb / 2; ++p) {
    const uint16_t* r0 = tile + (2 * p) * nb;
    const uint16_t* r1 = r0 + nb;
    uint16_t* o = out + p * 2 * nb;
    for (int64_t n = 0; n < nb; ++n) {
      o[2 * n] = r0[n];
      o[2 * n + 1] = r1[n];
    }
  }
}

#if defined(__AVX2__)
// dst (8 rows of 8 x 32-bit, stride ds) = src (8 x 8, stride ss) transposed;
// strides in 32-bit units. The classic unpack / shuffle / permute2f128 net.
inline void Transpose8x8Dwords(const uint16_t* src16, int64_t ss, uint16_t* dst16, int64_t ds) {
  const float* src = reinterpret_cast<const float*>(src16);
  float* dst = reinterpret_cast<float*>(dst16);
  __m256 r[8], t[8], s[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3 (h = 0) and 4-7 (h = 1)
    s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ds, _mm256_permute2f128_ps(s[i], s[4 + i], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ds, _mm256_permute2f128_ps(s[i], s[4 + i], 0x31));
  }
}
#endif

// One kb x nb block from a tile held n-major (tile[n * kb + k]): the pair
// (k, k+1) is already adjacent, so this transposes 32-bit units,
// out32[p * nb + n] = tile32[n * kb/2 + p].
inline void TransposePairs(const uint16_t* tile, int64_t kb, int64_t nb, uint16_t* out) {
  const int64_t pairs = kb / 2;
#if defined(__AVX2__)
  if (pairs % 8 == 0 && nb % 8 == 0) {
    for (int64_t n = 0; n < nb; n += 8)
      for (int64_t p = 0; p < pairs; p += 8)
        Transpose8x8Dwords(tile + 2 * (n * pairs + p), pairs, out + 2 * (p * nb + n), nb);
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

}  // namespace

int64_t VnniPackedElements(const VnniLayout& l) {
  const int64_t kbs = l.k_padded / l.k_block, nbs = l.n_padded / l.n_block;
  if (kbs == 0 || nbs == 0) return 0;
  return (kbs - 1) * l.stride_kb + (nbs - 1) * l.stride_nb + l.k_block * l.n_block;
}

void PackVnniB(const void* src, DType src_dtype, int64_t K, int64_t N, int64_t sk, int64_t sn,
               const VnniLayout& layout, uint16_t* dst) {
  const int64_t kb = layout.k_block, nb = layout.n_block;
  OCTET_CHECK(kb > 0 && kb <= kMaxKBlock && kb % 2 == 0 && nb > 0 && nb <= kMaxNBlock &&
                  layout.k_padded % kb == 0 && layout.n_padded % nb == 0 && layout.k_padded >= K &&
                  layout.n_padded >= N && layout.stride_kb >= kb * nb && layout.stride_nb >= kb * nb,
              "PackVnniB: unsupported layout (blocks ", kb, " x ", nb, ", padded ", layout.k_padded, " x ",
              layout.n_padded, ") for B ", K, " x ", N);
  const int64_t esz = src_dtype == DType::kBFloat16 ? 2 : 1;
  const char* base = static_cast<const char*>(src);
  const int64_t kblocks = layout.k_padded / kb, nblocks = layout.n_padded / nb;
  const bool row_major = sn == 1;
  const bool col_major = !row_major && sk == 1;
  // Blocks in output order (k blocks inner): writes stream, reads stay within
  // an nb-wide column panel of B.
  ParallelFor(kblocks * nblocks, 16, [&](int64_t b0, int64_t b1) {
    alignas(64) uint16_t tile[kMaxNBlock * kMaxKBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t nbi = b / kblocks, kbi = b % kblocks;
      const int64_t k0 = kbi * kb, n0 = nbi * nb;
      const int64_t kn = std::clamp<int64_t>(K - k0, 0, kb), nn = std::clamp<int64_t>(N - n0, 0, nb);
      uint16_t* out = dst + kbi * layout.stride_kb + nbi * layout.stride_nb;
      if (kn == 0 || nn == 0) {
        std::memset(out, 0, static_cast<size_t>(kb * nb) * 2);
        continue;
      }
      if (col_major) {
        // tile[n][k]: each column of B is a contiguous run of K values.
        for (int64_t n = 0; n < nb; ++n) {
          uint16_t* row = tile + n * kb;
          if (n < nn) {
            LoadRow(base + ((n0 + n) * sn + k0) * esz, src_dtype, kn, row);
            std::fill(row + kn, row + kb, uint16_t{0});
          } else {
            std::fill(row, row + kb, uint16_t{0});
          }
        }
        TransposePairs(tile, kb, nb, out);
        continue;
      }
      // tile[k][n]
      for (int64_t k = 0; k < kb; ++k) {
        uint16_t* row = tile + k * nb;
        if (k >= kn) {
          std::fill(row, row + nb, uint16_t{0});
          continue;
        }
        const char* s = base + ((k0 + k) * sk + n0 * sn) * esz;
        if (row_major) {
          LoadRow(s, src_dtype, nn, row);
        } else {
          for (int64_t n = 0; n < nn; ++n) row[n] = LoadOne(s + n * sn * esz, src_dtype);
        }
        std::fill(row + nn, row + nb, uint16_t{0});
      }
      InterleaveKMajor(tile, kb, nb, out);
    }
  });
}

}  // namespace octet::cpu
