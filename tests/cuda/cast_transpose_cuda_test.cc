// The CUDA cast-transpose (ops/cuda/cast_transpose.cu) against the CPU
// kernel: both paths (vectorised for R, C multiples of 16 with aligned data;
// generic for ragged shapes, sizes 1 and odd, misaligned data), every input
// dtype, both FP8 formats and saturation modes, with and without the
// row-wise copy: y, yt, amax and scale_inv bit for bit; dbias against the
// CPU's float32 column sums to float32 rounding, and reproducible run to
// run. CastTransposeWithBiasGrad on the device. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/core/float8.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/cast_kernels.h>
#include <octet/ops/cuda/cast_cuda.h>
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(CastTransposeCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::Bytes;

Tensor F32Scalar(float v, Device d) { return Full({1}, v, {.dtype = DType::kFloat32, .device = d}); }

// (R, C) values in [-500, 500] with saturating values, ties and tiny ones
// mixed in; with `specials` also inf and NaN.
Tensor Input(int64_t R, int64_t C, DType dtype, bool specials) {
  std::vector<double> v = ::octet::testing::RandomValues(R * C, 31 + R + 7 * C, -500.0, 500.0);
  const double extra[] = {0.0, -0.0, 448.0, 464.0, -1e6, 1.0 / 512, 57344.0, 61440.0, 0.3125, -2.0e-7};
  for (size_t i = 0; i < std::size(extra) && i * 5 < v.size(); ++i) v[i * 5] = extra[i];
  if (specials && v.size() > 3) {
    v[v.size() - 1] = std::numeric_limits<double>::infinity();
    v[v.size() / 2] = std::numeric_limits<double>::quiet_NaN();
  }
  return FromVector(v, {R, C}).To(dtype);
}

// A contiguous (R, C) device copy of x whose data starts `offset_bytes`
// after an allocation's start (misaligned data takes the generic kernel).
Tensor DeviceCopyAt(const Tensor& x, int64_t offset_elems) {
  const int64_t n = x.numel();
  Tensor big = Empty({n + offset_elems}, {.dtype = x.dtype(), .device = CUDA(0)});
  Tensor view = big.Narrow(0, offset_elems, n).View(x.shape());
  view.CopyFrom_(x.To(CUDA(0)));
  return view;
}

struct Case {
  int64_t R, C;
  int64_t offset;  // elements; non-zero misaligns x
};

void CheckAgainstCpu(const Case& k, DType xdt, DType fp8, Fp8Saturation sat, bool want_y, bool specials) {
  SCOPED_TRACE(::testing::Message() << k.R << "x" << k.C << " offset " << k.offset << " " << Name(xdt) << " -> "
                                    << Name(fp8) << " sat " << static_cast<int>(sat) << " y " << want_y
                                    << " specials " << specials);
  const Device gpu = CUDA(0);
  const Tensor x = Input(k.R, k.C, xdt, specials);
  const float s = 0.61f;
  Tensor y_cpu = Empty({k.R, k.C}, {.dtype = fp8}), yt_cpu = Empty({k.C, k.R}, {.dtype = fp8});
  Tensor si_cpu = Empty({1}), am_cpu = Empty({1}), db_cpu = Empty({k.C});
  quantize_kernel(kCPU)(x, F32Scalar(s, kCPU), sat, y_cpu, yt_cpu, si_cpu, am_cpu, db_cpu);

  const Tensor xg = DeviceCopyAt(x, k.offset);
  Tensor y = want_y ? Empty({k.R, k.C}, {.dtype = fp8, .device = gpu}) : Tensor();
  Tensor yt = Empty({k.C, k.R}, {.dtype = fp8, .device = gpu});
  Tensor si = Empty({1}, {.device = gpu}), am = Full({1}, 77.0, {.device = gpu});
  Tensor db = Full({k.C}, 5.0, {.device = gpu});
  cuda::QuantizeCuda(xg, F32Scalar(s, gpu), sat, y, yt, si, am, db);
  if (want_y) EXPECT_EQ(Bytes(y), Bytes(y_cpu));
  EXPECT_EQ(Bytes(yt), Bytes(yt_cpu));
  EXPECT_EQ(Bytes(si), Bytes(si_cpu));
  const double am_got = am.To(kCPU).ToDoubles()[0], am_want = am_cpu.ToDoubles()[0];
  if (std::isnan(am_want)) {
    EXPECT_TRUE(std::isnan(am_got));
  } else {
    EXPECT_EQ(am_got, am_want);
  }
  const std::vector<double> got = db.To(kCPU).ToDoubles(), want = db_cpu.ToDoubles();
  for (int64_t c = 0; c < k.C; ++c) {
    if (!std::isfinite(want[c])) {
      EXPECT_EQ(std::isnan(got[c]), std::isnan(want[c])) << "column " << c;
      continue;
    }
    // Two float32 orders of R terms of size <= 1e6: each within R ulps of the sum's scale.
    const double tol = std::max<int64_t>(k.R, 1) * 1e6 * std::ldexp(1.0, -23);
    EXPECT_NEAR(got[c], want[c], tol) << "column " << c;
  }
  // Reproducible: the same bits again, and without dbias the FP8 bytes do not change.
  Tensor db2 = Empty({k.C}, {.device = gpu});
  Tensor yt2 = Empty({k.C, k.R}, {.dtype = fp8, .device = gpu});
  cuda::QuantizeCuda(xg, F32Scalar(s, gpu), sat, Tensor(), yt2, si, am, db2);
  EXPECT_EQ(Bytes(db2), Bytes(db));
  Tensor yt3 = Empty({k.C, k.R}, {.dtype = fp8, .device = gpu});
  cuda::QuantizeCuda(xg, F32Scalar(s, gpu), sat, Tensor(), yt3, si, am, Tensor());
  EXPECT_EQ(Bytes(yt3), Bytes(yt_cpu));
}

const Case kAligned[] = {{16, 16, 0}, {128, 128, 0}, {144, 48, 0}, {256, 768, 0}, {48, 4112, 0}, {1024, 2304, 0}};
const Case kRagged[] = {{1, 1, 0},   {1, 17, 0},  {17, 1, 0},  {33, 70, 0}, {130, 258, 0},
                        {16, 24, 0}, {24, 16, 0}, {5, 3, 0},   {0, 7, 0},   {64, 64, 1}};

TEST(CastTransposeCuda, AlignedShapesTakeTheVectorPathAndMatchCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (const Case& k : kAligned)
    for (DType xdt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64})
      for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
        CheckAgainstCpu(k, xdt, fp8, Fp8Saturation::kSatFinite, /*want_y=*/true, /*specials=*/false);
        CheckAgainstCpu(k, xdt, fp8, Fp8Saturation::kSatFinite, /*want_y=*/true, /*specials=*/true);
        CheckAgainstCpu(k, xdt, fp8, Fp8Saturation::kNoSat, /*want_y=*/false, /*specials=*/true);
      }
}

// The hardware conversion of the vectorised kernel (NOTE [hardware fp8
// conversion] in ops/cuda/cast_transpose.cu) against core/float8.h for every
// float32 bit pattern class that matters: all FP8 codes' values and their
// midpoints (ties), just above and below them, subnormals, beyond max, inf, NaN.
TEST(CastTransposeCuda, VectorPathConvertsLikeTheScalarFunctionsEverywhere) {
  OCTET_SKIP_WITHOUT_CUDA();
  std::vector<double> v;
  for (int code = 0; code < 256; ++code)
    for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      const double a = fp8 == DType::kFloat8E4M3 ? E4M3BitsToFloat(static_cast<uint8_t>(code))
                                                 : E5M2BitsToFloat(static_cast<uint8_t>(code));
      const double b = fp8 == DType::kFloat8E4M3 ? E4M3BitsToFloat(static_cast<uint8_t>(code + 1))
                                                 : E5M2BitsToFloat(static_cast<uint8_t>(code + 1));
      v.push_back(a);
      if (std::isfinite(a) && std::isfinite(b)) {
        const double mid = 0.5 * (a + b);
        v.push_back(mid);
        v.push_back(std::nextafter(static_cast<float>(mid), 1e30f));
        v.push_back(std::nextafter(static_cast<float>(mid), -1e30f));
      }
    }
  for (double extra : {1e-30, -1e-30, 1e-45, 3e38, -3e38, 1e6, -1e6, 61440.0, -61440.0, 464.0, -464.0})
    v.push_back(extra);
  v.push_back(std::numeric_limits<double>::infinity());
  v.push_back(-std::numeric_limits<double>::infinity());
  v.push_back(std::numeric_limits<double>::quiet_NaN());
  v.push_back(-std::numeric_limits<double>::quiet_NaN());
  const int64_t C = 64, R = (static_cast<int64_t>(v.size()) + C - 1) / C / 16 * 16 + 16;
  v.resize(R * C, 0.5);
  const Tensor x = FromVector(v, {R, C}, {.dtype = DType::kFloat32});
  for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    const Tensor one = Full({1}, 1.0, {.dtype = DType::kFloat32});
    Tensor y_cpu = Empty({R, C}, {.dtype = fp8}), yt_cpu = Empty({C, R}, {.dtype = fp8});
    Tensor si = Empty({1}), am = Empty({1});
    quantize_kernel(kCPU)(x, one, Fp8Saturation::kSatFinite, y_cpu, yt_cpu, si, am, Tensor());
    const Device gpu = CUDA(0);
    Tensor y = Empty({R, C}, {.dtype = fp8, .device = gpu}), yt = Empty({C, R}, {.dtype = fp8, .device = gpu});
    Tensor sig = Empty({1}, {.device = gpu}), amg = Empty({1}, {.device = gpu});
    cuda::QuantizeCuda(x.To(gpu), one.To(gpu), Fp8Saturation::kSatFinite, y, yt, sig, amg, Tensor());
    const std::vector<uint8_t> got = Bytes(y), want = Bytes(y_cpu);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << Name(fp8) << " input " << v[i];
    EXPECT_EQ(Bytes(yt), Bytes(yt_cpu));
  }
}

TEST(CastTransposeCuda, RaggedShapesAndMisalignedDataMatchCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (const Case& k : kRagged)
    for (DType xdt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64})
      for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
        CheckAgainstCpu(k, xdt, fp8, Fp8Saturation::kSatFinite, /*want_y=*/true, /*specials=*/false);
        CheckAgainstCpu(k, xdt, fp8, Fp8Saturation::kNoSat, /*want_y=*/true, /*specials=*/true);
      }
}

TEST(CastTransposeCuda, WithBiasGradFrontEndMatchesCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (const Case& k : {Case{512, 768, 0}, Case{77, 45, 0}}) {
    const Tensor x = Input(k.R, k.C, DType::kBFloat16, false);
    const Tensor scale = Full({1}, 0.25);
    const CastTransposeBiasGrad cpu = CastTransposeWithBiasGrad(x, DType::kFloat8E5M2, scale);
    const CastTransposeBiasGrad gpu = CastTransposeWithBiasGrad(x.To(CUDA(0)), DType::kFloat8E5M2, scale.To(CUDA(0)));
    EXPECT_EQ(Bytes(gpu.q), Bytes(cpu.q));
    EXPECT_EQ(Bytes(gpu.qt), Bytes(cpu.qt));
    EXPECT_EQ(gpu.q.scale_meta()->amax.To(kCPU).ToDoubles(), cpu.q.scale_meta()->amax.ToDoubles());
    const std::vector<double> g = gpu.dbias.To(kCPU).ToDoubles(), c = cpu.dbias.ToDoubles();
    for (int64_t j = 0; j < k.C; ++j) EXPECT_NEAR(g[j], c[j], k.R * 1e6 * std::ldexp(1.0, -23)) << j;
  }
}

#endif

}  // namespace
}  // namespace octet
