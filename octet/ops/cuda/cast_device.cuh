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

// y = fp8(map(x) * scale) elementwise, amax = max |map(x)| (NaN wins),
// scale_inv = 1 / scale when non-null: Quantize with map = widening to f32,
// GeluFp8 with map = GELU in f32. `map` takes one T and returns the f32 value
// (a trivially copyable functor). x (n) contiguous T; y (n) FP8; scale_ptr,
// scale_inv, amax: [1] f32 on the device. V values per vector access.
template <typename T, typename F8, int V, typename Map>
__global__ void QuantizeMappedKernel(const T* __restrict__ x, F8* __restrict__ y, int64_t n, const float* scale_ptr,
                                     Fp8Saturation sat, float* scale_inv, float* amax, Map map) {
  const float scale = *scale_ptr;
  float m = 0.0f;
  const int64_t tid = GlobalThreadId(), stride = GridStride();
  const int64_t nvec = n / V;
  const auto* xv = reinterpret_cast<const VecT<T, V>*>(x);
  auto* yv = reinterpret_cast<VecT<F8, V>*>(y);
  for (int64_t i = tid; i < nvec; i += stride) {
    const VecT<T, V> a = xv[i];
    VecT<F8, V> o;
    float f[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      f[k] = map(a.v[k]);
      m = AbsMaxMerge(m, f[k]);
    }
    if (V % 2 == 0 && kCtHardwareCvt && sat == Fp8Saturation::kSatFinite) {  // NOTE [hardware fp8 conversion]
#pragma unroll
      for (int k = 0; k + 1 < V; k += 2) {
        const uint16_t two = Fp8x2SatFinite<F8>(f[k] * scale, f[k + 1] * scale);
        o.v[k] = F8::FromBits(static_cast<uint8_t>(two & 0xFF));
        o.v[k + 1] = F8::FromBits(static_cast<uint8_t>(two >> 8));
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = ToFp8<F8>(f[k] * scale, sat);
    }
    yv[i] = o;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride) {
    const float v = map(x[i]);
    m = AbsMaxMerge(m, v);
    y[i] = ToFp8<F8>(v * scale, sat);
  }
  BlockAmaxToGlobal(m, amax);
  if (scale_inv != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / scale;
}

// Launches QuantizeMappedKernel over x (n elements) with the widest vector
// access both pointers allow; `what` names it in the launch check. The
// caller zeroes amax first (ZeroAmax). Even an empty tensor runs one block:
// it writes amax = 0 and scale_inv.
template <typename T, typename F8, typename Map>
void LaunchQuantizeMapped(const KernelContext& ctx, const T* x, F8* y, int64_t n, const float* scale_ptr,
                          Fp8Saturation sat, float* scale_inv, float* amax, Map map, const char* what) {
  const uintptr_t addrs[2] = {reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(y)};
  const int sizes[2] = {static_cast<int>(sizeof(T)), 1};
  const int vec = PickVectorWidth(addrs, sizes, 2);
  const unsigned grid = ctx.Grid(n / vec > 1 ? n / vec : 1);
  const auto s = ctx.stream();
  switch (vec) {
    case 8: QuantizeMappedKernel<T, F8, 8><<<grid, kElementwiseThreads, 0, s>>>(x, y, n, scale_ptr, sat, scale_inv, amax, map); break;
    case 4: QuantizeMappedKernel<T, F8, 4><<<grid, kElementwiseThreads, 0, s>>>(x, y, n, scale_ptr, sat, scale_inv, amax, map); break;
    case 2: QuantizeMappedKernel<T, F8, 2><<<grid, kElementwiseThreads, 0, s>>>(x, y, n, scale_ptr, sat, scale_inv, amax, map); break;
    default: QuantizeMappedKernel<T, F8, 1><<<grid, kElementwiseThreads, 0, s>>>(x, y, n, scale_ptr, sat, scale_inv, amax, map); break;
  }
  OCTET_CUDA_LAUNCH_CHECK(what);
}

}  // namespace octet::cuda
