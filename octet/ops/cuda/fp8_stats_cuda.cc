// CUDA entry of the FP8 clip counts (NOTE [fp8 clip counts] in
// ops/fp8_stats_kernels.h): the tensor is copied to the host and counted by
// the CPU kernel, so both devices give the same counts. The counts are
// telemetry (nn/fp8_scaling.h CountFp8Clipping, off by default), read on the
// host anyway; a device reduction would save the copy (NOTE [host reads]:
// the copy is one counted read).
#include <octet/ops/fp8_stats_kernels.h>

namespace octet::cuda {
namespace {

Fp8ClipCounts Fp8ClipCountCuda(const Tensor& x, float scale, DType fp8_dtype) {
  return fp8_clip_count_kernel(kCPU)(x.To(kCPU), scale, fp8_dtype);
}

}  // namespace

OCTET_REGISTER_KERNEL(fp8_clip_count_kernel, DeviceType::kCUDA, &Fp8ClipCountCuda);

}  // namespace octet::cuda
