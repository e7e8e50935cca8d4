// Row converters: argument checks, the lookup tables, the scalar loops and
// the run-time choice of path (NOTE [converter dispatch] in convert.h). The
// AVX-512 kernels are in convert_avx512.cc, the AVX2 ones in convert_avx2.cc.
#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <octet/core/bfloat16.h>
#include <octet/core/convert_internal.h>
#include <octet/core/env.h>
#include <octet/core/error.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>
#include <octet/core/scaling_math.h>

namespace octet {
namespace {

using namespace convert_internal;  // NOLINT: this file implements them

// ---------------------------------------------------------------------------
// Argument checks.

Fp8Kind Fp8KindOf(DType dtype, const char* op) {
  switch (dtype) {
    case DType::kFloat8E4M3:
      return kE4M3;
    case DType::kFloat8E5M2:
      return kE5M2;
    default:
      OCTET_FAIL(op, ": expected an fp8 dtype (fp8_e4m3 or fp8_e5m2), got ", dtype);
  }
}

void CheckLength(int64_t n, const char* op) {
  OCTET_CHECK(n >= 0, op, ": negative length ", n);
}

float AmaxFromAbsBits(uint32_t abs_bits) {
  // For non-negative floats, integer order is float order and every NaN is
  // above +inf, so the amax is a uint32 max over |x| bits.
  if (abs_bits > 0x7F800000u) return std::numeric_limits<float>::quiet_NaN();
  return detail::BitsAsFloat(abs_bits);
}

// ---------------------------------------------------------------------------
// Lookup tables, built once from the scalar functions so every path shares
// their definition.

float DecodeFp8(Fp8Kind kind, uint8_t code) {
  return kind == kE4M3 ? E4M3BitsToFloat(code) : E5M2BitsToFloat(code);
}

Fp8Tables BuildFp8Tables() {
  Fp8Tables t;
  for (int kind = 0; kind < 2; ++kind) {
    for (int code = 0; code < 256; ++code) {
      const float value = DecodeFp8(static_cast<Fp8Kind>(kind),
                                    static_cast<uint8_t>(code));
      t.f32[kind][code] = value;
      t.bf16[kind][code] = FloatToBf16Bits(value);
      if (code < 128) {
        const bool is_nan = value != value;
        const uint16_t bf = FloatToBf16Bits(value);
        t.bf16_lo[kind][code] = static_cast<uint8_t>(bf & 0xFF);
        t.bf16_hi_flag[kind][code] =
            is_nan ? 0xFF : static_cast<uint8_t>(bf >> 8);
        t.bf16_flag[kind][code] = is_nan ? 0xFFFF : bf;
      }
    }
  }
  return t;
}

// ---------------------------------------------------------------------------
// Which path runs.

constexpr int kIsaAvx512 = 1;
constexpr int kIsaVbmi = 2;
constexpr int kIsaBf16 = 4;
constexpr int kIsaAvx2 = 8;  // AVX2 + F16C

int DetectIsaBits() {
#if OCTET_CONVERT_X86_KERNELS
  __builtin_cpu_init();
  int bits = 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) bits |= kIsaAvx2;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) {
    return bits;
  }
  bits |= kIsaAvx512;
  if (__builtin_cpu_supports("avx512vbmi")) bits |= kIsaVbmi;
  if (__builtin_cpu_supports("avx512bf16")) bits |= kIsaBf16;
  return bits;
#else
  return 0;
#endif
}

int DetectedIsaBits() {
  static const int bits = DetectIsaBits();
  return bits;
}

bool DisabledByEnvironment() {
  return internal::ReadEnvSwitch("OCTET_DISABLE_AVX512") == 1;
}

// OCTET_DISABLE_AVX512_BF16=1: as an AVX-512 CPU without the BF16 extension.
bool Bf16DisabledByEnvironment() { return internal::ReadEnvSwitch("OCTET_DISABLE_AVX512_BF16") == 1; }

int DefaultIsaBits() {
  const int bits = DisabledByEnvironment() ? DetectedIsaBits() & kIsaAvx2 : DetectedIsaBits();
  return Bf16DisabledByEnvironment() ? bits & ~kIsaBf16 : bits;
}

std::atomic<int>& ActiveIsaWord() {
  static std::atomic<int> word{DefaultIsaBits()};
  return word;
}

int ActiveIsaBits() { return ActiveIsaWord().load(std::memory_order_relaxed); }

// ---------------------------------------------------------------------------
// Scalar loops (also the reference the AVX-512 kernels are tested against).

template <class Format>
uint32_t QuantizeScalar(const float* src, float scale, Fp8Saturation sat,
                        uint8_t* dst, int64_t n) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t abs_bits = detail::FloatAsBits(src[i]) & 0x7FFFFFFFu;
    amax_bits = abs_bits > amax_bits ? abs_bits : amax_bits;
    dst[i] = detail::FloatToFp8Bits<Format>(src[i] * scale, sat);
  }
  return amax_bits;
}

uint32_t AmaxScalar(const float* src, int64_t n) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t abs_bits = detail::FloatAsBits(src[i]) & 0x7FFFFFFFu;
    amax_bits = abs_bits > amax_bits ? abs_bits : amax_bits;
  }
  return amax_bits;
}

}  // namespace

namespace convert_internal {
const Fp8Tables& Tables() {
  static const Fp8Tables tables = BuildFp8Tables();
  return tables;
}
}  // namespace convert_internal

// ---------------------------------------------------------------------------
// Public entry points.

using namespace convert_internal;  // NOLINT

float QuantizeRow(const float* src, float scale, DType fp8_dtype,
                  Fp8Saturation sat, uint8_t* dst, int64_t n) {
  const Fp8Kind kind = Fp8KindOf(fp8_dtype, "QuantizeRow");
  CheckLength(n, "QuantizeRow");
  uint32_t amax_bits;
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) {
    amax_bits =
        kind == kE4M3
            ? QuantizeAvx512<detail::E4M3Format>(src, scale, sat, dst, n)
            : QuantizeAvx512<detail::E5M2Format>(src, scale, sat, dst, n);
    return AmaxFromAbsBits(amax_bits);
  }
  if (ActiveIsaBits() & kIsaAvx2) {
    amax_bits = kind == kE4M3
                    ? QuantizeAvx2<detail::E4M3Format>(src, scale, sat, dst, n)
                    : QuantizeAvx2<detail::E5M2Format>(src, scale, sat, dst, n);
    return AmaxFromAbsBits(amax_bits);
  }
#endif
  amax_bits = kind == kE4M3
                  ? QuantizeScalar<detail::E4M3Format>(src, scale, sat, dst, n)
                  : QuantizeScalar<detail::E5M2Format>(src, scale, sat, dst, n);
  return AmaxFromAbsBits(amax_bits);
}

namespace {

// The bf16 row src widened to f32 in L1-sized pieces; f(piece, first
// index, length) returns the piece's amax, and the row's is returned (NaN
// wins: NOTE [amax combine order] in ops/cpu/cast_cpu.cc).
template <class F>
float AmaxOverWidenedPieces(const uint16_t* src, int64_t n, F f) {
  constexpr int64_t kPiece = 1024;
  alignas(64) float buf[kPiece];
  float amax = 0.0f;
  for (int64_t i = 0; i < n; i += kPiece) {
    const int64_t m = std::min(kPiece, n - i);
    Bf16ToFloatRow(src + i, buf, m);
    amax = MaxNaN(amax, f(buf, i, m));
  }
  return amax;
}

}  // namespace

// NOTE [bf16 quantize in registers]: O1 quantizes bf16 activations and
// gradients (the attention's q/k/v, the MLP and attention outputs' gradients)
// on every step. Through an f32 copy that cost a Bf16ToFloatRow pass into a
// block buffer before each QuantizeRow; the AVX-512 and AVX2 kernels widen in
// the register instead (the same arithmetic on the same f32 values). On AVX2
// that is 4-6 % faster than widening L1-sized pieces first (octet_convert_bench
// BM_QuantizeBf16RowWithAmax/path:0, AMD EPYC Zen 3, three alternating rounds:
// 5.38-5.59 against 5.69-5.75 us for 16 Ki values): the encoder's arithmetic,
// not the widening, bounds it. The scalar build keeps the composition.
float QuantizeBf16Row(const uint16_t* src, float scale, DType fp8_dtype,
                      Fp8Saturation sat, uint8_t* dst, int64_t n) {
  [[maybe_unused]] const Fp8Kind kind = Fp8KindOf(fp8_dtype, "QuantizeBf16Row");  // also checks the dtype
  CheckLength(n, "QuantizeBf16Row");
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) {
    return AmaxFromAbsBits(kind == kE4M3 ? QuantizeAvx512<detail::E4M3Format>(src, scale, sat, dst, n)
                                         : QuantizeAvx512<detail::E5M2Format>(src, scale, sat, dst, n));
  }
  if (ActiveIsaBits() & kIsaAvx2) {
    return AmaxFromAbsBits(kind == kE4M3 ? QuantizeAvx2<detail::E4M3Format>(src, scale, sat, dst, n)
                                         : QuantizeAvx2<detail::E5M2Format>(src, scale, sat, dst, n));
  }
#endif
  return AmaxOverWidenedPieces(src, n, [&](const float* piece, int64_t i, int64_t m) {
    return QuantizeRow(piece, scale, fp8_dtype, sat, dst + i, m);
  });
}

void DequantizeRow(const uint8_t* src, DType fp8_dtype, float scale_inv,
                   float* dst, int64_t n) {
  const Fp8Kind kind = Fp8KindOf(fp8_dtype, "DequantizeRow");
  CheckLength(n, "DequantizeRow");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    if (isa & kIsaVbmi) {
      DequantizeVbmi(src, kind, scale_inv, dst, n);
    } else {
      DequantizeBw(src, kind, scale_inv, dst, n);
    }
    return;
  }
  if (isa & kIsaAvx2) {
    DequantizeAvx2(src, kind, scale_inv, dst, n);
    return;
  }
#endif
  const float* table = Tables().f32[kind];
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]] * scale_inv;
}

void Fp8ToBf16Row(const uint8_t* src, DType fp8_dtype, uint16_t* dst,
                  int64_t n) {
  const Fp8Kind kind = Fp8KindOf(fp8_dtype, "Fp8ToBf16Row");
  CheckLength(n, "Fp8ToBf16Row");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    if (isa & kIsaVbmi) {
      Fp8ToBf16Vbmi(src, kind, dst, n);
    } else {
      Fp8ToBf16Bw(src, kind, dst, n);
    }
    return;
  }
  if (isa & kIsaAvx2) {
    Fp8ToBf16Avx2(src, kind, dst, n);
    return;
  }
#endif
  const uint16_t* table = Tables().bf16[kind];
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

bool Fp8ToBf16PairRows64(const uint8_t* src, int64_t row_stride, int64_t pairs, DType fp8_dtype, uint16_t* dst) {
  const Fp8Kind kind = Fp8KindOf(fp8_dtype, "Fp8ToBf16PairRows64");
  CheckLength(pairs, "Fp8ToBf16PairRows64");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if ((isa & kIsaAvx512) && (isa & kIsaVbmi)) {
    Fp8ToBf16PairRowsVbmi(src, row_stride, pairs, kind, dst);
    return true;
  }
#endif
  (void)src, (void)row_stride, (void)kind, (void)dst;
  return false;
}

void FloatToBf16Row(const float* src, uint16_t* dst, int64_t n) {
  CheckLength(n, "FloatToBf16Row");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    if (isa & kIsaBf16) {
      FloatToBf16Native(src, dst, n);
    } else {
      FloatToBf16Avx512(src, dst, n);
    }
    return;
  }
  if (isa & kIsaAvx2) {
    FloatToBf16Avx2(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16Bits(src[i]);
}

void Bf16ToFloatRow(const uint16_t* src, float* dst, int64_t n) {
  CheckLength(n, "Bf16ToFloatRow");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    Bf16ToFloatAvx512(src, dst, n);
    return;
  }
  if (isa & kIsaAvx2) {
    Bf16ToFloatAvx2(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16BitsToFloat(src[i]);
}

void FloatToF16Row(const float* src, uint16_t* dst, int64_t n) {
  CheckLength(n, "FloatToF16Row");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    FloatToF16Avx512(src, dst, n);
    return;
  }
  if (isa & kIsaAvx2) {
    FloatToF16Avx2(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToF16Bits(src[i]);
}

void F16ToFloatRow(const uint16_t* src, float* dst, int64_t n) {
  CheckLength(n, "F16ToFloatRow");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) {
    F16ToFloatAvx512(src, dst, n);
    return;
  }
  if (isa & kIsaAvx2) {
    F16ToFloatAvx2(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = F16BitsToFloat(src[i]);
}

float AmaxRow(const float* src, int64_t n) {
  CheckLength(n, "AmaxRow");
#if OCTET_CONVERT_X86_KERNELS
  const int isa = ActiveIsaBits();
  if (isa & kIsaAvx512) return AmaxFromAbsBits(AmaxAvx512(src, n));
  if (isa & kIsaAvx2) return AmaxFromAbsBits(AmaxAvx2(src, n));
#endif
  return AmaxFromAbsBits(AmaxScalar(src, n));
}

float AmaxBf16Row(const uint16_t* src, int64_t n) {
  CheckLength(n, "AmaxBf16Row");
#if OCTET_CONVERT_X86_KERNELS
  if (ActiveIsaBits() & kIsaAvx512) return AmaxFromAbsBits(AmaxBf16Avx512(src, n));
#endif
  return AmaxOverWidenedPieces(src, n, [](const float* piece, int64_t, int64_t m) { return AmaxRow(piece, m); });
}

bool CpuHasAvx512Bf16() {
  const int isa = ActiveIsaBits();
  return (isa & kIsaAvx512) && (isa & kIsaBf16);
}

namespace internal {
namespace {

ConverterIsa IsaFromBits(int bits) {
  ConverterIsa isa;
  isa.avx512 = (bits & kIsaAvx512) != 0;
  isa.vbmi = isa.avx512 && (bits & kIsaVbmi) != 0;
  isa.bf16 = isa.avx512 && (bits & kIsaBf16) != 0;
  isa.avx2 = (bits & kIsaAvx2) != 0;
  return isa;
}

}  // namespace

ConverterIsa DetectedConverterIsa() { return IsaFromBits(DetectedIsaBits()); }

ConverterIsa EnvironmentConverterIsa() { return IsaFromBits(DefaultIsaBits()); }

ConverterIsa ActiveConverterIsa() { return IsaFromBits(ActiveIsaBits()); }

void SetConverterIsaForTesting(const ConverterIsa& isa) {
  int bits = 0;
  if (isa.avx512) {
    bits = kIsaAvx512 | (isa.vbmi ? kIsaVbmi : 0) | (isa.bf16 ? kIsaBf16 : 0);
  }
  if (isa.avx2) bits |= kIsaAvx2;
  ActiveIsaWord().store(bits & DetectedIsaBits(), std::memory_order_relaxed);
}

void ForceScalarConvertersForTesting(bool force_scalar) {
  ActiveIsaWord().store(force_scalar ? 0 : DefaultIsaBits(),
                        std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace octet
