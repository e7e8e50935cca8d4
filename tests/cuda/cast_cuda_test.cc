// CUDA cast kernels (ops/cuda/cast.cu) against the CPU kernels, bit for bit:
// quantize (+ amax, scale_inv) for every input dtype, both FP8 formats and
// both saturation modes; the fused cast-transpose's row-wise and column-wise
// copies; dequantize; amax; the all-slots delayed-scaling update against
// core/delayed_scaling.h on the host; the GEMM repacking kernel. Every test
// needs a device and skips without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <octet/core/delayed_scaling.h>
#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/cast.h>
#include <octet/ops/cast_kernels.h>
#include <octet/ops/cuda/cast_cuda.h>
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(CastCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::RandomTensor;

#define SKIP_WITHOUT_GPU() OCTET_SKIP_WITHOUT_CUDA()

using ::octet::testing::Bytes;

// Bit-exact equality of two float tensors, except that a NaN only has to be
// a NaN: its payload is not part of octet's contract. A GPU's multiply
// returns the canonical NaN 0x7FFFFFFF (PTX), x86 keeps the input NaN's sign
// and payload; on an H100 that made the dequantized FP8 NaN codes (E4M3 0x7F,
// 0xFF; E5M2 0x7D-0x7F, 0xFD-0xFF) differ in their bytes.
::testing::AssertionResult SameBitsOrBothNan(const Tensor& got, const Tensor& want) {
  const std::vector<uint8_t> g = Bytes(got), w = Bytes(want);
  const std::vector<double> gv = got.To(kCPU).ToDoubles(), wv = want.To(kCPU).ToDoubles();
  if (g.size() != w.size() || gv.size() != wv.size()) return ::testing::AssertionFailure() << "sizes differ";
  const size_t sz = g.size() / std::max<size_t>(gv.size(), 1);
  for (size_t i = 0; i < gv.size(); ++i) {
    if (std::isnan(wv[i])) {
      if (!std::isnan(gv[i])) return ::testing::AssertionFailure() << "[" << i << "] " << gv[i] << " is not NaN";
    } else if (std::memcmp(&g[i * sz], &w[i * sz], sz) != 0) {
      return ::testing::AssertionFailure() << "[" << i << "] got " << gv[i] << ", expected " << wv[i];
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor F32Scalar(float v, Device d) { return Full({1}, v, {.dtype = DType::kFloat32, .device = d}); }

// Inputs with ties, saturation, subnormals, NaN and inf mixed in.
Tensor SpecialInput(int64_t n, DType dtype) {
  std::vector<double> v = ::octet::testing::RandomValues(n, 7, -600.0, 600.0);
  const double specials[] = {0.0,
                             -0.0,
                             448.0,
                             464.0,
                             1e6,
                             -1e6,
                             1.0 / 512,
                             1.0 / 1024,
                             57344.0,
                             61440.0,
                             std::numeric_limits<double>::infinity()};
  for (size_t i = 0; i < std::size(specials) && static_cast<int64_t>(i * 3) < n; ++i) v[i * 3] = specials[i];
  return FromVector(v, {n}).To(dtype);
}

TEST(CastCuda, QuantizeMatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  for (DType xdt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat}) {
        for (int64_t n : {0, 1, 17, 4096 + 13}) {
          SCOPED_TRACE(::testing::Message()
                       << Name(xdt) << " -> " << Name(fp8) << " n=" << n << " sat=" << static_cast<int>(sat));
          Tensor x = SpecialInput(std::max<int64_t>(n, 1), xdt).Narrow(0, 0, n).Contiguous();
          const float s = 0.37f;
          Tensor y_cpu = Empty({n}, {.dtype = fp8}), si_cpu = Empty({1}), am_cpu = Empty({1});
          quantize_kernel(kCPU)(x, F32Scalar(s, kCPU), sat, y_cpu, Tensor(), si_cpu, am_cpu, Tensor());
          Tensor xg = x.To(gpu);
          Tensor y = Empty({n}, {.dtype = fp8, .device = gpu});
          Tensor si = Empty({1}, {.device = gpu}), am = Full({1}, 123.0, {.device = gpu});
          cuda::QuantizeCuda(xg, F32Scalar(s, gpu), sat, y, Tensor(), si, am, Tensor());
          EXPECT_EQ(Bytes(y), Bytes(y_cpu));
          EXPECT_EQ(Bytes(si), Bytes(si_cpu));
          EXPECT_EQ(Bytes(am), Bytes(am_cpu));
        }
      }
    }
  }
}

TEST(CastCuda, CastTransposeGivesRowAndColumnCopies) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  for (auto [R, C] : {std::pair<int64_t, int64_t>{64, 96}, {33, 70}, {1, 5}, {128, 1}}) {
    for (DType xdt : {DType::kBFloat16, DType::kFloat32}) {
      SCOPED_TRACE(::testing::Message() << R << "x" << C << " " << Name(xdt));
      Tensor x = RandomTensor({R, C}, 11, xdt, -300.0, 300.0);
      Tensor y_cpu = Empty({R, C}, {.dtype = DType::kFloat8E4M3});
      Tensor yt_cpu = Empty({C, R}, {.dtype = DType::kFloat8E4M3});
      Tensor si_cpu = Empty({1}), am_cpu = Empty({1});
      quantize_kernel(kCPU)(x, F32Scalar(1.5f, kCPU), Fp8Saturation::kSatFinite, y_cpu, yt_cpu, si_cpu, am_cpu, Tensor());
      Tensor y = Empty({R, C}, {.dtype = DType::kFloat8E4M3, .device = gpu});
      Tensor yt = Empty({C, R}, {.dtype = DType::kFloat8E4M3, .device = gpu});
      Tensor si = Empty({1}, {.device = gpu}), am = Empty({1}, {.device = gpu});
      cuda::QuantizeCuda(x.To(gpu), F32Scalar(1.5f, gpu), Fp8Saturation::kSatFinite, y, yt, si, am, Tensor());
      EXPECT_EQ(Bytes(y), Bytes(y_cpu));
      EXPECT_EQ(Bytes(yt), Bytes(yt_cpu));
      EXPECT_EQ(Bytes(am), Bytes(am_cpu));
      // Column-wise only.
      Tensor yt2 = Empty({C, R}, {.dtype = DType::kFloat8E4M3, .device = gpu});
      cuda::QuantizeCuda(x.To(gpu), F32Scalar(1.5f, gpu), Fp8Saturation::kSatFinite, Tensor(), yt2, si, am, Tensor());
      EXPECT_EQ(Bytes(yt2), Bytes(yt_cpu));
    }
  }
}

TEST(CastCuda, DequantizeAndAmaxMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  std::vector<int32_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = i;
  Tensor bytes = FromVector(codes, {256}).To(DType::kUInt8);
  for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    Tensor x = Empty({256}, {.dtype = fp8});
    std::memcpy(x.raw_data(), bytes.raw_data(), 256);
    for (DType out : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
      Tensor y_cpu = Empty({256}, {.dtype = out});
      dequantize_kernel(kCPU)(x, F32Scalar(0.25f, kCPU), y_cpu);
      Tensor y = Empty({256}, {.dtype = out, .device = gpu});
      cuda::DequantizeCuda(x.To(gpu), F32Scalar(0.25f, gpu), y);
      EXPECT_TRUE(SameBitsOrBothNan(y, y_cpu)) << Name(fp8) << " -> " << Name(out);
    }
  }
  for (DType xdt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    Tensor x = SpecialInput(1000, xdt);
    Tensor am_cpu = Empty({1});
    amax_kernel(kCPU)(x, am_cpu);
    Tensor am = Empty({1}, {.device = gpu});
    cuda::AmaxCuda(x.To(gpu), am);
    EXPECT_EQ(Bytes(am), Bytes(am_cpu)) << Name(xdt);
  }
}

TEST(CastCuda, DelayedScalingUpdateMatchesHostFunction) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  constexpr int kSlots = 300;  // more than one launch
  const float inf = std::numeric_limits<float>::infinity();
  for (AmaxAlgo algo : {AmaxAlgo::kMax, AmaxAlgo::kMostRecent}) {
    const DelayedScalingConfig cfg{.margin = 1, .algo = algo, .power_of_two = false};
    std::vector<Tensor> hist, amax, scale, scale_inv;
    std::vector<std::vector<float> > h_hist;
    std::vector<float> h_amax, h_scale, h_scale_inv;
    std::vector<cuda::DelayedScalingSlotRef> refs;
    for (int i = 0; i < kSlots; ++i) {
      const int len = 1 + i % 16;
      std::vector<double> hv = ::octet::testing::RandomValues(len, 100 + i, 0.0, 10.0);
      std::vector<float> hf(hv.begin(), hv.end());
      const float a = i % 7 == 0 ? 0.0f : i % 11 == 0 ? inf : static_cast<float>(i) * 0.1f;
      h_hist.push_back(hf);
      h_amax.push_back(a);
      h_scale.push_back(2.0f);
      h_scale_inv.push_back(0.5f);
      hist.push_back(FromVector(hf, {len}).To(gpu));
      amax.push_back(Full({1}, a, {.device = gpu}));
      scale.push_back(Full({1}, 2.0, {.device = gpu}));
      scale_inv.push_back(Full({1}, 0.5, {.device = gpu}));
      refs.push_back({hist.back().data<float>(), amax.back().data<float>(), scale.back().data<float>(),
                      scale_inv.back().data<float>(), len, i % 2 ? 448.0f : 57344.0f});
    }
    cuda::DelayedScalingUpdateCuda(0, refs, cfg);
    for (int i = 0; i < kSlots; ++i) {
      UpdateDelayedScalingSlot(h_hist[i].data(), static_cast<int>(h_hist[i].size()), h_amax[i],
                               i % 2 ? 448.0f : 57344.0f, cfg, &h_scale[i], &h_scale_inv[i]);
      EXPECT_EQ(hist[i].To(kCPU).ToFloats(), h_hist[i]) << "slot " << i;
      EXPECT_EQ(scale[i].To(kCPU).ToFloats()[0], h_scale[i]) << "slot " << i;
      EXPECT_EQ(scale_inv[i].To(kCPU).ToFloats()[0], h_scale_inv[i]) << "slot " << i;
    }
  }
}

// The one-launch update of a model's contiguous FP8 state against the host
// loop over the same core/delayed_scaling.h function: the same bits, with
// per-slot algorithms, unrecorded (-1), zero, NaN and inf amaxes.
TEST(CastCuda, DelayedScalingBuffersUpdateMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  constexpr int kSlots = 700, kLen = 5;  // more slots than one block
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<double> hv = ::octet::testing::RandomValues(kSlots * kLen, 9, 0.0, 10.0);
  std::vector<float> hist(hv.begin(), hv.end()), amax(kSlots), scale(kSlots), fp8_max(kSlots);
  Tensor algo = Empty({kSlots}, {.dtype = DType::kUInt8});
  for (int i = 0; i < kSlots; ++i) {
    amax[i] = i % 7 == 0 ? 0.0f : i % 11 == 0 ? inf : i % 13 == 0 ? NAN : i % 5 == 0 ? kNoAmaxRecorded : 0.1f * i;
    scale[i] = 1.0f + static_cast<float>(i % 3);
    fp8_max[i] = i % 2 ? 448.0f : 57344.0f;
    algo.data<uint8_t>()[i] = static_cast<uint8_t>(i % 3 == 0);
  }
  const DelayedScalingConfig cfg{.margin = 1, .power_of_two = false};
  Tensor ch = FromVector(hist, {kSlots, kLen}), ca = FromVector(amax, {kSlots}), cs = FromVector(scale, {kSlots});
  Tensor ci = Zeros({kSlots}), cm = FromVector(fp8_max, {kSlots});
  Tensor gh = ch.To(gpu), ga = ca.To(gpu), gs = cs.To(gpu), gi = ci.To(gpu), gm = cm.To(gpu), gal = algo.To(gpu);
  UpdateDelayedScalingBuffers(ch, ca, cs, ci, cm, algo, cfg);
  UpdateDelayedScalingBuffers(gh, ga, gs, gi, gm, gal, cfg);
  EXPECT_EQ(gh.To(kCPU).ToDoubles(), ch.ToDoubles());
  EXPECT_EQ(gs.To(kCPU).ToDoubles(), cs.ToDoubles());
  EXPECT_EQ(gi.To(kCPU).ToDoubles(), ci.ToDoubles());
  EXPECT_EQ(ga.To(kCPU).ToDoubles(), std::vector<double>(kSlots, kNoAmaxRecorded));
}

TEST(CastCuda, PackMatrixTransposesPadsAndConverts) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  Tensor x = RandomTensor({37, 50}, 5, DType::kFloat32, -8.0, 8.0);
  Tensor q = Quantize(x.To(gpu), DType::kFloat8E4M3, 1.0f);
  // Transposed + padded FP8 copy: dst[r][c] = q[c][r].
  Tensor dst = Empty({64, 48}, {.dtype = DType::kFloat8E4M3, .device = gpu});
  cuda::PackMatrixCuda(cuda::CurrentStream(0), q.raw_data(), q.dtype(), 50, 37, 1, 50, dst.raw_data(), dst.dtype(), 64,
                       48);
  const std::vector<uint8_t> src = Bytes(q), out = Bytes(dst);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 48; ++c) {
      const uint8_t expected = (r < 50 && c < 37) ? src[c * 50 + r] : 0;
      ASSERT_EQ(out[r * 48 + c], expected) << r << "," << c;
    }
  // FP8 -> bf16, exact.
  Tensor bf = Empty({37, 50}, {.dtype = DType::kBFloat16, .device = gpu});
  cuda::PackMatrixCuda(cuda::CurrentStream(0), q.raw_data(), q.dtype(), 37, 50, 50, 1, bf.raw_data(), DType::kBFloat16,
                       37, 50);
  EXPECT_EQ(bf.To(kCPU).ToDoubles(), q.To(kCPU).To(DType::kFloat32).ToDoubles());
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
