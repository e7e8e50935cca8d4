// LayerNorm, RMSNorm, Embedding, Dropout and GELU modules: forward and
// backward against float64 compositions of the underlying ops, gradcheck, amp
// dtypes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include <octet/autograd/engine.h>
#include <octet/autograd/gradcheck.h>
#include <octet/nn/activation.h>
#include <octet/nn/amp.h>
#include <octet/nn/embedding.h>
#include <octet/nn/layer_norm.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

// Sets every float parameter of m to random values (f64 module).
void Randomize(Module& m, uint64_t seed) {
  NoGradGuard ng;
  for (auto& [n, p] : m.NamedParameters()) {
    Tensor d = p.detach();
    d.CopyFrom_(RandomTensor(p.shape(), seed++, p.dtype(), -1.0, 1.0));
  }
}

// Gradients of sum(w * f(inputs)) for a fixed weighting w.
TensorList GradsOf(const Tensor& y, const TensorList& wrt, uint64_t seed) {
  const Tensor w = RandomTensor(y.shape(), seed, y.dtype());
  return autograd::Grad({y}, wrt, {w});
}

TEST(LayerNormModule, MatchesFloat64CompositionForwardAndBackward) {
  LayerNorm ln({.dim = 5, .eps = 1e-5});
  ln.To(DType::kFloat64);
  Randomize(ln, 7);
  const Tensor x = RandomTensor({2, 3, 5}, 1).requires_grad_();
  const Tensor y = ln(x);
  // Reference: (x - mean) / sqrt(var + eps) * w + b from pointwise/reduce ops.
  const Tensor xr = x.detach().requires_grad_();
  const Tensor w = ln.weight()->detach().requires_grad_(), b = ln.bias()->detach().requires_grad_();
  const Tensor mean = Mean(xr, {-1}, true);
  const Tensor xc = xr - mean;
  const Tensor var = Mean(Square(xc), {-1}, true);
  const Tensor yr = xc * Rsqrt(var + 1e-5) * w + b;
  EXPECT_TRUE(AllClose(y, yr, 1e-12, 1e-12));
  const TensorList g = GradsOf(y, {x, *ln.weight(), *ln.bias()}, 3);
  const TensorList gr = GradsOf(yr, {xr, w, b}, 3);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(AllClose(g[i], gr[i], 1e-10, 1e-11)) << i;
}

TEST(LayerNormModule, Gradcheck) {
  LayerNorm ln({.dim = 4});
  ln.To(DType::kFloat64);
  Randomize(ln, 9);
  const Tensor x = RandomTensor({3, 4}, 2).requires_grad_();
  TensorList inputs = {x, *ln.weight(), *ln.bias()};
  const auto r = Gradcheck([&](const TensorList& in) { return ln(in[0]); }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(LayerNormModule, AmpLevelsComputeInBf16WithFloat32Masters) {
  LayerNorm ln({.dim = 8});
  const Tensor x = RandomTensor({4, 8}, 5, DType::kFloat32).requires_grad_();
  for (amp::Level level : {amp::Level::kO1, amp::Level::kO2}) {
    ln.SetAmp(level);
    ln.ZeroGrad();
    const Tensor y = ln(x);
    EXPECT_EQ(y.dtype(), DType::kBFloat16);
    Sum(y.To(DType::kFloat32)).Backward();
    EXPECT_EQ(ln.weight()->grad().dtype(), DType::kFloat32);
    // Same values as the f32 LayerNorm up to bf16 rounding.
    ln.SetAmp(amp::Level::kO0);
    EXPECT_TRUE(AllClose(y.To(DType::kFloat32), ln(x.detach()), 1e-2, 1e-2));
  }
}

TEST(RMSNormModule, MatchesFloat64CompositionAndGradcheck) {
  RMSNorm rms({.dim = 6, .eps = 1e-6});
  rms.To(DType::kFloat64);
  Randomize(rms, 11);
  const Tensor x = RandomTensor({3, 6}, 4).requires_grad_();
  const Tensor y = rms(x);
  const Tensor xr = x.detach().requires_grad_();
  const Tensor w = rms.weight()->detach().requires_grad_();
  const Tensor yr = xr * Rsqrt(Mean(Square(xr), {-1}, true) + 1e-6) * w;
  EXPECT_TRUE(AllClose(y, yr, 1e-12, 1e-12));
  const TensorList g = GradsOf(y, {x, *rms.weight()}, 5);
  const TensorList gr = GradsOf(yr, {xr, w}, 5);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(AllClose(g[i], gr[i], 1e-10, 1e-11)) << i;
  TensorList inputs = {x, *rms.weight()};
  const auto r = Gradcheck([&](const TensorList& in) { return rms(in[0]); }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(EmbeddingModule, GathersRowsAndScattersGradients) {
  Generator gen(3);
  Embedding emb({.num = 5, .dim = 3, .init_std = 1.0, .gen = &gen});
  emb.To(DType::kFloat64);
  const Tensor idx = FromVector(std::vector<int64_t>{4, 0, 4, 2}, {2, 2});
  const Tensor y = emb(idx);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 3}));
  const std::vector<double> w = emb.weight().ToDoubles(), yv = y.ToDoubles();
  const int64_t rows[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(yv[i * 3 + c], w[rows[i] * 3 + c]);
  const Tensor dy = RandomTensor({2, 2, 3}, 8);
  y.Backward(dy);
  const std::vector<double> g = emb.weight().grad().ToDoubles(), d = dy.ToDoubles();
  for (int c = 0; c < 3; ++c) {
    EXPECT_DOUBLE_EQ(g[4 * 3 + c], d[0 * 3 + c] + d[2 * 3 + c]);
    EXPECT_DOUBLE_EQ(g[0 * 3 + c], d[1 * 3 + c]);
    EXPECT_DOUBLE_EQ(g[2 * 3 + c], d[3 * 3 + c]);
    EXPECT_DOUBLE_EQ(g[1 * 3 + c], 0.0);
    EXPECT_DOUBLE_EQ(g[3 * 3 + c], 0.0);
  }
  TensorList inputs = {emb.weight()};
  const auto r = Gradcheck([&](const TensorList&) { return emb(idx); }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(EmbeddingModule, InitStdAndAmpDtypeAndBadIndex) {
  Generator gen(1);
  Embedding emb({.num = 200, .dim = 50, .init_std = 0.02, .gen = &gen});
  const std::vector<double> w = emb.weight().ToDoubles();
  double s2 = 0;
  for (double v : w) s2 += v * v;
  EXPECT_NEAR(std::sqrt(s2 / w.size()), 0.02, 0.001);
  emb.SetAmp(amp::Level::kO1);
  const Tensor idx = FromVector(std::vector<int64_t>{1, 2}, {2});
  const Tensor y = emb(idx);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  EXPECT_EQ(emb.weight().dtype(), DType::kFloat32);
  EXPECT_THAT(ErrorOf([&] { emb(FromVector(std::vector<int64_t>{200}, {1})); }), HasSubstr("200"));
}

TEST(DropoutModule, IdentityInEvalScaledMaskInTraining) {
  Generator gen(42);
  Dropout drop({.p = 0.25, .gen = &gen});
  const Tensor x = Ones({64, 64}, {.dtype = DType::kFloat64});
  drop.Eval();
  EXPECT_TRUE(drop(x).is_same(x));
  drop.Train();
  const std::vector<double> y = drop(x).ToDoubles();
  int64_t zeros = 0;
  for (double v : y) {
    if (v == 0.0) ++zeros;
    else EXPECT_DOUBLE_EQ(v, 1.0 / 0.75);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / y.size(), 0.25, 0.03);
  EXPECT_THAT(ErrorOf([] { Dropout({.p = 1.0}); }), HasSubstr("p must be in [0, 1)"));
}

TEST(GeluModule, TanhFormAndGradcheck) {
  GELU gelu;
  const Tensor x = RandomTensor({10}, 3, DType::kFloat64, -4, 4).requires_grad_();
  const std::vector<double> xv = x.ToDoubles(), y = gelu(x).ToDoubles();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    EXPECT_NEAR(y[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-12);
  }
  TensorList inputs = {x};
  const auto r = Gradcheck([&](const TensorList& in) { return gelu(in[0]); }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

}  // namespace
}  // namespace octet::nn
