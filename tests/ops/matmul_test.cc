// Matmul, Linear and ScaledMatmul against float64 references (matmul_reference.h),
// over a grid of shapes (odd sizes, batched, broadcast batch, 1-D operands)
// and layouts (transposed, sliced, expanded, strided views), gradcheck in f64,
// and error messages.
//
// Tolerances, per output element, with S = sum_k |a_mk| |b_kn| (the inputs'
// own values, so input rounding is not counted):
//   f64:  1e-12 * S
//   f32:  (K + 2) * 2^-24 * S               (f32 accumulation)
//   bf16: (K + 2) * 2^-24 * S + 2^-8 |ref|  (f32 accumulation, one bf16 rounding)
//   f16:  (K + 2) * 2^-24 * S + 2^-11 |ref| (f32 accumulation, one f16 rounding)
//   FP8:  (K + 2) * 2^-24 * S + 2^-24 |bias| (+ 2^-8 |ref| for a bf16 output),
//         S over the dequantized values: products of FP8 values are exact in
//         f32, the accumulation in f32 and the scale multiply add the rest.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <octet/autograd/gradcheck.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/matmul_testing.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/ops/matmul_reference.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::Matches;
using ::octet::testing::RandomTensor;
using ::octet::testing::Ref;
using ::octet::testing::RefMatmul;
using ::octet::testing::Tol;
using ::octet::testing::TolFor;

// ---- shape grid -----------------------------------------------------------------------

struct ShapeCase {
  Shape a, b;
};

const std::vector<ShapeCase>& Shapes() {
  static const std::vector<ShapeCase> kShapes = {
      {{1, 1}, {1, 1}},         {{1, 7}, {7, 33}},          {{7, 33}, {33, 1}},
      {{33, 129}, {129, 7}},    {{129, 33}, {33, 129}},     {{64, 64}, {64, 64}},
      {{3, 7, 33}, {33, 5}},    {{4, 5, 6}, {4, 6, 7}},     {{2, 1, 7, 9}, {3, 9, 4}},
      {{7, 9}, {4, 9, 5}},      {{2, 3, 1, 8}, {1, 8, 129}}, {{9}, {9}},
      {{9}, {2, 9, 4}},         {{3, 5, 9}, {9}},           {{1, 129}, {129, 1}},
  };
  return kShapes;
}

class MatmulGrid : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulGrid, MatchesFloat64Reference) {
  const DType dtype = GetParam();
  uint64_t seed = 1;
  for (const ShapeCase& c : Shapes()) {
    const Tensor a = RandomTensor(c.a, seed++, dtype);
    const Tensor b = RandomTensor(c.b, seed++, dtype);
    const Tensor y = Matmul(a, b);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_TRUE(Matches(y, RefMatmul(a, b), TolFor(dtype, c.a.back())))
        << Name(dtype) << " " << ShapeStr(c.a) << " x " << ShapeStr(c.b);
  }
}

TEST_P(MatmulGrid, TransposedSlicedAndExpandedViews) {
  const DType dtype = GetParam();
  const int64_t M = 33, K = 17, N = 7;
  const Tensor at = RandomTensor({K, M}, 11, dtype), bt = RandomTensor({N, K}, 12, dtype);
  const Tensor a = RandomTensor({M, K}, 13, dtype), b = RandomTensor({K, N}, 14, dtype);
  const Tol tol = TolFor(dtype, K);
  // Column-major operands (read in place by oneDNN).
  EXPECT_TRUE(Matches(Matmul(at.T(), b), RefMatmul(at.T().Contiguous(), b), tol));
  EXPECT_TRUE(Matches(Matmul(a, bt.T()), RefMatmul(a, bt.T().Contiguous()), tol));
  EXPECT_TRUE(Matches(Matmul(at.T(), bt.T()), RefMatmul(at.T().Contiguous(), bt.T().Contiguous()), tol));
  // Row slices: leading dimension larger than the row.
  const Tensor wide = RandomTensor({M, K + 5}, 15, dtype);
  const Tensor sliced = wide.Narrow(1, 2, K);
  EXPECT_TRUE(Matches(Matmul(sliced, b), RefMatmul(sliced.Contiguous(), b), tol));
  // Every other column: no unit stride, copied first.
  const Tensor strided = RandomTensor({M, 2 * K}, 16, dtype).Slice(1, 0, 2 * K, 2);
  EXPECT_TRUE(Matches(Matmul(strided, b), RefMatmul(strided.Contiguous(), b), tol));
  // Batched transposes, a permuted batch and an expanded (stride-0) batch.
  const Tensor a3 = RandomTensor({3, K, M}, 17, dtype).Transpose(-1, -2);  // (3, M, K) column-major
  const Tensor b3 = RandomTensor({N, 3, K}, 18, dtype).Permute({1, 2, 0});  // (3, K, N), batch stride K
  EXPECT_TRUE(Matches(Matmul(a3, b3), RefMatmul(a3.Contiguous(), b3.Contiguous()), tol));
  const Tensor bexp = b.Unsqueeze(0).Expand({3, K, N});
  EXPECT_TRUE(Matches(Matmul(a3, bexp), RefMatmul(a3.Contiguous(), bexp.Contiguous()), tol));
  const Tensor aexp = a.Unsqueeze(0).Expand({4, M, K});
  const Tensor b4 = RandomTensor({4, K, N}, 19, dtype);
  EXPECT_TRUE(Matches(Matmul(aexp, b4), RefMatmul(aexp.Contiguous(), b4), tol));
  // A batched A with a shared B folds into one GEMM, also when A is sliced.
  const Tensor a3s = RandomTensor({3, M, K + 3}, 20, dtype).Narrow(2, 1, K);
  EXPECT_TRUE(Matches(Matmul(a3s, b), RefMatmul(a3s.Contiguous(), b), tol));
}

TEST_P(MatmulGrid, LinearMatchesReference) {
  const DType dtype = GetParam();
  for (const Shape& xs : {Shape{5}, Shape{7, 33}, Shape{2, 3, 33}, Shape{1, 129}}) {
    const int64_t K = xs.back();
    for (int64_t N : {1, 7, 33}) {
      const Tensor x = RandomTensor(xs, 100 + K, dtype);
      const Tensor w = RandomTensor({N, K}, 200 + N, dtype);
      const Tensor bias = RandomTensor({N}, 300 + N, dtype);
      const Tol tol = TolFor(dtype, K);
      EXPECT_TRUE(Matches(Linear(x, w, bias), RefMatmul(x, w.T().Contiguous(), bias), tol))
          << ShapeStr(xs) << " N " << N;
      EXPECT_TRUE(Matches(Linear(x, w), RefMatmul(x, w.T().Contiguous()), tol)) << ShapeStr(xs) << " N " << N;
    }
  }
  // Non-contiguous x and a transposed weight.
  const Tensor x = RandomTensor({9, 4, 3}, 7, dtype).Permute({2, 1, 0});  // (3, 4, 9)
  const Tensor w = RandomTensor({9, 5}, 8, dtype).T();                    // (5, 9)
  const Tensor bias = RandomTensor({5}, 9, dtype);
  EXPECT_TRUE(Matches(Linear(x, w, bias), RefMatmul(x.Contiguous(), w.T().Contiguous(), bias), TolFor(dtype, 9)));
}

TEST_P(MatmulGrid, LargeGemmsWithPackedWeights) {
  // >= 256 rows: B is reordered into oneDNN's blocked layout first (NOTE
  // [packed weights] in ops/cpu/dnnl_gemm.cc), from plain and transposed B;
  // an f32 B only above 2^18 elements (NOTE [small f32 B stays plain]).
  const DType dtype = GetParam();
  const int64_t M = 300, K = dtype == DType::kFloat32 ? 520 : 70, N = dtype == DType::kFloat32 ? 530 : 90;
  const Tensor a = RandomTensor({M, K}, 30, dtype), b = RandomTensor({K, N}, 31, dtype);
  const Tensor bt = RandomTensor({N, K}, 32, dtype), bias = RandomTensor({N}, 33, dtype);
  const Tol tol = TolFor(dtype, K);
  EXPECT_TRUE(Matches(Matmul(a, b), RefMatmul(a, b), tol));
  EXPECT_TRUE(Matches(Matmul(a, bt.T()), RefMatmul(a, bt.T().Contiguous()), tol));
  EXPECT_TRUE(Matches(Linear(a, bt, bias), RefMatmul(a, bt.T().Contiguous(), bias), tol));
  const Tensor a3 = RandomTensor({2, 150, K}, 34, dtype);  // folds into 300 rows
  EXPECT_TRUE(Matches(Linear(a3, bt, bias), RefMatmul(a3, bt.T().Contiguous(), bias), tol));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulGrid,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(Name(i.param)); });

TEST(Matmul, ZeroSizedDims) {
  const Tensor a = Zeros({0, 4}), b = Ones({4, 3});
  EXPECT_EQ(Matmul(a, b).shape(), (Shape{0, 3}));
  const Tensor y = Matmul(Ones({2, 0}), Ones({0, 3}));
  EXPECT_EQ(y.ToDoubles(), std::vector<double>(6, 0.0));
  const Tensor lin = Linear(Ones({2, 0}), Ones({3, 0}), FromVector(std::vector<double>{1, 2, 3}, {3}));
  EXPECT_EQ(lin.ToDoubles(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}

// ---- gradients ---------------------------------------------------------------------------

TEST(MatmulGrad, GradcheckShapes) {
  const std::vector<ShapeCase> cases = {
      {{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}}, {{3, 4}, {2, 4, 5}},
      {{4}, {4}},       {{4}, {2, 4, 3}},    {{2, 3, 4}, {4}},
  };
  uint64_t seed = 40;
  for (const ShapeCase& c : cases) {
    Tensor a = RandomTensor(c.a, seed++).requires_grad_();
    Tensor b = RandomTensor(c.b, seed++).requires_grad_();
    const GradcheckResult r = Gradcheck([](const TensorList& in) { return Matmul(in[0], in[1]); }, {a, b});
    EXPECT_TRUE(r.ok) << ShapeStr(c.a) << " x " << ShapeStr(c.b) << ": " << r.message;
  }
}

TEST(MatmulGrad, GradcheckThroughTransposedViews) {
  Tensor a = RandomTensor({4, 3}, 50).requires_grad_();
  Tensor b = RandomTensor({5, 4}, 51).requires_grad_();
  const GradcheckResult r =
      Gradcheck([](const TensorList& in) { return Matmul(in[0].T(), in[1].T()); }, {a, b});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(LinearGrad, GradcheckXWeightBias) {
  for (const Shape& xs : {Shape{3, 4}, Shape{2, 3, 4}, Shape{4}}) {
    Tensor x = RandomTensor(xs, 60).requires_grad_();
    Tensor w = RandomTensor({5, 4}, 61).requires_grad_();
    Tensor bias = RandomTensor({5}, 62).requires_grad_();
    GradcheckResult r =
        Gradcheck([](const TensorList& in) { return Linear(in[0], in[1], in[2]); }, {x, w, bias});
    EXPECT_TRUE(r.ok) << ShapeStr(xs) << ": " << r.message;
    r = Gradcheck([](const TensorList& in) { return Linear(in[0], in[1]); }, {x, w});
    EXPECT_TRUE(r.ok) << ShapeStr(xs) << " (no bias): " << r.message;
  }
}

// NOTE [gelu epilogue]: on the CPU LinearGelu is the GEMM then the GELU
// kernel, so it equals the two ops bit for bit; its backward is checked by
// finite differences.
TEST(LinearGelu, EqualsGeluOfLinearAndPassesGradcheck) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    const Tensor x = RandomTensor({2, 5, 24}, 80, dtype, -2, 2), w = RandomTensor({40, 24}, 81, dtype);
    const Tensor b = RandomTensor({40}, 82, dtype);
    EXPECT_EQ(LinearGelu(x, w, b).ToDoubles(), Gelu(Linear(x, w, b)).ToDoubles()) << Name(dtype);
    EXPECT_EQ(LinearGelu(x, w).ToDoubles(), Gelu(Linear(x, w)).ToDoubles()) << Name(dtype);
    // Same gradients as the composition (dpre = dy * gelu'(pre) in both).
    const Tensor dy = RandomTensor({2, 5, 40}, 83, dtype);
    TensorList g[2];
    for (int fused = 0; fused < 2; ++fused) {
      Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_(), bg = b.detach().requires_grad_();
      (fused ? LinearGelu(xg, wg, bg) : Gelu(Linear(xg, wg, bg))).Backward(dy);
      g[fused] = {xg.grad(), wg.grad(), bg.grad()};
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(g[1][i].ToDoubles(), g[0][i].ToDoubles()) << Name(dtype) << " grad " << i;
  }
  for (const Shape& xs : {Shape{3, 4}, Shape{2, 3, 4}}) {
    Tensor x = RandomTensor(xs, 84).requires_grad_();
    Tensor w = RandomTensor({5, 4}, 85).requires_grad_();
    Tensor bias = RandomTensor({5}, 86).requires_grad_();
    GradcheckResult r = Gradcheck([](const TensorList& in) { return LinearGelu(in[0], in[1], in[2]); }, {x, w, bias});
    EXPECT_TRUE(r.ok) << ShapeStr(xs) << ": " << r.message;
    r = Gradcheck([](const TensorList& in) { return LinearGelu(in[0], in[1]); }, {x, w});
    EXPECT_TRUE(r.ok) << ShapeStr(xs) << " (no bias): " << r.message;
  }
  const std::string msg = ErrorOf([] { LinearGelu(Ones({2, 3}), Ones({5, 4})); });
  EXPECT_NE(msg.find("linear_gelu: the last dim of x (3) does not match weight's in_features (4)"), std::string::npos)
      << msg;
}

// The kernel contract itself: gelu_pre receives product + bias.
TEST(LinearGelu, KernelWritesThePreActivation) {
  const Tensor a = RandomTensor({7, 9}, 87, DType::kFloat32), b = RandomTensor({9, 16}, 88, DType::kFloat32),
               bias = RandomTensor({16}, 89, DType::kFloat32);
  Tensor out = Empty({7, 16}), pre = Empty({7, 16});
  matmul_kernel(kCPU)(a, b, bias, out, pre);
  const std::vector<double> av = a.ToDoubles(), bv = b.ToDoubles(), biasv = bias.ToDoubles();
  std::vector<double> want(7 * 16), want_out(7 * 16);
  for (int m = 0; m < 7; ++m)
    for (int n = 0; n < 16; ++n) {
      double s = biasv[n];
      for (int k = 0; k < 9; ++k) s += av[m * 9 + k] * bv[k * 16 + n];
      want[m * 16 + n] = s;
      want_out[m * 16 + n] = 0.5 * s * (1 + std::tanh(std::sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
    }
  EXPECT_TRUE(::octet::testing::AllClose(pre, want, 1e-5, 1e-6));
  EXPECT_TRUE(::octet::testing::AllClose(out, want_out, 1e-5, 1e-6));
}

TEST(LinearGrad, Float32GradientsMatchFloat64) {
  // The f32 backward GEMMs (oneDNN) against the f64 ones (octet's kernel).
  const Tensor x64 = RandomTensor({6, 33}, 70), w64 = RandomTensor({17, 33}, 71), b64 = RandomTensor({17}, 72);
  const Tensor dy = RandomTensor({6, 17}, 73);
  TensorList grads[2];
  int i = 0;
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    Tensor x = x64.To(dtype).detach().requires_grad_(), w = w64.To(dtype).detach().requires_grad_(),
           b = b64.To(dtype).detach().requires_grad_();
    Linear(x, w, b).Backward(dy.To(dtype));
    grads[i++] = {x.grad(), w.grad(), b.grad()};
  }
  for (int g = 0; g < 3; ++g)
    EXPECT_TRUE(::octet::testing::AllClose(grads[1][g], grads[0][g], 1e-5, 1e-5)) << "gradient " << g;
}

// ---- FP8 -------------------------------------------------------------------------------------

struct Fp8Pair {
  DType a, b;
};

class ScaledMatmulTest : public ::testing::TestWithParam<Fp8Pair> {};

// A per-tensor scale from the tensor's own amax (current scaling).
Tensor QuantizeCurrent(const Tensor& x, DType fp8) {
  const float amax = static_cast<float>(Amax(x).Item());
  const float scale = ComputeScale(amax, static_cast<float>(Info(fp8).max_finite), 0, 1.0f, false);
  return Quantize(x, fp8, scale);
}

TEST_P(ScaledMatmulTest, EqualsFloat64ProductOfDequantizedInputs) {
  const Fp8Pair p = GetParam();
  const std::vector<ShapeCase> cases = {{{1, 1}, {1, 1}},     {{7, 33}, {33, 1}},   {{33, 129}, {129, 7}},
                                        {{64, 96}, {96, 48}}, {{3, 7, 33}, {33, 5}}, {{2, 5, 16}, {2, 16, 9}},
                                        {{2, 1, 7, 9}, {3, 9, 4}}, {{300, 40}, {40, 70}}};
  uint64_t seed = 500;
  for (const ShapeCase& c : cases) {
    const Tensor a = QuantizeCurrent(RandomTensor(c.a, seed++, DType::kFloat32, -3, 3), p.a);
    const Tensor b = QuantizeCurrent(RandomTensor(c.b, seed++, DType::kFloat32, -0.5, 0.5), p.b);
    const Tensor bias = RandomTensor({c.b.back()}, seed++, DType::kFloat32);
    const int64_t K = c.a.back();
    for (DType out : {DType::kFloat32, DType::kBFloat16}) {
      for (bool with_bias : {false, true}) {
        const Tensor y = ScaledMatmul(a, b, out, with_bias ? bias : Tensor());
        EXPECT_EQ(y.dtype(), out);
        EXPECT_FALSE(y.requires_grad());
        Tol tol = TolFor(DType::kFloat32, K);
        if (out == DType::kBFloat16) tol.rel = std::ldexp(1.0, -8);
        tol.abs = with_bias ? std::ldexp(1.0, -24) : 0.0;  // |bias| < 1
        EXPECT_TRUE(Matches(y, RefMatmul(a, b, with_bias ? bias : Tensor()), tol))
            << Name(p.a) << " x " << Name(p.b) << " " << ShapeStr(c.a) << " x " << ShapeStr(c.b) << " -> "
            << Name(out) << (with_bias ? " + bias" : "");
      }
    }
  }
}

TEST_P(ScaledMatmulTest, TransposedFp8OperandsAsCastTransposeMakesThem) {
  // wgrad's layout: dW = dYᵀ · X with dYᵀ taken from the column-wise copy.
  const Fp8Pair p = GetParam();
  const int64_t T = 48, Nout = 264, Kin = 96;  // M = 264 rows: packed weights too
  const Tensor scale_a = Full({1}, 8.0), scale_b = Full({1}, 64.0);
  const auto [dy, dyt] = CastTranspose(RandomTensor({T, Nout}, 600, DType::kFloat32), p.a, scale_a);
  const auto [x, xt] = CastTranspose(RandomTensor({T, Kin}, 601, DType::kFloat32, -0.1, 0.1), p.b, scale_b);
  const Tol tol = TolFor(DType::kFloat32, T);
  const Ref want = RefMatmul(dy.T().Contiguous(), x);
  EXPECT_TRUE(Matches(ScaledMatmul(dyt, x, DType::kFloat32), want, tol));  // row-major Aᵀ copy
  EXPECT_TRUE(Matches(ScaledMatmul(dy.T(), x, DType::kFloat32), want, tol));  // column-major view
  EXPECT_TRUE(Matches(ScaledMatmul(dy.T(), xt.T(), DType::kFloat32), want, tol));
}

INSTANTIATE_TEST_SUITE_P(
    AcceptedPairs, ScaledMatmulTest,
    ::testing::Values(Fp8Pair{DType::kFloat8E4M3, DType::kFloat8E4M3}, Fp8Pair{DType::kFloat8E4M3, DType::kFloat8E5M2},
                      Fp8Pair{DType::kFloat8E5M2, DType::kFloat8E4M3}),
    [](const ::testing::TestParamInfo<Fp8Pair>& i) {
      return std::string(i.param.a == DType::kFloat8E4M3 ? "E4M3" : "E5M2") + "x" +
             (i.param.b == DType::kFloat8E4M3 ? "E4M3" : "E5M2");
    });

// NOTE [fp8 column-wise data], with the TN rule forced on the CPU: the copy
// QuantizeForGemm attaches is q transposed; ScaledMatmul gives the product of
// the logical operands whichever copy it reads, for q, q.T() and
// ForTransposedUse(q), and never mistakes another tensor that inherited the
// metadata (a contiguous copy of the square q.T()) for q.
TEST(ScaledMatmul, ColumnwiseDataIsUsedOnlyForTheTensorItBelongsTo) {
  const int64_t S = 40;
  const Tensor xa = RandomTensor({S, S}, 610, DType::kFloat32, -2, 2);
  const Tensor xb = RandomTensor({S, S}, 611, DType::kFloat32, -0.5, 0.5);
  const Tensor scale = Full({1}, 16.0);
  const Tensor plain = QuantizeForGemm(xb, DType::kFloat8E4M3, scale, /*columnwise=*/true);
  EXPECT_FALSE(plain.scale_meta()->columnwise.defined());  // the CPU reads any layout
  SetFp8TransposedCopiesForTesting(true);
  const Tensor a = QuantizeForGemm(xa, DType::kFloat8E4M3, scale, /*columnwise=*/true);
  const Tensor b = QuantizeForGemm(xb, DType::kFloat8E4M3, scale, /*columnwise=*/true);
  const Tensor b_copy_t = b.T().Contiguous();  // carries b's metadata, holds bᵀ
  std::vector<std::pair<const char*, Tensor>> results = {
      {"a b", ScaledMatmul(a, b, DType::kFloat32)},
      {"a bT", ScaledMatmul(a, b.T(), DType::kFloat32)},
      {"aT b", ScaledMatmul(a.T(), b, DType::kFloat32)},
      {"a ForTransposedUse(b)", ScaledMatmul(a, ForTransposedUse(b), DType::kFloat32)},
      {"a copy(bT)", ScaledMatmul(a, b_copy_t, DType::kFloat32)},
      {"copy(bT) a", ScaledMatmul(b_copy_t, a, DType::kFloat32)}};
  SetFp8TransposedCopiesForTesting(std::nullopt);
  ASSERT_TRUE(b.scale_meta()->columnwise.defined());
  EXPECT_EQ(b.scale_meta()->columnwise.ToDoubles(), b.T().Contiguous().ToDoubles());
  EXPECT_EQ(b.ToDoubles(), plain.ToDoubles());  // the row-wise bytes do not change
  const Tensor ft = ForTransposedUse(b);
  EXPECT_EQ(ft.stride(0), 1);
  EXPECT_EQ(ft.ToDoubles(), b.ToDoubles());
  const Tol tol = TolFor(DType::kFloat32, S);
  const Ref wants[] = {RefMatmul(a, b), RefMatmul(a, b.T().Contiguous()), RefMatmul(a.T().Contiguous(), b),
                       RefMatmul(a, b), RefMatmul(a, b.T().Contiguous()), RefMatmul(b.T().Contiguous(), a)};
  for (size_t i = 0; i < results.size(); ++i) EXPECT_TRUE(Matches(results[i].second, wants[i], tol)) << results[i].first;
}

TEST(ScaledMatmul, RejectsE5M2TimesE5M2) {
  const Tensor a = Quantize(Ones({4, 8}), DType::kFloat8E5M2, 1.0f);
  const Tensor b = Quantize(Ones({8, 2}), DType::kFloat8E5M2, 1.0f);
  const std::string msg = ErrorOf([&] { ScaledMatmul(a, b, DType::kFloat32); });
  EXPECT_NE(msg.find("scaled_matmul: fp8_e5m2 x fp8_e5m2 is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuBLASLt has no E5M2 x E5M2 kernel either"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fp8_e5m2[4, 8]"), std::string::npos) << msg;
}

TEST(ScaledMatmul, ErrorMessages) {
  const Tensor q = Quantize(Ones({4, 8}), DType::kFloat8E4M3, 1.0f);
  const Tensor f = Ones({8, 2});
  std::string msg = ErrorOf([&] { ScaledMatmul(q, f, DType::kFloat32); });
  EXPECT_NE(msg.find("scaled_matmul: expects FP8 operands, got a fp8_e4m3[4, 8], b float32[8, 2]"),
            std::string::npos)
      << msg;
  const Tensor q2 = Quantize(Ones({8, 2}), DType::kFloat8E4M3, 1.0f);
  msg = ErrorOf([&] { ScaledMatmul(q, q2, DType::kFloat16); });
  EXPECT_NE(msg.find("scaled_matmul: out_dtype must be float32 or bfloat16, got float16"), std::string::npos) << msg;
  const Tensor q3 = Quantize(Ones({7, 2}), DType::kFloat8E4M3, 1.0f);
  msg = ErrorOf([&] { ScaledMatmul(q, q3, DType::kFloat32); });
  EXPECT_NE(msg.find("scaled_matmul: inner dims do not match"), std::string::npos) << msg;
  msg = ErrorOf([&] { ScaledMatmul(q, q2, DType::kFloat32, Ones({3})); });
  EXPECT_NE(msg.find("scaled_matmul: bias must be float32 or bfloat16 of shape [2], got float32[3]"),
            std::string::npos)
      << msg;
}

// ---- errors ------------------------------------------------------------------------------------

TEST(Matmul, ErrorMessages) {
  std::string msg = ErrorOf([] { Matmul(Ones({2, 3}), Ones({4, 5})); });
  EXPECT_NE(msg.find("matmul: inner dims do not match: a float32[2, 3], b float32[4, 5] (K = 3 vs 4)"),
            std::string::npos)
      << msg;
  msg = ErrorOf([] { Matmul(Scalar(1.0), Ones({4, 5})); });
  EXPECT_NE(msg.find("matmul: operands must have rank >= 1, got a float32[], b float32[4, 5]"), std::string::npos)
      << msg;
  msg = ErrorOf([] { Matmul(Ones({2, 3}), Ones({3, 5}, {.dtype = DType::kBFloat16})); });
  EXPECT_NE(msg.find("matmul: dtype mismatch: a float32[2, 3], b bfloat16[3, 5]"), std::string::npos) << msg;
  msg = ErrorOf([] { Matmul(Quantize(Ones({2, 3}), DType::kFloat8E4M3, 1.0f), Ones({3, 5})); });
  EXPECT_NE(msg.find("matmul: a is fp8_e4m3[2, 3] (a fp8_e4m3[2, 3], b float32[3, 5])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use ScaledMatmul"), std::string::npos) << msg;
  msg = ErrorOf([] { Matmul(Ones({2, 3, 4}), Ones({5, 4, 2})); });
  EXPECT_NE(msg.find("matmul: batch dims do not broadcast: a float32[2, 3, 4], b float32[5, 4, 2]"),
            std::string::npos)
      << msg;
  msg = ErrorOf([] { Matmul(Ones({2, 3}, {.dtype = DType::kInt64}), Ones({3, 5}, {.dtype = DType::kInt64})); });
  EXPECT_NE(msg.find("matmul: a is int64[2, 3]"), std::string::npos) << msg;
}

TEST(Linear, ErrorMessages) {
  std::string msg = ErrorOf([] { Linear(Ones({2, 3}), Ones({5, 4})); });
  EXPECT_NE(msg.find("linear: the last dim of x (3) does not match weight's in_features (4) (x float32[2, 3], "
                     "weight float32[5, 4])"),
            std::string::npos)
      << msg;
  msg = ErrorOf([] { Linear(Ones({2, 3}), Ones({5, 3}), Ones({4})); });
  EXPECT_NE(msg.find("linear: bias must have shape [5] (x float32[2, 3], weight float32[5, 3], bias float32[4])"),
            std::string::npos)
      << msg;
  msg = ErrorOf([] { Linear(Ones({2, 3}), Ones({5, 3}, {.dtype = DType::kBFloat16})); });
  EXPECT_NE(msg.find("linear: dtype mismatch (x float32[2, 3], weight bfloat16[5, 3])"), std::string::npos) << msg;
  msg = ErrorOf([] { Linear(Ones({2, 3}), Ones({3})); });
  EXPECT_NE(msg.find("linear: weight must be 2-D (N, K)"), std::string::npos) << msg;
  msg = ErrorOf([] { Linear(Ones({2, 3}), Quantize(Ones({5, 3}), DType::kFloat8E4M3, 1.0f)); });
  EXPECT_NE(msg.find("linear: weight is fp8_e4m3[5, 3]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace octet
