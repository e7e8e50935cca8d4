// CUDA launchers of the cast family (FP8 quantize / dequantize / cast-
// transpose / delayed-scaling update) and the matrix repacking the cuBLASLt
// GEMM needs (ops/cuda/gemm_cublaslt.cc). Kernels live in ops/cuda/cast.cu.
// Host code; every launcher queues work on the current stream of the
// tensors' device (CurrentStream) and never synchronises with the host:
// scales are read and amaxes written on the device.
//
// Conventions (core/scaling.h, NOTE [scale direction]):
//   y_fp8 = fp8(x * scale)  (one float32 multiply, round to nearest even,
//           saturating or not as `sat` says; NaN stays NaN)
//   amax  = max |x| of the unscaled input (NaN if any x is NaN)
//   x     = float(y_fp8) * scale_inv
// The conversions are core/float8.h's OCTET_HOST_DEVICE functions, so the
// device results are bit-identical to the CPU kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include <octet/core/delayed_scaling.h>
#include <octet/core/float8.h>
#include <octet/core/tensor.h>
#include <octet/ops/delayed_scaling_kernels.h>

namespace octet::cuda {

// The cast family's CUDA kernels (signatures and contracts of
// ops/cast_kernels.h; registered in the quantize/dequantize/amax tables).
// quantize with yt defined is the fused cast-transpose: x (R,C) gives the
// row-wise copy y (R,C, optional) and the column-wise copy yt (C,R) that the
// TN-only FP8 GEMM reads for dgrad/wgrad, plus amax and optionally the
// column sums dbias, in one pass (CastTransposeCuda).
void QuantizeCuda(const Tensor& x, const Tensor& scale, Fp8Saturation sat, const Tensor& y, const Tensor& yt,
                  const Tensor& scale_inv, const Tensor& amax, const Tensor& dbias);
// The cast-transpose behind QuantizeCuda (ops/cuda/cast_transpose.cu), on
// arguments QuantizeCuda has checked: x (R, C) contiguous f32/f64/bf16/f16,
// y (R, C) FP8 or undefined, yt (C, R) FP8, device scalars scale, scale_inv
// and amax (already zeroed), dbias f32 (C) or undefined (NOTE [deterministic
// dbias] there). R and C multiples of 16 with 16-byte aligned data take the
// vectorised kernel (NOTE [fast cast-transpose] in
// ops/cuda/cast_transpose_tile.h), any other shape a 32x32-tile kernel.
void CastTransposeCuda(const Tensor& x, const float* scale, Fp8Saturation sat, const Tensor& y, const Tensor& yt,
                       float* scale_inv, float* amax, const Tensor& dbias);
void DequantizeCuda(const Tensor& x, const Tensor& scale_inv, const Tensor& y);
void AmaxCuda(const Tensor& x, const Tensor& amax);

// One delayed-scaling slot as the update kernel sees it: device pointers
// into the slot's tensors (core/delayed_scaling.h for the math).
using DelayedScalingSlotRef = DelayedScalingSlotPtrs;
// Slots per kernel launch (kernel parameter space; 40 bytes each).
inline constexpr int kDelayedScalingSlotsPerLaunch = 256;

// Updates every slot (all on `device`) with UpdateDelayedScalingSlot: one
// thread per slot, ceil(slots / kDelayedScalingSlotsPerLaunch) launches, no
// host synchronisation. Registered as the CUDA delayed_scaling_update kernel
// (ops/delayed_scaling.h, UpdateDelayedScaling).
void DelayedScalingUpdateCuda(int device, const std::vector<DelayedScalingSlotRef>& slots,
                              const DelayedScalingConfig& config);

// Updates every slot of `b` (all on `device`, core/delayed_scaling.h's
// UpdateDelayedScalingBufferSlot): one thread per slot, one launch, no host
// synchronisation. Registered as the CUDA delayed_scaling_buffers_update.
void DelayedScalingBuffersUpdateCuda(int device, const DelayedScalingBuffers& b, const DelayedScalingConfig& config);

// ---- matrix repacking for the GEMM (raw pointers, explicit stream) ----

// dst[r, c] (contiguous [rows_padded, cols_padded]) = convert(src[r*rs + c*cs])
// for r < rows and c < cols, zero elsewhere. src_dtype -> dst_dtype is the
// identity (any dtype; bytes copied) or a raw conversion (no scale) from
// float32/bfloat16/float16/FP8 to float32/bfloat16/float16 (FP8 values are
// exact in all three). Strides in elements; a transposed source
// (rs == 1) is read through a shared-memory tile so both sides stay coalesced.
void PackMatrixCuda(cudaStream_t stream, const void* src, DType src_dtype, int64_t rows, int64_t cols, int64_t rs,
                    int64_t cs, void* dst, DType dst_dtype, int64_t rows_padded, int64_t cols_padded);

// dst (rows, cols, row stride ldd, dtype dst_dtype) = src (f32, row stride
// lds) converted; FP8 dst: fp8(src * scale) and amax (if not null, zeroed
// first by the launcher) = max|src|. bfloat16/float16/float32 dst: plain
// conversion (scale and amax must be null).
void ConvertOutputCuda(cudaStream_t stream, const float* src, int64_t rows, int64_t cols, int64_t lds, void* dst,
                       DType dst_dtype, int64_t ldd, const float* scale, float* amax);

// out[0] = alpha * (a ? *a : 1) * (b ? *b : 1); out[1] = beta. Device fp32 [2]
// (alpha/beta for cuBLASLt's device pointer mode, from the operands' scale_inv).
void ScaledAlphaBetaCuda(cudaStream_t stream, float alpha, const float* a, const float* b, float beta, float* out);

}  // namespace octet::cuda
