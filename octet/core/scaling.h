// Scale metadata of FP8 tensors.
//
// The real value of element i is fp8_value[i] * scale_inv (per-tensor). The
// scale, scale_inv and amax live in fp32 tensors on the FP8 tensor's device so
// GPU kernels read and write them without a host sync.
#pragma once

#include <memory>

#include <octet/core/scaling_math.h>
#include <octet/core/tensor.h>

namespace octet {

enum class ScaleGranularity : uint8_t {
  kPerTensor,     // scale: [1]
  kPerRow,        // scale: [rows]        (reserved; not produced yet)
  kBlock1x128,    // scale: [ceil(K/128), rows] (reserved)
  kBlock128x128,  // scale: [ceil(rows/128), ceil(K/128)] (reserved)
};

const char* Name(ScaleGranularity g);

struct ScaleMeta {
  ScaleGranularity granularity = ScaleGranularity::kPerTensor;
  Tensor scale;      // fp32; multiplies real values before the cast
  Tensor scale_inv;  // fp32; multiplies fp8 values after it
  Tensor amax;       // fp32 [1]: max |x| of the real values at quantization time
  // NOTE [fp8 column-wise data]: optional, for a 2-D FP8 tensor q (R, C) made
  // by QuantizeForGemm (ops/matmul.h) where FP8 GEMMs want it: the same values
  // transposed, (C, R) contiguous, with the same scale. rowwise_storage and
  // rowwise_offset name q's own bytes, so ScaledMatmul substitutes the copy
  // only for q and q.T() themselves, never for another tensor that inherited
  // this metadata (a copy, a reshape). The copy's own metadata has no
  // columnwise entry (no reference cycle).
  Tensor columnwise;
  const Storage* rowwise_storage = nullptr;
  int64_t rowwise_offset = 0;
};

// Per-tensor metadata on `device` with the given scale (scale_inv = 1/scale)
// and amax.
std::shared_ptr<const ScaleMeta> MakePerTensorScale(float scale, float amax, Device device = kCPU);

// Host value of a per-tensor scale_inv (syncs on a device). 1 for a tensor without scale metadata.
float ScaleInvValue(const Tensor& fp8);
float ScaleValue(const Tensor& fp8);

}  // namespace octet
