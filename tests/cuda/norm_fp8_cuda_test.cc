// The CUDA LayerNormFp8 kernel (ops/cuda/norm.cu) and FP8 byte transpose
// (ops/cuda/cast_transpose.cu) against the CPU kernels:
//  - rows whose statistics are exact in float32 (every summation order gives
//    the same mean and rstd): FP8 bytes, amax and scale_inv bit for bit, for
//    both formats, the hardware-pair path (even C, kSatFinite) and the scalar
//    path (kNoSat), float32 / bfloat16 / float64 inputs;
//  - random rows: bytes equal except where the float32 rounding of the row
//    statistics (summed in another order) moves a value across an FP8
//    rounding boundary (then by one code), amax to float32 rounding;
//  - backward (LayerNorm's kernels) to the LayerNorm parity tolerance;
//  - TransposeFp8 / WithColumnwiseForGemm bit for bit, vectorised and generic shapes.
// Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul.h>
#include <octet/ops/norm.h>
#include "tests/cuda/parity_util.h"
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(LayerNormFp8Cuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::Gpu;
using ::octet::testing::RandomTensor;

constexpr DType kE4M3 = DType::kFloat8E4M3;
constexpr DType kE5M2 = DType::kFloat8E5M2;

using ::octet::testing::Bytes;
float Scalar(const Tensor& t) { return static_cast<float>(t.To(kCPU).ToDoubles().at(0)); }
uint8_t Encode(float v, DType fp8, Fp8Saturation sat) {
  return fp8 == kE4M3 ? FloatToE4M3Bits(v, sat) : FloatToE5M2Bits(v, sat);
}

// Rows of an offset plus a shuffle of {-3, -1, 1, 3}: mean and variance (5)
// are exact in any summation order; eps = 11 gives rstd = 1/4 exactly.
Tensor ExactRows(int64_t n, int64_t c, DType dtype) {
  std::mt19937_64 rng(23);
  std::vector<double> x(n * c);
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> d(c);
    for (int64_t i = 0; i < c; ++i) d[i] = static_cast<double>(2 * (i % 4) - 3);
    std::shuffle(d.begin(), d.end(), rng);
    for (int64_t i = 0; i < c; ++i) x[r * c + i] = 0.5 * static_cast<double>(r % 13) - 3.0 + d[i];
  }
  return FromVector(x, {n, c}).To(dtype);
}

TEST(LayerNormFp8Cuda, ExactRowsGiveTheCpuBytesAmaxAndScaleInv) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType xdt : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    for (int64_t c : {64, 1024, 4100}) {  // 4100: more elements than threads, even
      const Tensor x = ExactRows(70, c, xdt);
      const Tensor w = RandomTensor({c}, 2, DType::kBFloat16, 0.5, 2.0).To(xdt);
      const Tensor b = RandomTensor({c}, 3, DType::kBFloat16, -1.0, 1.0).To(xdt);
      for (DType fp8 : {kE4M3, kE5M2}) {
        for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
          const float scale = 150.0f;  // saturates E4M3
          const Tensor s = Full({1}, scale, {.dtype = DType::kFloat32});
          const Tensor qc = LayerNormFp8(x, w, b, fp8, s, 11.0, sat);
          const Tensor qg = LayerNormFp8(x.To(Gpu()), w.To(Gpu()), b.To(Gpu()), fp8, s.To(Gpu()), 11.0, sat);
          ASSERT_EQ(qg.device(), Gpu());
          EXPECT_EQ(Bytes(qg), Bytes(qc)) << Name(xdt) << " C " << c << " " << Name(fp8) << " sat " << int(sat);
          EXPECT_EQ(Scalar(qg.scale_meta()->amax), Scalar(qc.scale_meta()->amax));
          EXPECT_EQ(Scalar(qg.scale_meta()->scale_inv), Scalar(qc.scale_meta()->scale_inv));
          EXPECT_EQ(Scalar(qg.scale_meta()->scale), scale);
        }
      }
    }
  }
}

TEST(LayerNormFp8Cuda, RandomRowsMatchTheCpuUpToTheRowStatistics) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType xdt : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t c : {96, 769}) {  // 769: odd, the scalar path
      const int64_t n = 50;
      const Tensor x = RandomTensor({n, c}, 5, xdt, -2.0, 4.0);
      const Tensor w = RandomTensor({c}, 6, xdt, 0.5, 1.5), b = RandomTensor({c}, 7, xdt, -0.5, 0.5);
      const Tensor s = Full({1}, 40.0, {.dtype = DType::kFloat32});
      const Tensor qc = LayerNormFp8(x, w, b, kE4M3, s);
      const Tensor qg = LayerNormFp8(x.To(Gpu()), w.To(Gpu()), b.To(Gpu()), kE4M3, s.To(Gpu()));
      // The CPU's float32 values, to see which bytes sit at a rounding boundary.
      const std::vector<double> y = LayerNorm(x.To(DType::kFloat32), w.To(DType::kFloat32), b.To(DType::kFloat32))
                                        .ToDoubles();
      const std::vector<uint8_t> bc = Bytes(qc), bg = Bytes(qg);
      int differ = 0;
      for (size_t i = 0; i < bc.size(); ++i) {
        if (bc[i] == bg[i]) continue;
        ++differ;
        const float v = static_cast<float>(y[i]) * 40.0f;
        EXPECT_TRUE(bg[i] == Encode(v * (1 - 1e-5f), kE4M3, Fp8Saturation::kSatFinite) ||
                    bg[i] == Encode(v * (1 + 1e-5f), kE4M3, Fp8Saturation::kSatFinite))
            << i;
      }
      EXPECT_LE(differ, n * c / 1000) << Name(xdt) << " C " << c;
      const float ac = Scalar(qc.scale_meta()->amax), ag = Scalar(qg.scale_meta()->amax);
      EXPECT_NEAR(ag, ac, 1e-5 * ac);
    }
  }
}

TEST(LayerNormFp8Cuda, BackwardMatchesTheCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  const int64_t n = 40, c = 256;
  const DType d = DType::kBFloat16;
  const Tensor x0 = RandomTensor({n, c}, 8, d, -2, 3), w0 = RandomTensor({c}, 9, d, 0.5, 1.5);
  const Tensor b0 = RandomTensor({c}, 10, d), dy = RandomTensor({n, c}, 11, d);
  Tensor xc = x0.Clone().requires_grad_(), wc = w0.Clone().requires_grad_(), bc = b0.Clone().requires_grad_();
  Tensor xg = x0.To(Gpu()).requires_grad_(), wg = w0.To(Gpu()).requires_grad_(), bg = b0.To(Gpu()).requires_grad_();
  const Tensor s = Full({1}, 16.0, {.dtype = DType::kFloat32});
  Dequantize(LayerNormFp8(xc, wc, bc, kE4M3, s), d).Backward(dy);
  Dequantize(LayerNormFp8(xg, wg, bg, kE4M3, s.To(Gpu())), d).Backward(dy.To(Gpu()));
  const ::octet::testing::Tol tol{2e-2, 2e-2};  // bfloat16 gradients, sums in another order
  EXPECT_TRUE(::octet::testing::Matches(xg.grad(), xc.grad(), tol));
  EXPECT_TRUE(::octet::testing::Matches(wg.grad(), wc.grad(), tol));
  EXPECT_TRUE(::octet::testing::Matches(bg.grad(), bc.grad(), tol));
}

TEST(TransposeFp8Cuda, BytesEqualTheCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  // Vectorised (multiples of 16) and generic shapes.
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{16, 16}, {128, 256}, {48, 400}, {1, 1}, {37, 50}, {130, 64}};
  for (const auto& [R, C] : sizes) {
    const Tensor q = Quantize(RandomTensor({R, C}, 12 + R, DType::kFloat32, -300, 300), kE5M2, 1.0f);
    const Tensor tc = TransposeFp8(q), tg = TransposeFp8(q.To(Gpu()));
    EXPECT_EQ(tg.shape(), (Shape{C, R}));
    EXPECT_EQ(Bytes(tg), Bytes(tc)) << R << "x" << C;
  }
  // WithColumnwiseForGemm on a device that wants the copies carries them.
  const Tensor q = LayerNormFp8(RandomTensor({64, 96}, 13, DType::kBFloat16).To(Gpu()), Tensor(), Tensor(), kE4M3,
                                Full({1}, 8.0, {.dtype = DType::kFloat32, .device = Gpu()}));
  const Tensor with = WithColumnwiseForGemm(q);
  if (Fp8GemmWantsTransposedCopies(Gpu())) {
    ASSERT_TRUE(with.scale_meta()->columnwise.defined());
    EXPECT_EQ(Bytes(with.scale_meta()->columnwise), Bytes(TransposeFp8(q.To(kCPU))));
  }
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
