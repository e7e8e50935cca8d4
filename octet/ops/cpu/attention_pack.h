// Operand access and packing of the CPU attention kernels (internal to
// ops/cpu/attention_cpu.cc): (B,H,T,D) operands with any strides, their rows
// packed into compute-type tiles (plain or transposed) and stored back, and
// FP8 operands read through a table of their values.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>

#include <octet/core/bf16_simd_internal.h>
#include <octet/core/convert.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/fp8_simd_internal.h>
#include <octet/core/tensor.h>
#include <octet/ops/cpu/isa.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/cpu/transpose8x8.h>

namespace octet::cpu::attn {

// NOTE [fp8 attention operands]: q, k and v may be FP8 codes (the heads of
// an FP8 qkv: CausalAttentionQkvFp8, NOTE [fp8 attention inputs] in
// ops/attention.cc) while out, dout and the gradients are in a float
// compute dtype TOut. A code is read through a table of the 256 values
// Dequantize(code, TOut) gives (the dequantize row converter with the
// tensor's scale_inv, rounded to TOut as the dequantize kernel rounds),
// widened to the compute type: the values a dequantize-then-attend
// composition reads, so the same bits, without its pass over the codes or
// its temporary. The lookups are AVX2 gathers where the packers vectorise;
// they cost more than widening bf16 does (perf, small GPT at O1, Zen 5:
// packing 3.1 % of the step against 2.4 % from bf16).
struct Fp8Code {
  uint8_t bits;
};

// NOTE [fp8 attention decode]: AVX2 has no table lookup wider than 16
// bytes, so the f32 tiles' packers looked codes up with gathers, eight at a
// time; on an AMD Zen 3 a gather costs twice the arithmetic that computes
// the same values (a microbenchmark, 2026-11-30: 0.51 against 0.27 ns a
// code). Where the table's values are a product the decoder can make —
// float(code) * scale_inv in f32 (TOut float), that product rounded to bf16
// (TOut bf16) — Fp8Table says so, and the AVX2 packers compute them:
// DecodeFp8x8 (core/fp8_simd_internal.h, NOTE [avx2 fp8 decode]), the one
// f32 multiply, and FloatToBf16x8's rounding, as the table was made
// (DequantizeRow, StoreRow). The table is checked against the decoder when
// it is made, all 256 codes (NaN codes: NaN either way), and keeps the
// lookups if they differ, so the two forms give the same values by
// construction. octet_attention_bench BM_CausalAttentionQkvForwardBackward
// bf16:2 (amp O1's attention on f32 tiles, forward and backward, the
// quantization of qkv included) against bf16:1 at (8, 4, 128, 64), six
// alternating rounds on the Zen 3: 2.72-3.03 ms (median 2.91) against
// 2.79-3.26 (3.13) with the gathers, 1.13-1.35x bf16's time against
// 1.19-1.46x. At (4, 12, 256, 64), and in the small O1 training step, the
// difference was within the (noisy) host's run-to-run spread.
enum class Fp8TableForm : uint8_t {
  kLookup,      // only the values
  kProduct,     // values[c] = float(c) * scale_inv (f32)
  kBf16Product  // values[c] = that product rounded to bf16
};

// The table of NOTE [fp8 attention operands]: entry c is code c of `fp8`
// times scale_inv in f32, rounded to TOut, widened to A = AccType<TOut>;
// and how a decoder can compute the entries (NOTE [fp8 attention decode]).
template <typename A>
struct Fp8Table {
  std::array<A, 256> values;
  DType fp8 = DType::kFloat8E4M3;
  float scale_inv = 1.0f;
  Fp8TableForm form = Fp8TableForm::kLookup;
};

// An input element in the compute type A: converted, or looked up (FP8 codes).
template <typename A, typename T>
OCTET_INLINE A ReadAs(const T& x, const Fp8Table<A>* lut) {
  if constexpr (std::is_same_v<T, Fp8Code>) {
    return lut->values[x.bits];
  } else {
    return ConvertElement<A>(x);
  }
}

#if defined(__AVX2__) && defined(__F16C__) && OCTET_CONVERT_X86_KERNELS
#define OCTET_ATTENTION_FP8_DECODE 1
// The table's values for the 8 codes in the low 8 bytes of `codes`,
// computed (its form is not kLookup).
OCTET_INLINE __m256 DecodeTableValues(__m128i codes, const Fp8Table<float>& table) {
  using namespace convert_internal;
  const __m256 v = _mm256_mul_ps(DecodeFp8x8(codes, table.fp8 == DType::kFloat8E4M3 ? kE4M3 : kE5M2),
                                 _mm256_set1_ps(table.scale_inv));
  if (table.form == Fp8TableForm::kProduct) return v;
  return RoundToBf16x8(v);
}

// Whether DecodeTableValues gives every entry of the table (NaN entries: NaN).
inline bool DecoderMakesTable(const Fp8Table<float>& table) {
  for (int c = 0; c < 256; c += 8) {
    alignas(32) uint8_t codes[16] = {};
    for (int i = 0; i < 8; ++i) codes[i] = static_cast<uint8_t>(c + i);
    alignas(32) float got[8];
    _mm256_store_ps(got, DecodeTableValues(_mm_load_si128(reinterpret_cast<const __m128i*>(codes)), table));
    for (int i = 0; i < 8; ++i) {
      const float want = table.values[c + i];
      if (std::isnan(want) ? !std::isnan(got[i]) : std::memcmp(&got[i], &want, sizeof want) != 0) return false;
    }
  }
  return true;
}
#endif

template <typename TOut>
Fp8Table<AccType<TOut>> Fp8CodeTable(DType fp8, float scale_inv) {
  std::array<uint8_t, 256> codes;
  std::iota(codes.begin(), codes.end(), 0);
  std::array<float, 256> values;
  DequantizeRow(codes.data(), fp8, scale_inv, values.data(), 256);
  std::array<TOut, 256> rounded;
  StoreRow<TOut, float>(values.data(), rounded.data(), 256);
  Fp8Table<AccType<TOut>> table;
  for (int c = 0; c < 256; ++c) table.values[c] = ConvertElement<AccType<TOut>>(rounded[c]);
  table.fp8 = fp8;
  table.scale_inv = scale_inv;
#if OCTET_ATTENTION_FP8_DECODE
  if constexpr (std::is_same_v<TOut, float> || std::is_same_v<TOut, bfloat16>) {
    table.form = std::is_same_v<TOut, float> ? Fp8TableForm::kProduct : Fp8TableForm::kBf16Product;
    if (!DecoderMakesTable(table)) table.form = Fp8TableForm::kLookup;
  }
#endif
  return table;
}

// A (B,H,T,D) tensor as a base pointer and element strides, P its element
// type (const for inputs), or none (null data) when undefined. Outputs may
// have any strides too: e.g. heads side by side in a (B,T,H*D) tensor (NOTE
// [attention in the qkv layout] in ops/attention.cc).
template <typename P>
struct HeadStrides {
  explicit HeadStrides(const Tensor& t) {
    if (!t.defined()) return;
    if constexpr (std::is_same_v<std::remove_const_t<P>, Fp8Code>) {
      data = static_cast<P*>(t.raw_data());
    } else {
      data = t.data<std::remove_const_t<P>>();
    }
    sb = t.stride(0);
    sh = t.stride(1);
    st = t.stride(2);
    sd = t.stride(3);
    heads = t.size(1);
  }
  explicit operator bool() const { return data != nullptr; }
  // Row t0 of head bh (= b*H + h). NOTE [attention row addressing]: this
  // divides by the head count (an integer division, 10-20 cycles), so loops
  // over the rows of a head find its first row once and step by st from it;
  // called per row of 32 values, the division was a third of the row
  // stores' samples.
  P* Row(int64_t bh, int64_t t0) const { return data + (bh / heads) * sb + (bh % heads) * sh + t0 * st; }
  P* data = nullptr;
  int64_t sb = 0, sh = 0, st = 0, sd = 1, heads = 1;
};
template <typename T>
using Operand = HeadStrides<const T>;  // an input
template <typename T>
using OutOperand = HeadStrides<T>;  // an output

#if defined(__AVX2__)
// Eight f32 values of a row: src[0, 8) widened (bf16), read (f32) or, FP8
// codes, computed or looked up in lut (one gather; NOTE [fp8 attention
// decode]), times mul.
template <typename T>
OCTET_INLINE __m256 LoadEight(const T* src, __m256 mul, const Fp8Table<float>* lut) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_mul_ps(mul, _mm256_loadu_ps(src));
  } else if constexpr (std::is_same_v<T, Fp8Code>) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
#if OCTET_ATTENTION_FP8_DECODE
    if (lut->form != Fp8TableForm::kLookup) return _mm256_mul_ps(mul, DecodeTableValues(codes, *lut));
#endif
    return _mm256_mul_ps(mul, _mm256_i32gather_ps(lut->values.data(), _mm256_cvtepu8_epi32(codes), 4));
  } else {
    return _mm256_mul_ps(mul, convert_internal::Bf16x8ToFloat(reinterpret_cast<const uint16_t*>(src)));
  }
}
// Whether LoadEight reads T into A = float.
template <typename T, typename A>
inline constexpr bool kLoadsEight = std::is_same_v<A, float> && (std::is_same_v<T, float> ||
                                                                 std::is_same_v<T, bfloat16> ||
                                                                 std::is_same_v<T, Fp8Code>);
#endif

#if defined(__x86_64__)
// PackRows of FP8 codes into f32 with unit column stride, columns [0, w) of
// every row for the w it returns (a multiple of 64, or all 32 columns of a
// head size of 32; 0 where the CPU has no VBMI or lut's values are not bf16
// values): NOTE [fp8 f32 lookup] in
// attention_bf16_tiles.cc, which holds the byte tables it shares with the
// bf16 tiles' lookup.
int64_t LookupRowsF32(const uint8_t* src, int64_t rs, int64_t rows, int64_t cols, float mul, const float* lut,
                      float* dst, int64_t ldd);
#endif

// dst[r*ldd + c] = mul * src[r*rs + c*cs] for r < rows, c < cols; zero for
// columns [cols, ldd) and rows [rows, rows_pad).
// lut: the table of an FP8 T (FP8 code tables below), else unused.
template <typename T, typename A>
void PackRows(const T* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, A mul, A* dst, int64_t ldd,
              int64_t rows_pad, const Fp8Table<A>* lut = nullptr) {
  int64_t looked_up = 0;  // columns [0, looked_up) of every row already written
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, Fp8Code> && std::is_same_v<A, float>) {
    if (cs == 1) looked_up = LookupRowsF32(&src->bits, rs, rows, cols, mul, lut->values.data(), dst, ldd);
  }
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * rs;
    A* d = dst + r * ldd;
    if (cs == 1) {
      int64_t c = looked_up;
#if defined(__AVX2__)
      // FP8 codes: eight lookups in one gather (the scalar loop below is
      // not vectorised; a conversion is).
      if constexpr (std::is_same_v<T, Fp8Code> && kLoadsEight<T, A>) {
        const __m256 m = _mm256_set1_ps(mul);
        for (; c + 8 <= cols; c += 8) _mm256_storeu_ps(d + c, LoadEight(s + c, m, lut));
      }
#endif
      for (; c < cols; ++c) d[c] = mul * ReadAs<A>(s[c], lut);
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c] = mul * ReadAs<A>(s[c * cs], lut);
    }
    std::fill(d + cols, d + ldd, A(0));
  }
  std::fill(dst + rows * ldd, dst + rows_pad * ldd, A(0));
}

// dst[c*ldd + r] = mul * src[r*rs + c*cs] for r < rows, c < cols; zero for r in [rows, ldd).
// NOTE [transposed tiles]: f32 and bf16 rows with unit column stride are
// transposed in 8 x 8 blocks in registers (rows loaded as vectors, widened
// there); the element-by-element loop (strided loads, one conversion each)
// was a third of the time the backward spent filling its tiles (perf, small
// GPT at O2, Zen 5). The values are the same: one conversion and one
// multiply per element either way.
template <typename T, typename A>
void PackTransposed(const T* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, A mul, A* dst, int64_t ldd,
                    const Fp8Table<A>* lut = nullptr) {
#if defined(__x86_64__)
  // FP8 codes in whole 64-code rows: looked up into f32 rows first (NOTE
  // [fp8 f32 lookup], mul applied there), then transposed as f32 rows with
  // mul 1 (an exact multiply): the same values as the gathers below.
  if constexpr (std::is_same_v<T, Fp8Code> && std::is_same_v<A, float>) {
    // (A tile's rows fit the stack buffer: 64 rows of head sizes up to 128.)
    constexpr int64_t kMaxValues = 64 * 128;
    if (cs == 1 && (cols % 64 == 0 || cols == 32) && rows * cols <= kMaxValues) {
      alignas(64) float rows_f32[kMaxValues];
      if (LookupRowsF32(&src->bits, rs, rows, cols, mul, lut->values.data(), rows_f32, cols) == cols)
        return PackTransposed<float, float>(rows_f32, cols, 1, rows, cols, 1.0f, dst, ldd);
    }
  }
#endif
  int64_t r8 = 0, c8 = 0;
#if defined(__AVX2__)
  if constexpr (kLoadsEight<T, A>) {
    if (cs == 1) {
      r8 = rows / 8 * 8;
      c8 = cols / 8 * 8;
      const __m256 m = _mm256_set1_ps(mul);
      for (int64_t r = 0; r < r8; r += 8)
        for (int64_t c = 0; c < c8; c += 8) {
          __m256 v[8];
          for (int i = 0; i < 8; ++i) v[i] = LoadEight(src + (r + i) * rs + c, m, lut);
          Transpose8x8InRegisters(v);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (c + i) * ldd + r, v[i]);
        }
    }
  }
#endif
  // What the blocks left: every column below row r8, and columns [c8, cols) above it.
  for (int64_t c = 0; c < cols; ++c) {
    const T* s = src + c * cs;
    A* d = dst + c * ldd;
    for (int64_t r = c < c8 ? r8 : 0; r < rows; ++r) d[r] = mul * ReadAs<A>(s[r * rs], lut);
    std::fill(d + rows, d + ldd, A(0));
  }
}

// dst[0, n) = src[0, n) * mul (StoreRows' scaling, run through IsaBuild).
template <typename A>
OCTET_INLINE void ScaleRunBody(const A* src, A mul, A* dst, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = src[c] * mul;
}

// Stores rows (rows x Dp, compute type) times mul into rows t0.. of head bh
// of out; row r times row_mul[r] instead where row_mul is given. The head's
// first row is found once (NOTE [attention row addressing]).
template <typename T, typename A>
void StoreRows(const A* src, int64_t dp, int64_t rows, int64_t d, A mul, const OutOperand<T>& out, int64_t bh,
               int64_t t0, const A* row_mul = nullptr) {
  constexpr int64_t kChunk = 256;
  alignas(64) A scaled[kChunk];
  // The scaling in the build whose vector width is the row converter's: a
  // 64-byte load of a chunk written by 32-byte stores waits for both of them
  // (store forwarding fails; NOTE [bf16 row stores] in attention_bf16_tiles.h).
  const auto scale_run = IsaBuild<&ScaleRunBody<A>>();
  T* const first = out.Row(bh, t0);
  for (int64_t r = 0; r < rows; ++r) {
    T* dst = first + r * out.st;
    const A* row = src + r * dp;
    if (row_mul) mul = row_mul[r];
    if (out.sd != 1) {
      for (int64_t c = 0; c < d; ++c) dst[c * out.sd] = ConvertElement<T>(row[c] * mul);
    } else if constexpr (std::is_same_v<T, A>) {
      scale_run(row, mul, dst, d);  // scaled straight into place: the same product, no copy
    } else {
      // Scaled in chunks, then stored by the row converter (the same rounding
      // as ConvertElement, vectorised).
      for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
        const int64_t n = std::min(kChunk, d - c0);
        scale_run(row + c0, mul, scaled, n);
        StoreRow<T, A>(scaled, dst + c0, n);
      }
    }
  }
}

}  // namespace octet::cpu::attn
