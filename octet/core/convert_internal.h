// Internal to the row converters (core/convert.cc, core/convert_avx512.cc and
// core/convert_avx2.cc): the FP8 lookup tables and the vector kernels'
// declarations. Not part of octet's API.
#pragma once

#include <cstdint>

#include <octet/core/float8.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OCTET_CONVERT_X86_KERNELS 1
// GCC 12 reports (-Wmaybe-)uninitialized inside its own AVX-512 intrinsics
// (the `__m512i __Y = __Y;` of _mm512_undefined_epi32) once they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#else
#define OCTET_CONVERT_X86_KERNELS 0
#endif

#if OCTET_CONVERT_X86_KERNELS
#define OCTET_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define OCTET_TARGET_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))
#define OCTET_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#endif

namespace octet::convert_internal {

enum Fp8Kind { kE4M3 = 0, kE5M2 = 1 };

struct alignas(64) Fp8Tables {
  // Scalar path: full 256-entry tables.
  float f32[2][256];
  uint16_t bf16[2][256];
  // NOTE [fp8 byte tables]: the AVX-512 decoders look up |code| (7 bits) and
  // put the sign back with one vpternlog. A NaN code's entry has its top bit
  // set as a flag; the ternary function out = C ? (~A & B) : A with
  // A = entry, B = input, C = the sign-bit mask copies the input's sign into
  // the sign bit unless the flag is set (then the sign bit is 0), and keeps
  // the entry's other bits. So NaN gives the positive canonical 0x7FFF and
  // every other code keeps its sign (-0 stays -0).
  alignas(64) uint8_t bf16_lo[2][128];       // low byte of bf16(|code|)
  alignas(64) uint8_t bf16_hi_flag[2][128];  // high byte, 0xFF for NaN
  alignas(64) uint16_t bf16_flag[2][128];    // bf16(|code|), 0xFFFF for NaN
};

// Built once from the scalar conversion functions, so every path shares them.
const Fp8Tables& Tables();

// The integer constants of detail::FloatToFp8Bits's normal range and
// overflow, as the vector encoders (AVX-512, AVX2) use them.
template <class Format>
struct Fp8EncodeConstants {
  // Float mantissa bits below the fp8 mantissa.
  static constexpr uint32_t kDropped = 23u - Format::kMantissaBits;
  // (a + kRoundBias + lsb) >> kDropped, with lsb the lowest kept bit, equals
  // the scalar ((a + half_ulp - 1 + lsb) >> kDropped) - (rebias << mantissa
  // bits): the exponent rebias is folded into the rounding add.
  static constexpr uint32_t kRoundBias = ((1u << (kDropped - 1u)) - 1u) - (Format::kRebias << 23);
  // The code (without sign) for |x| past Format::kOverflowAbs under `sat`.
  static constexpr uint32_t OverflowCode(Fp8Saturation sat) {
    return sat == Fp8Saturation::kSatFinite ? Format::kMaxFiniteCode : Format::kOverflowNoSatCode;
  }
};

#if OCTET_CONVERT_X86_KERNELS
// AVX-512 kernels (convert_avx512.cc); callers check the CPU first.
// Quantize returns the bits of max |src| (AmaxFromAbsBits turns them into a float).
OCTET_TARGET_AVX512_VBMI void Fp8ToBf16Vbmi(const uint8_t* src, Fp8Kind kind, uint16_t* dst, int64_t n);
OCTET_TARGET_AVX512_VBMI void DequantizeVbmi(const uint8_t* src, Fp8Kind kind, float scale_inv, float* dst, int64_t n);
OCTET_TARGET_AVX512_VBMI void Fp8ToBf16PairRowsVbmi(const uint8_t* src, int64_t row_stride, int64_t pairs,
                                                    Fp8Kind kind, uint16_t* dst);
OCTET_TARGET_AVX512 void Fp8ToBf16Bw(const uint8_t* src, Fp8Kind kind, uint16_t* dst, int64_t n);
OCTET_TARGET_AVX512 void DequantizeBw(const uint8_t* src, Fp8Kind kind, float scale_inv, float* dst, int64_t n);
// Src: float, or uint16_t for bf16 bits (widened in the register).
template <class Format, class Src>
OCTET_TARGET_AVX512 uint32_t QuantizeAvx512(const Src* src, float scale, Fp8Saturation sat, uint8_t* dst, int64_t n);
OCTET_TARGET_AVX512 uint32_t AmaxAvx512(const float* src, int64_t n);
OCTET_TARGET_AVX512 uint32_t AmaxBf16Avx512(const uint16_t* src, int64_t n);
OCTET_TARGET_AVX512 void FloatToBf16Avx512(const float* src, uint16_t* dst, int64_t n);
OCTET_TARGET_AVX512_BF16 void FloatToBf16Native(const float* src, uint16_t* dst, int64_t n);
OCTET_TARGET_AVX512 void Bf16ToFloatAvx512(const uint16_t* src, float* dst, int64_t n);
OCTET_TARGET_AVX512 void FloatToF16Avx512(const float* src, uint16_t* dst, int64_t n);
OCTET_TARGET_AVX512 void F16ToFloatAvx512(const uint16_t* src, float* dst, int64_t n);

// AVX2 + F16C kernels (convert_avx2.cc, which a target pragma compiles for
// those features), for CPUs without AVX-512; same contracts as the AVX-512
// ones.
void Fp8ToBf16Avx2(const uint8_t* src, Fp8Kind kind, uint16_t* dst, int64_t n);
void DequantizeAvx2(const uint8_t* src, Fp8Kind kind, float scale_inv, float* dst, int64_t n);
// Src: float, or uint16_t for bf16 bits (widened in the register).
template <class Format, class Src>
uint32_t QuantizeAvx2(const Src* src, float scale, Fp8Saturation sat, uint8_t* dst, int64_t n);
uint32_t AmaxAvx2(const float* src, int64_t n);
void FloatToBf16Avx2(const float* src, uint16_t* dst, int64_t n);
void Bf16ToFloatAvx2(const uint16_t* src, float* dst, int64_t n);
void FloatToF16Avx2(const float* src, uint16_t* dst, int64_t n);
void F16ToFloatAvx2(const uint16_t* src, float* dst, int64_t n);
#endif

}  // namespace octet::convert_internal
