// The cuBLASLt GEMM on a device against float64 references computed here:
// float32/bfloat16 for every transpose combination; the FP8 Linear GEMMs
// (fprop/dgrad/wgrad) with non-trivial scales and the transposed copies of
// the cast-transpose kernel; an FP8 output with its scale and amax; the
// padded path (token count not a multiple of 16) and the BF16 fallback, each
// counted; bias epilogue; the descriptor cache. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/cuda/gemm_cublaslt.h>
#include <octet/ops/matmul.h>
#include <octet/ops/pointwise.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(GemmDevice, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

#define SKIP_WITHOUT_GPU() OCTET_SKIP_WITHOUT_CUDA()

// op(a)·op(b) in float64 from the values as stored on the host.
std::vector<double> Reference(const Tensor& a, bool ta, const Tensor& b, bool tb, double scale = 1.0) {
  const std::vector<double> av = a.To(kCPU).To(DType::kFloat64).ToDoubles();
  const std::vector<double> bv = b.To(kCPU).To(DType::kFloat64).ToDoubles();
  const int64_t M = ta ? a.size(1) : a.size(0), K = ta ? a.size(0) : a.size(1);
  const int64_t N = tb ? b.size(0) : b.size(1);
  std::vector<double> out(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t p = 0; p < K; ++p) {
        const double x = ta ? av[p * a.size(1) + i] : av[i * a.size(1) + p];
        const double y = tb ? bv[j * b.size(1) + p] : bv[p * b.size(1) + j];
        s += x * y;
      }
      out[i * N + j] = s * scale;
    }
  return out;
}

TEST(GemmDevice, Float32AndBf16AllTransposes) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  const int64_t M = 48, N = 40, K = 56;
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a = RandomTensor(ta ? Shape{K, M} : Shape{M, K}, 1, dt);
        Tensor b = RandomTensor(tb ? Shape{N, K} : Shape{K, N}, 2, dt);
        Tensor d = Empty({M, N}, {.dtype = dt, .device = gpu});
        cuda::CublasLtMatmul(a.To(gpu), ta, b.To(gpu), tb, d);
        const double tol = dt == DType::kFloat32 ? 1e-5 : 2e-2;
        EXPECT_TRUE(AllClose(d.To(kCPU), Reference(a, ta, b, tb), tol, tol))
            << Name(dt) << " ta=" << ta << " tb=" << tb;
      }
    }
  }
  // A transposed *view* is read in place (no copy) and gives the same result.
  Tensor a = RandomTensor({K, M}, 3, DType::kFloat32).To(gpu);
  Tensor b = RandomTensor({K, N}, 4, DType::kFloat32).To(gpu);
  Tensor d = Empty({M, N}, {.device = gpu});
  cuda::CublasLtMatmul(a.T(), false, b, false, d);
  EXPECT_TRUE(AllClose(d.To(kCPU), Reference(a, true, b, false), 1e-5, 1e-5));
}

// NOTE [fp8 accumulation bound]: FP8 tensor-core GEMMs on Hopper do not
// accumulate in full FP32: within a block of K the products are summed in an
// accumulator that keeps ~14 significant bits (DeepSeek-V3 measured this on
// H800), and with FAST_ACCUM (fprop) no block is promoted to FP32 at all. The
// error of an output element is therefore bounded by the magnitude of its
// partial sums, sum_k |a_ik||b_kj|, not by the (possibly cancelled) result:
// on an H100 small outputs of a K=100 wgrad were off by 0.5-4 % relative, but
// by 2^-17.6 of that magnitude. The tests allow 2^-12 of it, 25x to 45x above
// the errors seen, while a wrong operand, scale, transpose or pad (errors of
// the order of the terms themselves) is still far outside.
constexpr double kFp8AccumBound = 1.0 / 4096;

// Sum_k |op(a)_ik| |op(b)_kj| in float64: the scale of FP8 accumulation errors.
std::vector<double> AbsReference(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  return Reference(Abs(a.To(kCPU).To(DType::kFloat64)), ta, Abs(b.To(kCPU).To(DType::kFloat64)), tb);
}

// Every |got - ref| <= accum * absref + extra(ref), reporting the worst element.
template <typename Extra>
::testing::AssertionResult WithinFp8Bound(const std::vector<double>& got, const std::vector<double>& ref,
                                          const std::vector<double>& absref, Extra extra) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = kFp8AccumBound * absref[i] + extra(ref[i]);
    if (!(std::fabs(got[i] - ref[i]) <= bound))
      return ::testing::AssertionFailure() << "[" << i << "] got " << got[i] << ", expected " << ref[i] << " +- " << bound
                                           << " (sum |a||b| = " << absref[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

// One E4M3 ulp at |v| (normal range from 2^-6, 3 mantissa bits; subnormal 2^-9).
double E4m3Ulp(double v) {
  v = std::fabs(v);
  return v < 0x1p-6 ? 0x1p-9 : std::ldexp(1.0, static_cast<int>(std::floor(std::log2(v))) - 3);
}

// FP8 copy of x on the GPU with the given scale, plus its column-wise copy.
std::pair<Tensor, Tensor> Fp8Pair(const Tensor& x, DType fp8, float scale) {
  const Device gpu = CUDA(0);
  return CastTranspose(x.To(gpu), fp8, Full({1}, scale, {.device = gpu}));
}

TEST(GemmDevice, Fp8LinearGemmsMatchReference) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  const int64_t T = 64, Kin = 96, Nout = 128;
  Tensor x = RandomTensor({T, Kin}, 10, DType::kFloat32, -3.0, 3.0);
  Tensor w = RandomTensor({Nout, Kin}, 11, DType::kFloat32, -0.5, 0.5);
  Tensor dy = RandomTensor({T, Nout}, 12, DType::kFloat32, -0.01, 0.01);
  auto [xq, xt] = Fp8Pair(x, DType::kFloat8E4M3, 100.0f);
  auto [wq, wt] = Fp8Pair(w, DType::kFloat8E4M3, 500.0f);
  auto [dyq, dyt] = Fp8Pair(dy, DType::kFloat8E5M2, 4096.0f);
  // References on the dequantized operands (what the tensor cores multiply).
  const Tensor xd = Dequantize(xq, DType::kFloat64), wd = Dequantize(wq, DType::kFloat64),
               dyd = Dequantize(dyq, DType::kFloat64);
  auto operand = [](const Tensor& q, const Tensor& t) {
    cuda::GemmOperand op;
    op.data = q.raw_data();
    op.dtype = q.dtype();
    op.scale_inv = q.scale_meta()->scale_inv.data<float>();
    op.transposed = t.raw_data();
    return op;
  };
  ResetGemmCountersForTesting();
  // fprop: Y[T,Nout] = X·Wᵀ, bf16 out.
  Tensor y = Empty({T, Nout}, {.dtype = DType::kBFloat16, .device = gpu});
  cuda::GemmArgs f;
  f.role = GemmRole::kFprop;
  f.m = T, f.n = Nout, f.k = Kin, f.trans_b = true;
  f.a = operand(xq, xt);
  f.b = operand(wq, wt);
  f.d = y.raw_data(), f.d_dtype = DType::kBFloat16;
  cuda::CublasLtGemm(f);
  EXPECT_TRUE(AllClose(y.To(kCPU), Reference(xd, false, wd, true), 1e-2, 1e-2));
  // dgrad: dX[T,Kin] = dY·W (TN through Wᵀ).
  Tensor dx = Empty({T, Kin}, {.dtype = DType::kBFloat16, .device = gpu});
  cuda::GemmArgs g;
  g.role = GemmRole::kDgrad;
  g.m = T, g.n = Kin, g.k = Nout;
  g.a = operand(dyq, dyt);
  g.b = operand(wq, wt);
  g.d = dx.raw_data(), g.d_dtype = DType::kBFloat16;
  cuda::CublasLtGemm(g);
  EXPECT_TRUE(AllClose(dx.To(kCPU), Reference(dyd, false, wd, false), 1e-2, 1e-4));
  // wgrad: dW[Nout,Kin] = dYᵀ·X, f32 out, accumulating onto an existing dW (beta = 1).
  Tensor dw = Full({Nout, Kin}, 1.0, {.device = gpu});
  cuda::GemmArgs wg;
  wg.role = GemmRole::kWgrad;
  wg.m = Nout, wg.n = Kin, wg.k = T, wg.trans_a = true;
  wg.a = operand(dyq, dyt);
  wg.b = operand(xq, xt);
  wg.d = dw.raw_data(), wg.d_dtype = DType::kFloat32, wg.beta = 1.0f;
  cuda::CublasLtGemm(wg);
  std::vector<double> ref = Reference(dyd, true, xd, false);
  for (double& v : ref) v += 1.0;
  EXPECT_TRUE(AllClose(dw.To(kCPU), ref, 1e-3, 1e-4));
  EXPECT_EQ(GemmFallbackCount(), 0);
  EXPECT_EQ(GemmPaddedCount(), 0);
  EXPECT_EQ(GemmTransposeCopyCount(), 0);
  // Without the transposed copies the GEMM builds them (counted).
  g.b.transposed = nullptr;
  cuda::CublasLtGemm(g);
  EXPECT_TRUE(AllClose(dx.To(kCPU), Reference(dyd, false, wd, false), 1e-2, 1e-4));
  EXPECT_EQ(GemmTransposeCopyCount(), 1);
}

TEST(GemmDevice, Fp8OutputWritesScaledValuesAndAmax) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  Tensor x = RandomTensor({32, 64}, 20, DType::kFloat32, -2.0, 2.0);
  Tensor w = RandomTensor({48, 64}, 21, DType::kFloat32, -2.0, 2.0);
  auto [xq, xt] = Fp8Pair(x, DType::kFloat8E4M3, 64.0f);
  auto [wq, wt] = Fp8Pair(w, DType::kFloat8E4M3, 64.0f);
  const std::vector<double> ref =
      Reference(Dequantize(xq, DType::kFloat64), false, Dequantize(wq, DType::kFloat64), true);
  double ref_amax = 0;
  for (double v : ref) ref_amax = std::max(ref_amax, std::fabs(v));
  const float out_scale = static_cast<float>(448.0 / ref_amax / 2);
  Tensor y = Empty({32, 48}, {.dtype = DType::kFloat8E4M3, .device = gpu})
                 .WithScaleMeta(MakePerTensorScale(out_scale, 0.0f, gpu));
  cuda::CublasLtMatmul(xq, false, wq, true, y, GemmRole::kFprop);
  // AMAX_D is the amax before the D scale (CUDA_NOTES §6: verify on the H100).
  EXPECT_NEAR(y.scale_meta()->amax.To(kCPU).ToDoubles()[0], ref_amax, ref_amax * 1e-2);
  // Each output is the E4M3 rounding of the (FAST_ACCUM) accumulated value:
  // within one E4M3 ulp of the exact result (a rounding that a small
  // accumulation error tipped over a midpoint) plus the accumulation bound.
  // On an H100 one element of 1536 sat 1.5 of the old tolerance's units out.
  const std::vector<double> got = Dequantize(y, DType::kFloat64).ToDoubles();
  const std::vector<double> absref = AbsReference(Dequantize(xq, DType::kFloat64), false,
                                                  Dequantize(wq, DType::kFloat64), true);
  EXPECT_TRUE(WithinFp8Bound(got, ref, absref, [&](double r) { return E4m3Ulp(r * out_scale) / out_scale; }));
}

TEST(GemmDevice, PaddedAndFallbackPathsAreCorrectAndCounted) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  const int64_t T = 100, Kin = 32, Nout = 48;  // T % 16 != 0: wgrad's K
  Tensor x = RandomTensor({T, Kin}, 30, DType::kFloat32);
  Tensor dy = RandomTensor({T, Nout}, 31, DType::kFloat32);
  auto [xq, xt] = Fp8Pair(x, DType::kFloat8E4M3, 100.0f);
  auto [dyq, dyt] = Fp8Pair(dy, DType::kFloat8E5M2, 1000.0f);
  const std::vector<double> ref =
      Reference(Dequantize(dyq, DType::kFloat64), true, Dequantize(xq, DType::kFloat64), false);
  ResetGemmCountersForTesting();
  Tensor dw = Empty({Nout, Kin}, {.device = gpu});
  cuda::CublasLtMatmul(dyq, true, xq, false, dw, GemmRole::kWgrad);
  const std::vector<double> absref =
      AbsReference(Dequantize(dyq, DType::kFloat64), true, Dequantize(xq, DType::kFloat64), false);
  auto f32_rounding = [](double r) { return 1e-7 * std::fabs(r) + 1e-30; };
  EXPECT_TRUE(WithinFp8Bound(dw.To(kCPU).ToDoubles(), ref, absref, f32_rounding));
  EXPECT_EQ(GemmPaddedCount(), 1);
  // No padding allowed: the counted BF16 fallback gives the same numbers.
  cuda::GemmArgs g;
  g.role = GemmRole::kWgrad;
  g.m = Nout, g.n = Kin, g.k = T, g.trans_a = true;
  g.a = {dyq.raw_data(), 0, dyq.dtype(), dyq.scale_meta()->scale_inv.data<float>()};
  g.b = {xq.raw_data(), 0, xq.dtype(), xq.scale_meta()->scale_inv.data<float>()};
  g.d = dw.raw_data();
  g.allow_padding = false;
  cuda::CublasLtGemm(g);
  EXPECT_TRUE(WithinFp8Bound(dw.To(kCPU).ToDoubles(), ref, absref, f32_rounding));
  EXPECT_EQ(GemmFallbackCount(), 1);
  // E5M2 x E5M2 is an error, not a fallback.
  auto [dy2, dy2t] = Fp8Pair(dy, DType::kFloat8E5M2, 1.0f);
  const std::string msg = ErrorOf([&] {
    cuda::CublasLtMatmul(dyq, true, dy2, false, Empty({Nout, Nout}, {.device = gpu}));
  });
  EXPECT_NE(msg.find("fp8_e5m2 x fp8_e5m2 is not supported"), std::string::npos) << msg;
}

TEST(GemmDevice, BiasEpilogueAndDescriptorCache) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  const int64_t M = 64, N = 32, K = 48;
  Tensor a = RandomTensor({M, K}, 40, DType::kBFloat16).To(gpu);
  Tensor b = RandomTensor({N, K}, 41, DType::kBFloat16).To(gpu);
  Tensor bias = RandomTensor({N}, 42, DType::kBFloat16);
  Tensor d = Empty({M, N}, {.dtype = DType::kBFloat16, .device = gpu});
  cuda::GemmArgs g;
  g.m = M, g.n = N, g.k = K, g.trans_b = true;
  g.a = {a.raw_data(), 0, DType::kBFloat16};
  g.b = {b.raw_data(), 0, DType::kBFloat16};
  g.d = d.raw_data(), g.d_dtype = DType::kBFloat16;
  g.epilogue = GemmEpilogue::kBias;
  Tensor bias_g = bias.To(gpu);
  g.bias = bias_g.raw_data(), g.bias_dtype = DType::kBFloat16;
  cuda::CublasLtGemm(g);
  std::vector<double> ref = Reference(a, false, b, true);
  const std::vector<double> bv = bias.ToDoubles();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) ref[i * N + j] += bv[j];
  EXPECT_TRUE(AllClose(d.To(kCPU), ref, 2e-2, 2e-2));
  const size_t cached = cuda::GemmDescriptorCacheSize();
  cuda::CublasLtGemm(g);
  EXPECT_EQ(cuda::GemmDescriptorCacheSize(), cached);
}

// The matmul family's CUDA kernels against its CPU kernels (ops/matmul.h).
TEST(GemmDevice, MatmulTablesMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  // Batched with broadcast, a transposed view and a bias through Linear.
  Tensor a = RandomTensor({3, 1, 16, 24}, 50, DType::kFloat32);
  Tensor b_store = RandomTensor({1, 2, 32, 24}, 51, DType::kFloat32);
  Tensor cpu = Matmul(a, b_store.Transpose(2, 3));
  Tensor gpu_out = Matmul(a.To(gpu), b_store.To(gpu).Transpose(2, 3));  // (1,2,24,32) transposed view
  EXPECT_TRUE(AllClose(gpu_out.To(kCPU), cpu, 1e-5, 1e-5));
  Tensor x = RandomTensor({40, 24}, 52, DType::kBFloat16);
  Tensor w = RandomTensor({32, 24}, 53, DType::kBFloat16);
  Tensor bias = RandomTensor({32}, 54, DType::kBFloat16);
  EXPECT_TRUE(AllClose(Linear(x.To(gpu), w.To(gpu), bias.To(gpu)).To(kCPU).To(DType::kFloat32),
                       Linear(x, w, bias).To(DType::kFloat32), 2e-2, 2e-2));
  // K = 0 gives the bias.
  Tensor e = Linear(Empty({4, 0}, {.device = gpu}), Empty({3, 0}, {.device = gpu}), Full({3}, 2.0, {.device = gpu}));
  EXPECT_TRUE(AllClose(e.To(kCPU), std::vector<double>(12, 2.0), 0, 0));
  // FP8 with a float32 bias into bfloat16 and float32.
  Tensor xq = Quantize(RandomTensor({48, 64}, 55, DType::kFloat32).To(gpu), DType::kFloat8E4M3, 50.0f);
  Tensor wq = Quantize(RandomTensor({32, 64}, 56, DType::kFloat32).To(gpu), DType::kFloat8E4M3, 80.0f);
  Tensor fb = RandomTensor({32}, 57, DType::kFloat32);
  for (DType out : {DType::kFloat32, DType::kBFloat16}) {
    Tensor ref = ScaledMatmul(xq.To(kCPU), wq.To(kCPU).T(), out, fb);
    Tensor got = ScaledMatmul(xq, wq.T(), out, fb.To(gpu));
    EXPECT_TRUE(AllClose(got.To(kCPU).To(DType::kFloat32), ref.To(DType::kFloat32), 1e-2, 1e-3)) << Name(out);
  }
}

// NOTE [gelu epilogue]: GELU_AUX_BIAS (N % 8 == 0, bias in out's dtype), the
// GEMM + GELU kernel path (N = 30, no bias), the FP8 GEMM with a bf16 bias
// (epilogue) and with a float32 bias (kernel), each against the CPU, both
// the output and the pre-activation; gradients of LinearGelu too.
TEST(GemmDevice, GeluEpilogueAndFallbackMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const Device gpu = CUDA(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t n : {32, 30}) {
      const Tensor x = RandomTensor({40, 24}, 60, dtype), w = RandomTensor({n, 24}, 61, dtype);
      const Tensor b = RandomTensor({n}, 62, dtype);
      for (bool with_bias : {true, false}) {
        const Tensor bias = with_bias ? b : Tensor();
        Tensor xc = x.detach().requires_grad_(), xg = x.To(gpu).detach().requires_grad_();
        const Tensor yc = LinearGelu(xc, w, bias);
        const Tensor yg = LinearGelu(xg, w.To(gpu), with_bias ? b.To(gpu) : Tensor());
        const double tol = dtype == DType::kFloat32 ? 1e-5 : 2e-2;
        EXPECT_TRUE(AllClose(yg.To(kCPU).To(DType::kFloat32), yc.To(DType::kFloat32), tol, tol))
            << Name(dtype) << " n=" << n << " bias=" << with_bias;
        const Tensor dy = RandomTensor({40, n}, 63, dtype);
        yc.Backward(dy);
        yg.Backward(dy.To(gpu));
        EXPECT_TRUE(AllClose(xg.grad().To(kCPU).To(DType::kFloat32), xc.grad().To(DType::kFloat32), tol, tol))
            << Name(dtype) << " n=" << n << " bias=" << with_bias;
      }
    }
  }
  const Tensor xq = Quantize(RandomTensor({48, 64}, 64, DType::kFloat32).To(gpu), DType::kFloat8E4M3, 50.0f);
  const Tensor wq = Quantize(RandomTensor({32, 64}, 65, DType::kFloat32).To(gpu), DType::kFloat8E4M3, 80.0f);
  for (DType bias_dtype : {DType::kBFloat16, DType::kFloat32}) {
    const Tensor fb = RandomTensor({32}, 66, bias_dtype);
    Tensor pre_c, pre_g;
    const Tensor ref = ScaledMatmul(xq.To(kCPU), wq.To(kCPU).T(), DType::kBFloat16, fb, GemmRole::kFprop, &pre_c);
    const Tensor got = ScaledMatmul(xq, wq.T(), DType::kBFloat16, fb.To(gpu), GemmRole::kFprop, &pre_g);
    EXPECT_TRUE(AllClose(pre_g.To(kCPU).To(DType::kFloat32), pre_c.To(DType::kFloat32), 2e-2, 1e-2));
    EXPECT_TRUE(AllClose(got.To(kCPU).To(DType::kFloat32), ref.To(DType::kFloat32), 2e-2, 1e-2));
  }
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
