// CPU kernel of the FP8 clip counts (NOTE [fp8 clip counts] in
// ops/fp8_stats_kernels.h): one OpenMP reduction over the elements.
#include <cmath>

#include <octet/core/dtype_traits.h>
#include <octet/ops/fp8_stats_kernels.h>

namespace octet::cpu {
namespace {

float HalfMinSubnormal(DType fp8) {
  // e4m3: 2^-10, e5m2: 2^-17 (core/float8.h kHalfMinSubnormalAbs).
  return fp8 == DType::kFloat8E4M3 ? 0.0009765625f : 7.62939453125e-06f;
}

Fp8ClipCounts Fp8ClipCountCpu(const Tensor& x, float scale, DType fp8_dtype) {
  OCTET_CHECK(x.is_contiguous(), "fp8 clip count: the CPU kernel needs a contiguous tensor, got ", Describe(x));
  const bool e4m3 = fp8_dtype == DType::kFloat8E4M3;
  const float clamp_from = e4m3 ? 464.0f : 61440.0f;
  const float tiny = HalfMinSubnormal(fp8_dtype);
  Fp8ClipCounts total;
  DispatchFloat(x.dtype(), "CountFp8Clipping", [&]<typename T>() {
    const T* p = x.data<T>();
    const int64_t n = x.numel();
    int64_t sat = 0, under = 0;
#pragma omp parallel for reduction(+ : sat, under) schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(p[i]);
      const float a = std::fabs(v * scale);
      sat += e4m3 ? a > clamp_from : a >= clamp_from;
      under += (v != 0.0f) & (a <= tiny);
    }
    total.saturated = sat;
    total.underflow = under;
  });
  return total;
}

}  // namespace

OCTET_REGISTER_KERNEL(fp8_clip_count_kernel, DeviceType::kCPU, &Fp8ClipCountCpu);

}  // namespace octet::cpu
