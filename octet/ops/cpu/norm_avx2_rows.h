// The norms' bf16 output and dx rows on AVX2 (internal to ops/cpu/, included
// by norm_cpu.cc only): rows computed 16 lanes at a time and narrowed in
// registers, with the generic loops' arithmetic and bits. Inline, so that
// each ISA build of norm_cpu.cc's row loops (NOTE [norm isa dispatch])
// compiles them for its own target; defined only where the including build
// has AVX2 and FMA (OCTET_NORM_AVX2_DX_ROWS).
#pragma once

#include <cmath>
#include <cstdint>

#include <octet/core/bf16_simd_internal.h>
#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/convert_internal.h>
#include <octet/core/macros.h>

namespace octet::cpu {

// NOTE [bf16 dx rows narrowed in AVX2 registers]: without AVX-512 BF16
// (NOTE [native bf16 norm output]) a bf16 dx row was computed into f32
// scratch and narrowed by a second pass. Where the including build has AVX2
// and FMA, the row is computed 16 lanes at a time and narrowed in registers
// by FloatToBf16x8 (FloatToBf16Bits on eight lanes), with the generic loop's
// operations, FMAs explicit: the same bits (Norm.IsaBuildsGiveIdenticalBits
// and Norm.NativeBf16RowsMatchTheGenericLoop compare it with the AVX-512
// BF16 rows). Measured (OCTET_DISABLE_AVX512=1 octet_norm_bench
// BM_LayerNormFwdBwd / BM_AddLayerNormFwdBwd, AMX Xeon, three alternating
// rounds, medians of 3, ms, bf16 before -> after): (4096, 768) 1.50-1.57 ->
// 1.44-1.46, (2048, 128) 0.156-0.165 -> 0.151-0.156, AddLayerNorm 2.20-2.28
// -> 2.12-2.15, (1024, 256) and (1024, 768) unchanged. The forward's output
// row done the same way was 5-15 % slower there (docs/cpu-speed.md,
// fourteenth session) but faster on a real AVX2-only CPU (AMD EPYC Zen 3,
// 2026-11-30, octet_norm_bench BM_LayerNormFwd bf16 / BM_AddLayerNormFwd,
// three alternating rounds, ms, second pass -> in registers): (2048, 128)
// 0.093-0.096 -> 0.080-0.083, (4096, 768) 0.633-0.653 -> 0.608-0.620,
// (1024, 256) 0.067-0.071 -> 0.065-0.070, (1024, 768) 0.158-0.162 ->
// 0.155-0.163, AddLayerNorm 1.11-1.16 -> 1.07-1.09. So it runs where the
// AVX2 converters do and AVX-512 does not (what was measured); the dx rows
// wherever AVX2 is. Norm.Avx2Bf16RowsMatchTheGenericLoop holds both to the
// generic loop's bits on an AVX2 CPU (the AVX-512 comparisons above cannot:
// both of their builds run these rows).
//
// NOTE [fused dsum]: with a dsum (AddLayerNorm's backward) dx is
// fma(rs, inner, dsum), the product by rs rounded once with the add, in the
// generic loop and the AVX2 rows alike. The generic loop wrote rs * inner +
// dsum and left it to -ffp-contract=fast, which fused it; the AVX2 rows
// rounded the product first, and 60 of 3.2 M bf16 dx values differed from
// the generic loop's (width 777; found by Norm.Avx2Bf16RowsMatchTheGeneric-
// Loop, 2026-11-30).
#if OCTET_CONVERT_X86_KERNELS && defined(__AVX2__) && defined(__FMA__)
#define OCTET_NORM_AVX2_DX_ROWS 1
// out[0, c) = bf16 of a row's f32 values: lanes(i) gives values [i, i + 8)
// as a vector, the scalar one(i) value i for the tail; both narrowed as
// FloatToBf16Bits does.
template <typename Lanes, typename One>
OCTET_INLINE void StoreBf16RowAvx2(uint16_t* out, int64_t c, const Lanes& lanes, const One& one) {
  using namespace convert_internal;
  int64_t i = 0;
  for (; i + 16 <= c; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        PackWords(FloatToBf16x8(lanes(i)), FloatToBf16x8(lanes(i + 8))));
  for (; i < c; ++i) out[i] = FloatToBf16Bits(one(i));
}

// dx[0, c) = bf16(rs * fma(-((x - mu) * rs), mean_gx, fma(dy, w, -mean_g))
// (+ dsum when non-null)), 16 lanes at a time, narrowed in registers (NOTE
// [bf16 dx rows narrowed in AVX2 registers]).
OCTET_INLINE void NormDxRowBf16Avx2(const bfloat16* x, const bfloat16* dy, const bfloat16* dsum, const float* w,
                                    float mu, float rs, float mean_g, float mean_gx, bfloat16* dx, int64_t c) {
  using namespace convert_internal;
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  const auto* dss = reinterpret_cast<const uint16_t*>(dsum);
  auto* out = reinterpret_cast<uint16_t*>(dx);
  const __m256 vmu = _mm256_set1_ps(mu), vrs = _mm256_set1_ps(rs);
  const __m256 vneg_g = _mm256_set1_ps(-mean_g), vgx = _mm256_set1_ps(mean_gx);
  const auto lanes = [&](int64_t i) {
    const __m256 g = _mm256_fmadd_ps(Bf16x8ToFloat(dys + i), _mm256_loadu_ps(w + i), vneg_g);
    const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(Bf16x8ToFloat(xs + i), vmu), vrs);
    const __m256 t = _mm256_fnmadd_ps(xhat, vgx, g);
    return dss != nullptr ? _mm256_fmadd_ps(vrs, t, Bf16x8ToFloat(dss + i)) : _mm256_mul_ps(vrs, t);
  };
  StoreBf16RowAvx2(out, c, lanes, [&](int64_t i) {
    const float t =
        std::fma(-((Bf16BitsToFloat(xs[i]) - mu) * rs), mean_gx, std::fma(Bf16BitsToFloat(dys[i]), w[i], -mean_g));
    return dss != nullptr ? std::fma(rs, t, Bf16BitsToFloat(dss[i])) : rs * t;
  });
}

// y[0, c) = bf16(fma((x - mu) * rs, w, b)), 16 lanes at a time, narrowed in
// registers (NOTE [bf16 dx rows narrowed in AVX2 registers]).
OCTET_INLINE void NormOutputRowBf16Avx2(const bfloat16* x, float mu, float rs, const float* w, const float* b,
                                        bfloat16* y, int64_t c) {
  using namespace convert_internal;
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  auto* out = reinterpret_cast<uint16_t*>(y);
  const __m256 vmu = _mm256_set1_ps(mu), vrs = _mm256_set1_ps(rs);
  const auto lanes = [&](int64_t i) {
    const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(Bf16x8ToFloat(xs + i), vmu), vrs);
    return _mm256_fmadd_ps(xhat, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i));
  };
  StoreBf16RowAvx2(out, c, lanes,
                   [&](int64_t i) { return std::fma((Bf16BitsToFloat(xs[i]) - mu) * rs, w[i], b[i]); });
}
#endif

}  // namespace octet::cpu
