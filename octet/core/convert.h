// Row converters between float32 and the narrow float formats, for the CPU.
//
// Every function converts n contiguous elements; fp8 buffers are uint8_t*
// (float8_e4m3 / float8_e5m2 bits), bf16 and f16 buffers are uint16_t*
// (bfloat16 / float16 bits). Source and destination must not overlap. n == 0
// is a no-op. Results are bit-identical to applying the scalar functions of
// core/float8.h, core/bfloat16.h and core/float16.h element by element, except
// that the payload of a NaN produced by DequantizeRow is unspecified.
//
// NOTE [converter dispatch]: each call picks an implementation at run time.
// On CPUs with AVX-512 F/BW/DQ/VL it uses AVX-512 kernels (compiled with
// per-function target attributes; the library itself is not built with
// -march=native); AVX-512 VBMI enables the byte-table fp8 decoders and
// AVX-512 BF16 enables vcvtneps2bf16 for FloatToBf16Row. On CPUs with AVX2
// and F16C but no AVX-512 (or with the environment variable
// OCTET_DISABLE_AVX512=1, read once, at the first call; any value but 0, 1
// or "" is an error: NOTE [environment switches] in env.h) it uses AVX2
// kernels that decode fp8 through binary16. Without AVX2 the portable
// scalar loops run. OCTET_DISABLE_AVX512_BF16=1 likewise keeps every kernel
// of octet's from the BF16 extension (CpuHasAvx512Bf16 false), as on an
// AVX-512 CPU without it (Skylake to Ice Lake). Tests can switch paths with the
// octet::internal functions at the end of this file.
//
// Errors: a negative n, or a dtype that is not kFloat8E4M3 / kFloat8E5M2 where
// an fp8 dtype is expected, throws octet::Error (core/error.h).
#pragma once

#include <cstdint>

#include <octet/core/dtype.h>
#include <octet/core/float8.h>

namespace octet {

// dst[i] = fp8(src[i] * scale), round to nearest even, with `sat` deciding
// what happens past the largest finite value (NOTE [fp8 conversion semantics]
// in core/float8.h). The product is a single float32 multiply.
// Returns amax = max_i |src[i]| of the unscaled input (0 for n == 0); if any
// src[i] is NaN, returns NaN.
//   src: (n) float32, dst: (n) fp8 bits of `fp8_dtype`.
float QuantizeRow(const float* src, float scale, DType fp8_dtype,
                  Fp8Saturation sat, uint8_t* dst, int64_t n);

// QuantizeRow of the bf16 row src widened to float32 (exact), without an f32
// copy of it: the same codes and amax as
// Bf16ToFloatRow(src, tmp, n); QuantizeRow(tmp, ...).
//   src: (n) bf16 bits, dst: (n) fp8 bits of `fp8_dtype`.
float QuantizeBf16Row(const uint16_t* src, float scale, DType fp8_dtype,
                      Fp8Saturation sat, uint8_t* dst, int64_t n);

// dst[i] = float(src[i]) * scale_inv (one float32 multiply). fp8 NaN codes
// give NaN.
//   src: (n) fp8 bits of `fp8_dtype`, dst: (n) float32.
void DequantizeRow(const uint8_t* src, DType fp8_dtype, float scale_inv,
                   float* dst, int64_t n);

// dst[i] = bf16(float(src[i])). Exact: every fp8 value is a bf16 value. NaN
// codes (either sign) give the canonical bf16 NaN 0x7FFF; e5m2 +-inf give bf16
// +-inf. This is the operand-widening step of the CPU FP8 GEMM.
//   src: (n) fp8 bits of `fp8_dtype`, dst: (n) bf16 bits.
void Fp8ToBf16Row(const uint8_t* src, DType fp8_dtype, uint16_t* dst,
                  int64_t n);

// dst[i] = FloatToBf16Bits(src[i]): round to nearest even, NaN -> 0x7FFF,
// subnormals kept. src: (n) float32, dst: (n) bf16 bits.
void FloatToBf16Row(const float* src, uint16_t* dst, int64_t n);

// dst[i] = Bf16BitsToFloat(src[i]), exact. src: (n) bf16 bits, dst: (n) f32.
void Bf16ToFloatRow(const uint16_t* src, float* dst, int64_t n);

// dst[i] = FloatToF16Bits(src[i]): round to nearest even, overflow -> +-inf,
// NaN -> 0x7FFF. src: (n) float32, dst: (n) binary16 bits.
void FloatToF16Row(const float* src, uint16_t* dst, int64_t n);

// dst[i] = F16BitsToFloat(src[i]), exact. src: (n) binary16 bits, dst: (n) f32.
void F16ToFloatRow(const uint16_t* src, float* dst, int64_t n);

// max_i |src[i]| (0 for n == 0); NaN if any element is NaN. src: (n) float32.
float AmaxRow(const float* src, int64_t n);

// AmaxRow of the bf16 row src widened to float32. src: (n) bf16 bits.
float AmaxBf16Row(const uint16_t* src, int64_t n);

// FP8 codes to bf16 bits for the BF16 GEMM's VNNI layout, which interleaves
// pairs of K rows: for p < pairs, rows 2p and 2p + 1 of src (64 codes each,
// row_stride bytes apart) go to dst[128 p + 2 i] and dst[128 p + 2 i + 1],
// i < 64, with Fp8ToBf16Row's values (NOTE [fp8 vnni pairs]). Returns false,
// writing nothing, where the row converters have no AVX-512 VBMI kernel to
// do it with: the caller converts and interleaves itself.
bool Fp8ToBf16PairRows64(const uint8_t* src, int64_t row_stride, int64_t pairs, DType fp8_dtype, uint16_t* dst);

// True when FloatToBf16Row currently uses the AVX-512 BF16 instruction
// (vcvtneps2bf16), i.e. the CPU has it and the AVX-512 paths are enabled.
bool CpuHasAvx512Bf16();

namespace internal {

// The instruction-set features the row converters may use (see NOTE
// [converter dispatch]). avx512 means F+BW+DQ+VL; vbmi and bf16 are only used
// together with avx512. avx2 means AVX2+F16C; its kernels run when avx512 is
// off.
struct ConverterIsa {
  bool avx512 = false;
  bool vbmi = false;
  bool bf16 = false;
  bool avx2 = false;
};

// What this CPU (and OS) supports, ignoring OCTET_DISABLE_AVX512(_BF16).
ConverterIsa DetectedConverterIsa();

// DetectedConverterIsa as OCTET_DISABLE_AVX512(_BF16) leave it: what the
// converters use unless a test changes them (read from the environment at
// each call).
ConverterIsa EnvironmentConverterIsa();

// What the row converters use now.
ConverterIsa ActiveConverterIsa();

}  // namespace internal
}  // namespace octet
