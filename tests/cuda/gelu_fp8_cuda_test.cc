// The CUDA GeluFp8 kernel (ops/cuda/pointwise.cu, NOTE [gelu to fp8] in
// ops/pointwise.cc):
//  - on the device, bit for bit the bytes, amax and scale_inv of the CUDA
//    Quantize of the CUDA float32 Gelu (the same functor and conversion), for
//    both formats, the hardware-pair path (kSatFinite) and the scalar path
//    (kNoSat, misaligned views), f32 / bf16 / f16 / f64 inputs, sizes with
//    vector tails, inf and NaN;
//  - against the CPU kernel: the device GELU uses expf where the CPU uses
//    ExpFast (NOTE [fast exp] in ops/functors.h), so a byte may differ by one
//    code where a value sits on an FP8 rounding boundary; amax to float32
//    rounding;
//  - backward (Gelu's kernel) against the CPU.
// Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/pointwise.h>
#include "tests/cuda/parity_util.h"
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(GeluFp8Cuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::Bytes;
using ::octet::testing::Gpu;
using ::octet::testing::RandomTensor;

constexpr DType kE4M3 = DType::kFloat8E4M3;
constexpr DType kE5M2 = DType::kFloat8E5M2;
constexpr DType kF32 = DType::kFloat32;

float Scalar(const Tensor& t) { return static_cast<float>(t.To(kCPU).ToDoubles().at(0)); }
Tensor ScaleOn(float v, Device d) { return Full({1}, v, {.dtype = kF32, .device = d}); }

void ExpectSameFloat(float a, float b, const std::string& what) {
  if (std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a)) << what;
  } else {
    EXPECT_EQ(a, b) << what;
  }
}

// x on the device (any strides): GeluFp8 against Quantize(Gelu) on the device.
void ExpectDeviceUnfused(const Tensor& xg, DType fp8, float scale, Fp8Saturation sat, const std::string& what) {
  const Tensor q = GeluFp8(xg, fp8, ScaleOn(scale, Gpu()), sat);
  const Tensor g = xg.dtype() == DType::kFloat64 ? Gelu(xg) : Gelu(xg.To(kF32));
  const Tensor want = Quantize(g, fp8, ScaleOn(scale, Gpu()), sat);
  ASSERT_EQ(q.device(), Gpu()) << what;
  EXPECT_EQ(Bytes(q.To(kCPU)), Bytes(want.To(kCPU))) << what;
  ExpectSameFloat(Scalar(q.scale_meta()->amax), Scalar(want.scale_meta()->amax), what + " amax");
  EXPECT_EQ(Scalar(q.scale_meta()->scale_inv), 1.0f / scale) << what;
}

TEST(GeluFp8Cuda, BytesEqualTheDeviceQuantizeOfTheDeviceGelu) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType xdt : {kF32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4096 + 5}, int64_t{257 * 129}}) {
      const Tensor x = RandomTensor({n}, 100 + n, xdt, -6.0, 8.0).To(Gpu());
      for (DType fp8 : {kE4M3, kE5M2}) {
        for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
          const std::string what = std::string(Name(xdt)) + " n=" + std::to_string(n) + " " + Name(fp8);
          ExpectDeviceUnfused(x, fp8, 150.0f, sat, what);
          if (n > 2) ExpectDeviceUnfused(x.Slice(0, 1, n), fp8, 3.0f, sat, what + " misaligned");
        }
      }
    }
  }
  // Transposed (strided) input; inf and NaN.
  const Tensor t = RandomTensor({65, 33}, 7, DType::kBFloat16, -4.0, 4.0).To(Gpu()).T();
  ExpectDeviceUnfused(t, kE4M3, 24.0f, Fp8Saturation::kSatFinite, "transposed");
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor special = FromVector(std::vector<double>{0, 1, -1, 600, inf, -30, 1e-30, nan, 2, 3}, {10}).To(Gpu());
  for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat})
    ExpectDeviceUnfused(special, kE4M3, 2.0f, sat, "special");
}

TEST(GeluFp8Cuda, MatchesTheCpuKernelUpToTheExpRounding) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType xdt : {kF32, DType::kBFloat16}) {
    const Tensor x = RandomTensor({96, 130}, 9, xdt, -5.0, 5.0);
    for (DType fp8 : {kE4M3, kE5M2}) {
      const Tensor qc = GeluFp8(x, fp8, ScaleOn(40.0f, kCPU));
      const Tensor qg = GeluFp8(x.To(Gpu()), fp8, ScaleOn(40.0f, Gpu()));
      const std::vector<double> dc = Dequantize(qc, DType::kFloat64).ToDoubles();
      const std::vector<double> dg = Dequantize(qg.To(kCPU), DType::kFloat64).ToDoubles();
      const double step = fp8 == kE4M3 ? 1.0 / 8 : 1.0 / 4;  // one code, relative (normal range)
      int64_t differ = 0;
      for (size_t i = 0; i < dc.size(); ++i) {
        if (dc[i] == dg[i]) continue;
        ++differ;
        EXPECT_LE(std::abs(dc[i] - dg[i]), step * std::abs(dc[i]) + std::ldexp(1.0, -16)) << i;
      }
      EXPECT_LE(differ, static_cast<int64_t>(dc.size() / 100)) << Name(xdt) << " " << Name(fp8);
      const float ac = Scalar(qc.scale_meta()->amax), ag = Scalar(qg.scale_meta()->amax);
      EXPECT_NEAR(ag, ac, 1e-6 * ac);
    }
  }
}

TEST(GeluFp8Cuda, BackwardMatchesTheCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Tensor x0 = RandomTensor({33, 70}, 11, DType::kBFloat16, -4.0, 4.0);
  const Tensor dy = RandomTensor({33, 70}, 12, kF32, -1.0, 1.0);
  Tensor xc = x0.detach().requires_grad_();
  Tensor xg = x0.To(Gpu()).detach().requires_grad_();
  Dequantize(GeluFp8(xc, kE4M3, ScaleOn(8.0f, kCPU)), kF32).Backward(dy);
  Dequantize(GeluFp8(xg, kE4M3, ScaleOn(8.0f, Gpu())), kF32).Backward(dy.To(Gpu()));
  ASSERT_TRUE(xg.grad().defined());
  EXPECT_EQ(xg.grad().device(), Gpu());
  EXPECT_TRUE(::octet::testing::AllClose(xg.grad().To(kCPU).To(kF32), xc.grad().To(kF32), 1e-2, 1e-2));
}

#endif

}  // namespace
}  // namespace octet
