// Linear, CausalSelfAttention, MLP and TransformerBlock: forward and backward
// against float64 references (independent loops or compositions of the
// underlying ops), gradcheck, amp dtypes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include <octet/autograd/engine.h>
#include <octet/autograd/gradcheck.h>
#include <octet/core/scaling_math.h>
#include <octet/nn/amp.h>
#include <octet/nn/attention.h>
#include <octet/nn/linear.h>
#include <octet/nn/mlp.h>
#include <octet/nn/transformer.h>
#include <octet/ops/attention.h>
#include <octet/ops/cast.h>
#include <octet/ops/matmul.h>
#include <octet/ops/norm.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

void Randomize(Module& m, uint64_t seed, double scale = 1.0) {
  NoGradGuard ng;
  for (auto& [n, p] : m.NamedParameters()) {
    Tensor d = p.detach();
    d.CopyFrom_(RandomTensor(p.shape(), seed++, p.dtype(), -scale, scale));
  }
}

TensorList GradsOf(const Tensor& y, const TensorList& wrt, uint64_t seed) {
  return autograd::Grad({y}, wrt, {RandomTensor(y.shape(), seed, y.dtype())});
}

// Leaf copies of a module's parameters (for reference compositions).
std::vector<Tensor> LeafCopies(Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.Parameters()) out.push_back(p.detach().Clone().requires_grad_());
  return out;
}

TEST(LinearModule, MatchesFloat64LoopsForwardAndBackward) {
  Linear lin({.in = 4, .out = 3});
  lin.To(DType::kFloat64);
  Randomize(lin, 1);
  const Tensor x = RandomTensor({2, 5, 4}, 2).requires_grad_();
  const Tensor y = lin(x);
  ASSERT_EQ(y.shape(), (Shape{2, 5, 3}));
  const std::vector<double> xv = x.ToDoubles(), w = lin.weight().ToDoubles(), b = lin.bias()->ToDoubles();
  std::vector<double> ref(10 * 3);
  for (int r = 0; r < 10; ++r)
    for (int o = 0; o < 3; ++o) {
      double s = b[o];
      for (int i = 0; i < 4; ++i) s += xv[r * 4 + i] * w[o * 4 + i];
      ref[r * 3 + o] = s;
    }
  EXPECT_TRUE(AllClose(y, ref, 1e-13, 1e-13));
  const Tensor dy = RandomTensor({2, 5, 3}, 3);
  y.Backward(dy);
  const std::vector<double> d = dy.ToDoubles();
  std::vector<double> dx(10 * 4, 0.0), dw(3 * 4, 0.0), db(3, 0.0);
  for (int r = 0; r < 10; ++r)
    for (int o = 0; o < 3; ++o) {
      db[o] += d[r * 3 + o];
      for (int i = 0; i < 4; ++i) {
        dx[r * 4 + i] += d[r * 3 + o] * w[o * 4 + i];
        dw[o * 4 + i] += d[r * 3 + o] * xv[r * 4 + i];
      }
    }
  EXPECT_TRUE(AllClose(x.grad(), dx, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose(lin.weight().grad(), dw, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose(lin.bias()->grad(), db, 1e-12, 1e-12));
}

TEST(LinearModule, GradcheckWithAndWithoutBias) {
  for (bool bias : {true, false}) {
    Linear lin({.in = 3, .out = 2, .bias = bias});
    lin.To(DType::kFloat64);
    Randomize(lin, 4);
    const Tensor x = RandomTensor({4, 3}, 5).requires_grad_();
    TensorList inputs = {x};
    for (const Tensor& p : lin.Parameters()) inputs.push_back(p);
    const auto r = Gradcheck([&](const TensorList& in) { return lin(in[0]); }, inputs);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(LinearModule, O2ComputesInBf16WithFloat32Gradients) {
  Linear lin({.in = 16, .out = 8});
  lin.SetAmp(amp::Level::kO2);
  EXPECT_EQ(lin.amp_level(), amp::Level::kO2);
  const Tensor x = RandomTensor({4, 16}, 6, DType::kFloat32);
  const Tensor y = lin(x);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  Sum(y.To(DType::kFloat32)).Backward();
  EXPECT_EQ(lin.weight().grad().dtype(), DType::kFloat32);
  EXPECT_EQ(lin.bias()->grad().dtype(), DType::kFloat32);
  lin.SetAmp(amp::Level::kO0);
  EXPECT_TRUE(AllClose(y.To(DType::kFloat32), lin(x), 2e-2, 2e-2));
  EXPECT_THAT(ErrorOf([] { Linear({.in = 0, .out = 2}); }), HasSubstr("in and out must be positive"));
}

// Reference attention in f64 loops: out[b,h,t] = sum_{s<=t} softmax(q.k/sqrt(D)) v.
Tensor ReferenceAttentionComposition(const Tensor& x, const Tensor& wqkv, const Tensor& bqkv, const Tensor& wp,
                                     const Tensor& bp, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / H;
  const Tensor qkv = octet::Linear(x, wqkv, bqkv);  // (B,T,3C)
  TensorList parts;
  for (int i = 0; i < 3; ++i)
    parts.push_back(qkv.Narrow(2, i * C, C).Reshape({B, T, H, D}).Permute({0, 2, 1, 3}));  // (B,H,T,D)
  // scores (B,H,T,T) with a causal mask, softmax, times v.
  const Tensor scores = Matmul(parts[0], parts[1].Transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(D)));
  std::vector<double> mask(T * T);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < T; ++s) mask[t * T + s] = s <= t ? 0.0 : -1e30;
  const Tensor masked = scores + FromVector(mask, {T, T}, {.dtype = DType::kFloat64});
  const Tensor e = Exp(masked - Max(masked, {-1}, true));
  const Tensor p = e / Sum(e, {-1}, true);
  const Tensor y = Matmul(p, parts[2]).Permute({0, 2, 1, 3}).Reshape({B, T, C});
  return octet::Linear(y, wp, bp);
}

TEST(CausalSelfAttentionModule, MatchesFloat64CompositionForwardAndBackward) {
  CausalSelfAttention attn({.n_embd = 8, .n_head = 2});
  attn.To(DType::kFloat64);
  Randomize(attn, 10, 0.5);
  const Tensor x = RandomTensor({2, 5, 8}, 11).requires_grad_();
  const Tensor y = attn(x);
  std::vector<Tensor> p = LeafCopies(attn);  // qkv.weight, qkv.bias, proj.weight, proj.bias
  const Tensor xr = x.detach().requires_grad_();
  const Tensor yr = ReferenceAttentionComposition(xr, p[0], p[1], p[2], p[3], 2);
  EXPECT_TRUE(AllClose(y, yr, 1e-11, 1e-12));
  TensorList wrt = {x};
  for (const Tensor& t : attn.Parameters()) wrt.push_back(t);
  const TensorList g = GradsOf(y, wrt, 12);
  const TensorList gr = GradsOf(yr, {xr, p[0], p[1], p[2], p[3]}, 12);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(AllClose(g[i], gr[i], 1e-9, 1e-11)) << i;
}

TEST(CausalSelfAttentionModule, GradcheckAndCausality) {
  CausalSelfAttention attn({.n_embd = 4, .n_head = 2});
  attn.To(DType::kFloat64);
  Randomize(attn, 20, 0.5);
  const Tensor x = RandomTensor({1, 3, 4}, 21).requires_grad_();
  TensorList inputs = {x};
  for (const Tensor& p : attn.Parameters()) inputs.push_back(p);
  const auto r = Gradcheck([&](const TensorList& in) { return attn(in[0]); }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
  // Changing the last token leaves earlier outputs unchanged.
  Tensor x2 = x.detach().Clone();
  x2.Narrow(1, 2, 1).Fill_(3.0);
  const std::vector<double> a = attn(x.detach()).ToDoubles(), b = attn(x2).ToDoubles();
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(a[i], b[i]);
  EXPECT_THAT(ErrorOf([] { CausalSelfAttention({.n_embd = 6, .n_head = 4}); }), HasSubstr("must divide"));
}

// O1 (NOTE [fp8 attention inputs] in ops/attention.cc): the attention runs
// on an E4M3 copy of the qkv projection quantized with its own amax
// (ComputeScale from the host's max |qkv|, an independent path to the
// device-side scale), forward and backward bit for bit that composition;
// with the recipe's fp8_attention_inputs off it reads the BF16 projection.
TEST(CausalSelfAttentionModule, O1AttendsToAnFp8CopyOfQkv) {
  CausalSelfAttention attn({.n_embd = 16, .n_head = 2});
  Randomize(attn, 30, 0.5);
  const Tensor x = RandomTensor({2, 9, 16}, 31, DType::kBFloat16);
  auto run = [&](bool fp8_inputs, bool manual) {
    attn.SetAmp(amp::Level::kO1, {.fp8_attention_inputs = fp8_inputs});
    Tensor xin = x.detach().requires_grad_();
    Tensor y;
    if (!manual) {
      y = attn(xin);
    } else {
      const Tensor qkv = attn.qkv()(xin);
      EXPECT_EQ(qkv.dtype(), DType::kBFloat16);
      double amax = 0.0;
      for (double v : qkv.ToDoubles()) amax = std::max(amax, std::fabs(v));
      const float scale = ComputeScale(static_cast<float>(amax), 448.0f, 0, 1.0f, false);
      const Tensor heads = fp8_inputs
                               ? CausalAttentionQkv(Dequantize(Quantize(qkv, DType::kFloat8E4M3, scale),
                                                               DType::kBFloat16), 2)
                               : CausalAttentionQkv(qkv, 2);
      y = attn.proj()(heads);
    }
    return std::make_pair(y, GradsOf(y, {xin}, 32)[0]);
  };
  const auto [fp8_y, fp8_dx] = run(true, false);
  const auto [fp8_ref_y, fp8_ref_dx] = run(true, true);
  EXPECT_EQ(fp8_y.dtype(), DType::kBFloat16);
  EXPECT_EQ(fp8_y.ToDoubles(), fp8_ref_y.ToDoubles());
  EXPECT_EQ(fp8_dx.ToDoubles(), fp8_ref_dx.ToDoubles());
  const auto [bf16_y, bf16_dx] = run(false, false);
  const auto [bf16_ref_y, bf16_ref_dx] = run(false, true);
  EXPECT_EQ(bf16_y.ToDoubles(), bf16_ref_y.ToDoubles());
  EXPECT_EQ(bf16_dx.ToDoubles(), bf16_ref_dx.ToDoubles());
  // The FP8 rounding of qkv shows in the output, within E4M3's precision.
  EXPECT_NE(fp8_y.ToDoubles(), bf16_y.ToDoubles());
  EXPECT_TRUE(AllClose(fp8_y.To(DType::kFloat32), bf16_y.To(DType::kFloat32), 0.1, 0.1));
}

TEST(MLPModule, MatchesFloat64CompositionAndGradcheck) {
  MLP mlp({.dim = 4});
  mlp.To(DType::kFloat64);
  Randomize(mlp, 30, 0.5);
  EXPECT_EQ(mlp.fc().weight().shape(), (Shape{16, 4}));
  const Tensor x = RandomTensor({3, 4}, 31).requires_grad_();
  const Tensor y = mlp(x);
  std::vector<Tensor> p = LeafCopies(mlp);
  const Tensor xr = x.detach().requires_grad_();
  const Tensor yr = octet::Linear(Gelu(octet::Linear(xr, p[0], p[1])), p[2], p[3]);
  EXPECT_TRUE(AllClose(y, yr, 1e-13, 1e-13));
  TensorList wrt = {x};
  for (const Tensor& t : mlp.Parameters()) wrt.push_back(t);
  const TensorList g = GradsOf(y, wrt, 32), gr = GradsOf(yr, {xr, p[0], p[1], p[2], p[3]}, 32);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(AllClose(g[i], gr[i], 1e-11, 1e-12)) << i;
  const auto r = Gradcheck([&](const TensorList& in) { return mlp(in[0]); }, wrt);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(TransformerBlockModule, MatchesPreLnCompositionForwardAndBackward) {
  TransformerBlock block({.n_embd = 8, .n_head = 2});
  block.To(DType::kFloat64);
  Randomize(block, 40, 0.5);
  const Tensor x = RandomTensor({2, 4, 8}, 41).requires_grad_();
  const Tensor y = block(x);
  // ln_1.{w,b}, attn.qkv.{w,b}, attn.proj.{w,b}, ln_2.{w,b}, mlp.fc.{w,b}, mlp.proj.{w,b}
  std::vector<Tensor> p = LeafCopies(block);
  const Tensor xr = x.detach().requires_grad_();
  const Tensor h = xr + ReferenceAttentionComposition(octet::LayerNorm(xr, p[0], p[1], 1e-5), p[2], p[3], p[4], p[5], 2);
  const Tensor yr = h + octet::Linear(Gelu(octet::Linear(octet::LayerNorm(h, p[6], p[7], 1e-5), p[8], p[9])), p[10], p[11]);
  EXPECT_TRUE(AllClose(y, yr, 1e-11, 1e-12));
  TensorList wrt = {x};
  for (const Tensor& t : block.Parameters()) wrt.push_back(t);
  TensorList wrt_ref = {xr};
  for (const Tensor& t : p) wrt_ref.push_back(t);
  const TensorList g = GradsOf(y, wrt, 42), gr = GradsOf(yr, wrt_ref, 42);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(AllClose(g[i], gr[i], 1e-9, 1e-11)) << i;
}

TEST(TransformerBlockModule, AmpLevelsKeepTheResidualInTheComputeDtype) {
  TransformerBlock block({.n_embd = 16, .n_head = 2});
  const Tensor x = RandomTensor({2, 16, 16}, 50, DType::kFloat32);
  const Tensor y0 = block(x);
  EXPECT_EQ(y0.dtype(), DType::kFloat32);
  for (amp::Level level : {amp::Level::kO1, amp::Level::kO2}) {
    block.SetAmp(level);
    const Tensor y = block(x.To(DType::kBFloat16));
    EXPECT_EQ(y.dtype(), DType::kBFloat16) << amp::Name(level);
    EXPECT_TRUE(AllClose(y.To(DType::kFloat32), y0, 0.1, 0.1)) << amp::Name(level);
  }
}

}  // namespace
}  // namespace octet::nn
