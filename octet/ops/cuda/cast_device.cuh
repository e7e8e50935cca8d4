// Device helpers of the cast kernels (ops/cuda/cast.cu and
// ops/cuda/cast_transpose.cu): NaN-propagating max merges, the block-wide
// amax with one atomic per block, and the FP8 conversion of core/float8.h.
//
// NOTE [amax on the device]: each block reduces max|x| in registers and
// shared memory, then one atomicMax per block on the float's bit pattern
// (for non-negative floats the int order is the float order, and a positive
// NaN's bits exceed +inf's, so a NaN wins and is noticed). The launcher zeroes
// the amax word first (cudaMemsetAsync on the same stream). A max does not
// depend on the order of the atomics: the result is deterministic.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

#include <octet/core/float8.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/kernel_utils.cuh>

namespace octet::cuda {

__device__ __forceinline__ float AbsMaxMerge(float m, float v) {
  const float a = fabsf(v);
  return (a > m || a != a) ? a : m;
}

__device__ __forceinline__ float MaxMerge(float a, float b) { return (b > a || b != b) ? b : a; }

// Block-wide max of `v` (1-D or 2-D blocks, a multiple of 32 threads), then
// one atomic per block (NOTE [amax on the device]). Call from every thread.
__device__ __forceinline__ void BlockAmaxToGlobal(float v, float* amax) {
  __shared__ float shared[32];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nwarps = (blockDim.x * blockDim.y) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = MaxMerge(v, __shfl_down_sync(kFullMask, v, o));
  if ((tid & 31) == 0) shared[tid >> 5] = v;
  __syncthreads();
  if (tid < 32) {
    v = tid < nwarps ? shared[tid] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = MaxMerge(v, __shfl_down_sync(kFullMask, v, o));
    if (tid == 0 && amax != nullptr) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(v));
  }
}

// Round to nearest even with the given saturation (core/float8.h, bit-exact
// with the CPU kernels).
template <typename F8>
__device__ __forceinline__ F8 ToFp8(float v, Fp8Saturation sat) {
  if constexpr (std::is_same_v<F8, float8_e4m3>) {
    return float8_e4m3::FromBits(FloatToE4M3Bits(v, sat));
  } else {
    return float8_e5m2::FromBits(FloatToE5M2Bits(v, sat));
  }
}
template <typename F8>
__device__ __forceinline__ uint8_t ToFp8Bits(float v, Fp8Saturation sat) {
  if constexpr (std::is_same_v<F8, float8_e4m3>) {
    return FloatToE4M3Bits(v, sat);
  } else {
    return FloatToE5M2Bits(v, sat);
  }
}

// NOTE [hardware fp8 conversion]: sm_89+ converts two floats to FP8 in one
// instruction (cvt.rn.satfinite.{e4m3,e5m2}x2.f32: round to nearest even,
// out-of-range values and inf to the max finite value, NaN to the NaN code
// 0x7F), the conversion cuda_fp8.h's host functions emulate and that
// tests/core/float8_cuda_oracle_test.cc checks core/float8.h against. The
// vectorised kernel uses it for kSatFinite (there is no non-saturating
// form); kNoSat and the generic kernel use core/float8.h's functions.
// tests/cuda/cast_transpose_cuda_test.cc compares the bytes with the CPU for
// both; should a device ever differ, set kCtHardwareCvt to false.
constexpr bool kCtHardwareCvt = true;

// {fp8(lo), fp8(hi)} as the low and high byte, saturating to finite.
template <typename F8>
__device__ __forceinline__ uint16_t Fp8x2SatFinite(float lo, float hi) {
  uint16_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (std::is_same_v<F8, float8_e4m3>) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  }
#else
  r = static_cast<uint16_t>(ToFp8Bits<F8>(lo, Fp8Saturation::kSatFinite) |
                            (ToFp8Bits<F8>(hi, Fp8Saturation::kSatFinite) << 8));
#endif
  return r;
}

template <typename F>
void DispatchFp8(DType dtype, const char* op, F&& f) {
  Dispatch<DType::kFloat8E4M3, DType::kFloat8E5M2>(dtype, op, std::forward<F>(f));
}
// float64 inputs are rounded to float32 first (ops/cast_kernels.h).
template <typename F>
void DispatchQuantizeInput(DType dtype, const char* op, F&& f) {
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16>(dtype, op, std::forward<F>(f));
}

inline void ZeroAmax(float* amax, cudaStream_t stream) {
  if (amax != nullptr) OCTET_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
}

}  // namespace octet::cuda
