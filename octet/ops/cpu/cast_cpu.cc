// CPU kernels of the cast family: quantize (+ amax, + cast-transpose),
// dequantize, amax. Built on the vectorised row converters of core/convert.h;
// bf16 inputs are read by their own row converters (QuantizeBf16Row,
// AmaxBf16Row), f16/f64 inputs are widened to f32 a block at a time into a
// stack buffer first.
//
// NOTE [amax combine order]: amax is a max, so the blocks may be combined in
// any order; NaN must win wherever it appears, hence (b > a || b != b).
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include <octet/core/convert.h>
#include <octet/core/dtype_traits.h>
#include <octet/ops/cast_kernels.h>
#include <octet/ops/cpu/column_sums.h>
#include <octet/ops/cpu/loops.h>

namespace octet::cpu {
namespace {

// Elements per block: one block's f32 copy (16 KiB) fits in L1 beside its FP8 output.
constexpr int64_t kBlock = 4096;

// src[0, n) as f32 in buf (or the source itself when it is already f32).
//   src: (n) of dtype, buf: (n) scratch, n <= kBlock.
const float* AsFloat(const void* src, DType dtype, int64_t n, float* buf) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(src);
    case DType::kBFloat16: Bf16ToFloatRow(static_cast<const uint16_t*>(src), buf, n); return buf;
    case DType::kFloat16: F16ToFloatRow(static_cast<const uint16_t*>(src), buf, n); return buf;
    case DType::kFloat64: {
      const double* d = static_cast<const double*>(src);
      for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(d[i]);
      return buf;
    }
    default: OCTET_FAIL("quantize: unsupported input dtype ", Name(dtype));
  }
}

// Quantizes elements [begin, end) of the flat x into y; returns their amax.
float QuantizeRange(const char* x, DType xdt, float scale, DType fp8, Fp8Saturation sat, uint8_t* y, int64_t begin,
                    int64_t end) {
  if (xdt == DType::kBFloat16) {  // the whole range, no f32 copy (NOTE [bf16 quantize in registers] in core/convert.cc)
    return QuantizeBf16Row(reinterpret_cast<const uint16_t*>(x) + begin, scale, fp8, sat, y + begin, end - begin);
  }
  alignas(64) float buf[kBlock];
  const int64_t sz = SizeOf(xdt);
  float amax = 0.0f;
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t n = std::min(kBlock, end - i);
    const float* f = AsFloat(x + i * sz, xdt, n, buf);
    amax = MaxNaN(amax, QuantizeRow(f, scale, fp8, sat, y + i, n));
  }
  return amax;
}

#if defined(__SSE2__)
// dst (16 rows, stride ds) = src (16 rows, stride ss) transposed. Four rounds
// of unpacks (8-, 16-, 32-, 64-bit) each interleave row pairs; afterwards
// register k holds column bit_reverse4(k).
inline void Transpose16x16(const uint8_t* src, int64_t ss, uint8_t* dst, int64_t ds) {
  static constexpr int kColumnOf[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
  __m128i x[16], t[16];
  for (int i = 0; i < 16; ++i) x[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * ss));
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm_unpacklo_epi8(x[2 * i], x[2 * i + 1]);
    t[i + 8] = _mm_unpackhi_epi8(x[2 * i], x[2 * i + 1]);
  }
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm_unpacklo_epi16(t[2 * i], t[2 * i + 1]);
    x[i + 8] = _mm_unpackhi_epi16(t[2 * i], t[2 * i + 1]);
  }
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm_unpacklo_epi32(x[2 * i], x[2 * i + 1]);
    t[i + 8] = _mm_unpackhi_epi32(x[2 * i], x[2 * i + 1]);
  }
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm_unpacklo_epi64(t[2 * i], t[2 * i + 1]);
    x[i + 8] = _mm_unpackhi_epi64(t[2 * i], t[2 * i + 1]);
  }
  for (int k = 0; k < 16; ++k) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + kColumnOf[k] * ds), x[k]);
}
#endif

// Rows [r0, r1) of an (R, C) FP8 matrix, held in band (r1 - r0, C), copied
// transposed into yt (C, R): 16x16 register tiles, scalar at the edges.
void TransposeBytes(const uint8_t* band, int64_t R, int64_t C, uint8_t* yt, int64_t r0, int64_t r1) {
  int64_t c_full = 0, r_full = r0;
#if defined(__SSE2__)
  c_full = C / 16 * 16;
  r_full = r0 + (r1 - r0) / 16 * 16;
  for (int64_t c0 = 0; c0 < c_full; c0 += 16)
    for (int64_t rb = r0; rb < r_full; rb += 16) Transpose16x16(band + (rb - r0) * C + c0, C, yt + c0 * R + rb, R);
#endif
  auto scalar = [&](int64_t c_begin, int64_t c_end, int64_t r_begin, int64_t r_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      uint8_t* dst = yt + c * R;
      const uint8_t* src = band + c;
      for (int64_t r = r_begin; r < r_end; ++r) dst[r] = src[(r - r0) * C];
    }
  };
  scalar(0, c_full, r_full, r1);  // the last rows of the full columns
  scalar(c_full, C, r0, r1);      // the last columns, every row
}

void CheckDbias(const Tensor& dbias, int64_t C) {
  OCTET_CHECK(dbias.dtype() == DType::kFloat32 && dbias.numel() == C && dbias.is_contiguous() &&
                  dbias.device().is_cpu(),
              "quantize (CPU): dbias must be a contiguous float32 (C) = (", C, ") CPU tensor, got ", Describe(dbias));
}

void QuantizeCpu(const Tensor& x, const Tensor& scale, Fp8Saturation sat, const Tensor& y, const Tensor& yt,
                 const Tensor& scale_inv, const Tensor& amax, const Tensor& dbias) {
  const float s = *scale.data<float>();
  *scale_inv.data<float>() = 1.0f / s;
  const DType xdt = x.dtype();
  const DType fp8 = y.defined() ? y.dtype() : yt.dtype();
  const char* xp = static_cast<const char*>(x.raw_data());
  const int64_t n = x.numel();
  if (!yt.defined()) {
    // Plain quantize: independent blocks, one amax per block; with dbias,
    // then the column sums (NOTE [column sums]: a pass of their own, faster
    // than adding each row segment as it is quantized).
    if (dbias.defined()) {
      OCTET_CHECK(x.dim() == 2 && y.defined(), "quantize (CPU): dbias needs a 2-D x and y, got x ", Describe(x));
      CheckDbias(dbias, x.size(1));
    }
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<float> part(std::max<int64_t>(blocks, 1), 0.0f);
    uint8_t* yp = static_cast<uint8_t*>(y.raw_data());
    ParallelFor(blocks, 8, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        part[b] = QuantizeRange(xp, xdt, s, fp8, sat, yp, b * kBlock, std::min(n, (b + 1) * kBlock));
    });
    *amax.data<float>() = CombineAmax(part);
    if (dbias.defined()) ColumnSumsF32(xp, xdt, x.size(0), x.size(1), dbias.data<float>());
    return;
  }
  // Cast-transpose: x (R, C); bands of 64 rows are quantized row-wise into y
  // (or a scratch band when y is not wanted), then transposed into yt while
  // the band is still in cache.
  const int64_t R = x.size(0), C = x.size(1);
  constexpr int64_t kBand = 64;
  const int64_t bands = (R + kBand - 1) / kBand;
  std::vector<float> part(std::max<int64_t>(bands, 1), 0.0f);
  uint8_t* ytp = static_cast<uint8_t*>(yt.raw_data());
  uint8_t* yp = y.defined() ? static_cast<uint8_t*>(y.raw_data()) : nullptr;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C * kBand, 1));
  ParallelFor(bands, grain, [&](int64_t b0, int64_t b1) {
    std::vector<uint8_t> scratch(yp == nullptr ? kBand * C : 0);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kBand, r1 = std::min(R, r0 + kBand);
      uint8_t* band = yp != nullptr ? yp + r0 * C : scratch.data();
      part[b] = QuantizeRange(xp + r0 * C * SizeOf(xdt), xdt, s, fp8, sat, band, 0, (r1 - r0) * C);
      TransposeBytes(band, R, C, ytp, r0, r1);
    }
  });
  *amax.data<float>() = CombineAmax(part);
  if (dbias.defined()) {
    CheckDbias(dbias, C);
    ColumnSumsF32(xp, xdt, R, C, dbias.data<float>());
  }
}

// Bands of 64 rows, each transposed with TransposeBytes (16x16 register tiles).
void Fp8TransposeCpu(const Tensor& x, const Tensor& yt) {
  const int64_t R = x.size(0), C = x.size(1);
  constexpr int64_t kBand = 64;
  const int64_t bands = (R + kBand - 1) / kBand;
  const uint8_t* xp = static_cast<const uint8_t*>(x.raw_data());
  uint8_t* ytp = static_cast<uint8_t*>(yt.raw_data());
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C * kBand, 1));
  ParallelFor(bands, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kBand, r1 = std::min(R, r0 + kBand);
      TransposeBytes(xp + r0 * C, R, C, ytp, r0, r1);
    }
  });
}

void DequantizeCpu(const Tensor& x, const Tensor& scale_inv, const Tensor& y) {
  const float si = *scale_inv.data<float>();
  const uint8_t* xp = static_cast<const uint8_t*>(x.raw_data());
  const DType fp8 = x.dtype();
  const DType ydt = y.dtype();
  char* yp = static_cast<char*>(y.raw_data());
  const int64_t n = x.numel();
  ParallelFor(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    if (ydt == DType::kFloat32) {
      DequantizeRow(xp + begin, fp8, si, reinterpret_cast<float*>(yp) + begin, end - begin);
      return;
    }
    alignas(64) float buf[kBlock];
    for (int64_t i = begin; i < end; i += kBlock) {
      const int64_t m = std::min(kBlock, end - i);
      DequantizeRow(xp + i, fp8, si, buf, m);
      switch (ydt) {
        case DType::kBFloat16: FloatToBf16Row(buf, reinterpret_cast<uint16_t*>(yp) + i, m); break;
        case DType::kFloat16: FloatToF16Row(buf, reinterpret_cast<uint16_t*>(yp) + i, m); break;
        case DType::kFloat64: {
          double* d = reinterpret_cast<double*>(yp) + i;
          for (int64_t j = 0; j < m; ++j) d[j] = buf[j];
          break;
        }
        default: OCTET_FAIL("dequantize: unsupported output dtype ", Name(ydt));
      }
    }
  });
}

void AmaxCpu(const Tensor& x, const Tensor& amax) {
  const DType xdt = x.dtype();
  const char* xp = static_cast<const char*>(x.raw_data());
  const int64_t n = x.numel(), sz = SizeOf(xdt);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> part(std::max<int64_t>(blocks, 1), 0.0f);
  ParallelFor(blocks, 8, [&](int64_t b0, int64_t b1) {
    alignas(64) float buf[kBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i = b * kBlock, m = std::min(kBlock, n - i);
      if (xdt == DType::kFloat64) {
        // Exact in f64, then rounded: the same as rounding every element first.
        const double* d = reinterpret_cast<const double*>(xp) + i;
        double a = 0.0;
        for (int64_t j = 0; j < m; ++j) {
          const double v = d[j] < 0 ? -d[j] : d[j];
          a = (v > a || v != v) ? v : a;
        }
        part[b] = static_cast<float>(a);
      } else {
        part[b] = xdt == DType::kBFloat16 ? AmaxBf16Row(reinterpret_cast<const uint16_t*>(xp) + i, m)
                                          : AmaxRow(AsFloat(xp + i * sz, xdt, m, buf), m);
      }
    }
  });
  *amax.data<float>() = CombineAmax(part);
}

}  // namespace

OCTET_REGISTER_KERNEL(quantize_kernel, DeviceType::kCPU, &QuantizeCpu);
OCTET_REGISTER_KERNEL(dequantize_kernel, DeviceType::kCPU, &DequantizeCpu);
OCTET_REGISTER_KERNEL(fp8_transpose_kernel, DeviceType::kCPU, &Fp8TransposeCpu);
OCTET_REGISTER_KERNEL(amax_kernel, DeviceType::kCPU, &AmaxCpu);

}  // namespace octet::cpu
