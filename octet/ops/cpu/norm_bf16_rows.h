// The norms' bf16 rows, and short f32 rows, on AVX-512 BF16 (internal to
// ops/cpu/, x86-64 builds): rows computed and narrowed in registers with the
// generic loops' arithmetic and bits (NOTE [native bf16 norm output], NOTE
// [short bf16 rows in registers] and NOTE [row statistics sixteen rows at a
// time] in norm_bf16_rows.cc). norm_cpu.cc runs them only where
// CpuHasAvx512Bf16().
#pragma once

#include <cstdint>

#include <octet/core/bfloat16.h>
#include <octet/core/convert_internal.h>

namespace octet::cpu {

#if OCTET_CONVERT_X86_KERNELS
// y[0, c) = fma((x - mu) * rs, w, b), narrowed to bf16: a forward's output
// row (LayerNorm, RMSNorm with mu 0 and b 0, AddLayerNorm).
void NormOutputRowBf16Native(const bfloat16* x, float mu, float rs, const float* w, const float* b, bfloat16* y,
                             int64_t c);

// dx[0, c) = rs * fma(-xhat, mean_gx, fma(dy, w, -mean_g)), narrowed to bf16:
// LayerNorm's dx row without a dsum.
void LayerNormDxRowBf16Native(const bfloat16* x, const bfloat16* dy, const float* w, float mu, float rs,
                              float mean_g, float mean_gx, bfloat16* dx, int64_t c);

// What a short-row forward reads and writes (rows of c values of T: bf16
// or f32).
template <typename T>
struct ShortNormFwdRows {
  int64_t c = 0;
  const float* w = nullptr;  // (C)
  const float* b = nullptr;  // (C)
  const T* x = nullptr;      // (N,C)
  T* y = nullptr;            // (N,C)
  float* mean = nullptr;     // (N), LayerNorm only
  float* rstd = nullptr;     // (N)
  float eps = 0, inv_c = 0;
};
template <typename T>
using ShortNormFwdRowsFn = void (*)(const ShortNormFwdRows<T>& rows, int64_t r0, int64_t r1);

// The forward of rows [r0, r1) (center: LayerNorm, else RMSNorm) for rows of
// c values of T (bfloat16 or float), or null when such rows are not short:
// 64, 128, 192 or 256 values.
template <typename T>
ShortNormFwdRowsFn<T> ShortNormFwdRowsFor(bool center, int64_t c);

// What a short-row LayerNorm backward reads and writes.
struct Bf16NormBwdRows {
  int64_t c = 0;
  const float* w = nullptr;      // (C)
  const bfloat16* x = nullptr;   // (N,C)
  const bfloat16* dy = nullptr;  // (N,C)
  bfloat16* dx = nullptr;        // (N,C) or null
  const float* mean = nullptr;   // (N)
  const float* rstd = nullptr;   // (N)
  float inv_c = 0;
};
// Rows [r0, r1): their dx (when rows.dx is set), and dy * xhat and dy added
// into dw_acc and db_acc (C) when those are non-null.
using Bf16NormBwdRowsFn = void (*)(const Bf16NormBwdRows& rows, int64_t r0, int64_t r1, float* dw_acc,
                                   float* db_acc);

// LayerNorm's backward (without a dsum) for rows of c values, or null when
// they are not short (as ShortNormFwdRowsFor).
Bf16NormBwdRowsFn ShortBf16LayerNormBwdRowsFor(int64_t c);
#endif

}  // namespace octet::cpu
