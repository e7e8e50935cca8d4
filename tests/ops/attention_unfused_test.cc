// The unfused causal attention of ops/attention_unfused.h (the CUDA backend's
// fallback, NOTE [attention fallback]) run on the CPU ops, against:
//   - a float64 forward written here (log-sum-exp per causal row), and
//     float64 gradients from finite differences of the scalar loss
//     L = sum(out o W) through that forward (so the backward formulas are
//     checked against calculus, not against themselves);
//   - a closed-form float64 backward written here (validated against the
//     finite differences first), for shapes too large to difference;
//   - the fused CPU kernels (causal_attention_fwd/bwd(kCPU)) on the same inputs.
// Covers float64/float32/bfloat16/float16, T = 1, T = 37, D = 1, the q/k/v
// slices of a fused (B,T,3,H,D) projection and a transposed dout, every
// subset of wanted gradients (outputs pre-filled with NaN: overwritten, not
// accumulated), huge scores, and bit-identical repeated runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/attention_unfused.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::RandomTensor;

// ---- float64 references on row-major (B,H,T,D) values ----

struct Fwd64 {
  std::vector<double> out, lse;
};

// lse_t = log sum_{s<=t} exp(z_ts), z = scale q_t.k_s; out_t = sum_s exp(z_ts - lse_t) v_s.
Fwd64 Forward64(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                const Shape& shape, double scale) {
  const int64_t heads = shape[0] * shape[1], t_len = shape[2], d = shape[3];
  Fwd64 r{std::vector<double>(q.size(), 0.0), std::vector<double>(heads * t_len, 0.0)};
  std::vector<double> z(t_len);
  for (int64_t h = 0; h < heads; ++h) {
    const double* qh = q.data() + h * t_len * d;
    const double* kh = k.data() + h * t_len * d;
    const double* vh = v.data() + h * t_len * d;
    for (int64_t t = 0; t < t_len; ++t) {
      double zmax = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s <= t; ++s) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qh[t * d + c] * kh[s * d + c];
        z[s] = scale * dot;
        zmax = std::max(zmax, z[s]);
      }
      double sum = 0;
      for (int64_t s = 0; s <= t; ++s) sum += std::exp(z[s] - zmax);
      const double lse = zmax + std::log(sum);
      r.lse[h * t_len + t] = lse;
      double* o = r.out.data() + (h * t_len + t) * d;
      for (int64_t s = 0; s <= t; ++s) {
        const double p = std::exp(z[s] - lse);
        for (int64_t c = 0; c < d; ++c) o[c] += p * vh[s * d + c];
      }
    }
  }
  return r;
}

struct Grads64 {
  std::vector<double> dq, dk, dv;
  const std::vector<double>& operator[](int i) const { return i == 0 ? dq : i == 1 ? dk : dv; }
};

// Closed form of dL/d{q,k,v} for L = sum(out o w): with p_ts the softmax
// weights, g_ts = w_t . v_s, dL/dz_ts = p_ts (g_ts - sum_s' p_ts' g_ts').
Grads64 Backward64(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                   const std::vector<double>& w, const Shape& shape, double scale) {
  const int64_t heads = shape[0] * shape[1], t_len = shape[2], d = shape[3];
  const Fwd64 f = Forward64(q, k, v, shape, scale);
  Grads64 g{std::vector<double>(q.size(), 0.0), std::vector<double>(q.size(), 0.0), std::vector<double>(q.size(), 0.0)};
  std::vector<double> p(t_len), gw(t_len);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t base = h * t_len * d;
    for (int64_t t = 0; t < t_len; ++t) {
      double mean_g = 0;
      for (int64_t s = 0; s <= t; ++s) {
        double dot = 0, wv = 0;
        for (int64_t c = 0; c < d; ++c) {
          dot += q[base + t * d + c] * k[base + s * d + c];
          wv += w[base + t * d + c] * v[base + s * d + c];
        }
        p[s] = std::exp(scale * dot - f.lse[h * t_len + t]);
        gw[s] = wv;
        mean_g += p[s] * wv;
      }
      for (int64_t s = 0; s <= t; ++s) {
        const double dz = p[s] * (gw[s] - mean_g);
        for (int64_t c = 0; c < d; ++c) {
          g.dq[base + t * d + c] += scale * dz * k[base + s * d + c];
          g.dk[base + s * d + c] += scale * dz * q[base + t * d + c];
          g.dv[base + s * d + c] += p[s] * w[base + t * d + c];
        }
      }
    }
  }
  return g;
}

// Central differences of L = sum(Forward64(q,k,v).out o w).
Grads64 FiniteDifferences(std::vector<double> q, std::vector<double> k, std::vector<double> v,
                          const std::vector<double>& w, const Shape& shape, double scale) {
  auto loss = [&] {
    const Fwd64 f = Forward64(q, k, v, shape, scale);
    double l = 0;
    for (size_t i = 0; i < w.size(); ++i) l += f.out[i] * w[i];
    return l;
  };
  constexpr double kStep = 1e-6;
  Grads64 g;
  std::vector<double>* inputs[3] = {&q, &k, &v};
  std::vector<double>* grads[3] = {&g.dq, &g.dk, &g.dv};
  for (int which = 0; which < 3; ++which) {
    std::vector<double>& x = *inputs[which];
    grads[which]->assign(x.size(), 0.0);
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + kStep;
      const double up = loss();
      x[i] = x0 - kStep;
      const double down = loss();
      x[i] = x0;
      (*grads[which])[i] = (up - down) / (2 * kStep);
    }
  }
  return g;
}

// ---- helpers ----

struct Qkv {
  Tensor q, k, v;
};

Qkv RandomQkv(const Shape& shape, DType dtype, uint64_t seed, double range = 1.0) {
  return {RandomTensor(shape, seed, dtype, -range, range), RandomTensor(shape, seed + 1, dtype, -range, range),
          RandomTensor(shape, seed + 2, dtype, -range, range)};
}

Shape LseShape(const Shape& s) { return {s[0], s[1], s[2]}; }

Tensor NanFilled(const Shape& shape, DType dtype) {
  return Full(shape, std::numeric_limits<double>::quiet_NaN(), {.dtype = dtype});
}

// The unfused path computes in float32 (float64) and rounds once into the
// output dtype; the f64 reference is exact. Tolerances per dtype: f32 sums of
// T <= 130 products in float32; bf16/f16 one rounding of the output (bf16 8
// significant bits, f16 11) on top.
double ForwardTol(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 1e-12;
    case DType::kFloat32: return 5e-6;
    case DType::kBFloat16: return 6e-3;
    default: return 1e-3;
  }
}
// Gradients: sums of up to T terms, and D_i = rowsum(dO o O) reads the
// rounded 16-bit output.
double BackwardTol(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 1e-11;
    case DType::kFloat32: return 2e-5;
    case DType::kBFloat16: return 2e-2;
    default: return 3e-3;
  }
}
// Unfused vs fused on the same inputs: both within the reference tolerance,
// so within twice it of each other (16-bit outputs may round to adjacent values).
double FusedTol(double tol) { return 2 * tol; }

std::string What(const Shape& shape, DType dtype) { return ShapeStr(shape) + " " + Name(dtype); }

// ---- the float64 references themselves ----

TEST(UnfusedAttentionReference, ClosedFormGradientsMatchFiniteDifferences) {
  for (const Shape& shape : {Shape{1, 1, 1, 1}, Shape{2, 1, 4, 1}, Shape{1, 2, 5, 3}}) {
    const Qkv in = RandomQkv(shape, DType::kFloat64, 3);
    const std::vector<double> q = in.q.ToDoubles(), k = in.k.ToDoubles(), v = in.v.ToDoubles();
    const std::vector<double> w = RandomTensor(shape, 9).ToDoubles();
    const double scale = 0.7;
    const Grads64 fd = FiniteDifferences(q, k, v, w, shape, scale);
    const Grads64 cf = Backward64(q, k, v, w, shape, scale);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(fd[i].size(), cf[i].size());
      for (size_t j = 0; j < fd[i].size(); ++j)
        EXPECT_NEAR(cf[i][j], fd[i][j], 1e-8) << ShapeStr(shape) << " grad " << i << " [" << j << "]";
    }
    // The unfused float64 backward against calculus directly.
    Tensor out = Empty(shape, {.dtype = DType::kFloat64}), lse = Empty(LseShape(shape), {.dtype = DType::kFloat64});
    CausalAttentionFwdUnfused(in.q, in.k, in.v, scale, out, lse);
    const Tensor dout = FromVector(w, shape, {.dtype = DType::kFloat64});
    Tensor g[3] = {Empty(shape, {.dtype = DType::kFloat64}), Empty(shape, {.dtype = DType::kFloat64}),
                   Empty(shape, {.dtype = DType::kFloat64})};
    CausalAttentionBwdUnfused(in.q, in.k, in.v, out, dout, lse, scale, g[0], g[1], g[2]);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(AllClose(g[i], fd[i], 1e-7, 1e-8)) << ShapeStr(shape) << " grad " << i;
  }
}

// ---- per dtype ----

class UnfusedAttentionTest : public ::testing::TestWithParam<DType> {};

// T = 1, D = 1, T = 37 with D = 1 and D = 24, T across 64 and a long D.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {{1, 1, 1, 1},   {1, 1, 1, 16}, {2, 3, 37, 1},
                                            {1, 2, 37, 24}, {2, 1, 5, 7},  {1, 1, 70, 80}};
  return shapes;
}

TEST_P(UnfusedAttentionTest, ForwardMatchesF64ReferenceAndFusedKernel) {
  const DType dtype = GetParam();
  const double tol = ForwardTol(dtype);
  const double lse_tol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;  // lse is float32 (float64) for every input dtype
  for (const Shape& shape : Shapes()) {
    const Qkv in = RandomQkv(shape, dtype, 11);
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape[3]));
    const Fwd64 ref = Forward64(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), shape, scale);
    const TensorOptions lse_opts{.dtype = AttentionLseDtype(dtype)};
    Tensor out = NanFilled(shape, dtype), lse = Empty(LseShape(shape), lse_opts);
    CausalAttentionFwdUnfused(in.q, in.k, in.v, scale, out, lse);
    EXPECT_EQ(lse.dtype(), AttentionLseDtype(dtype));
    EXPECT_TRUE(AllClose(out, ref.out, tol, tol)) << What(shape, dtype);
    EXPECT_TRUE(AllClose(lse, ref.lse, lse_tol, lse_tol)) << What(shape, dtype);
    Tensor fused_out = Empty(shape, {.dtype = dtype}), fused_lse = Empty(LseShape(shape), lse_opts);
    causal_attention_fwd(kCPU)(in.q, in.k, in.v, scale, fused_out, fused_lse);
    EXPECT_TRUE(AllClose(out, fused_out, FusedTol(tol), FusedTol(tol))) << What(shape, dtype) << " vs fused";
    EXPECT_TRUE(AllClose(lse, fused_lse, 2 * lse_tol, 2 * lse_tol)) << What(shape, dtype) << " vs fused";
  }
}

TEST_P(UnfusedAttentionTest, BackwardMatchesF64ReferenceAndFusedKernel) {
  const DType dtype = GetParam();
  const double tol = BackwardTol(dtype);
  for (const Shape& shape : Shapes()) {
    const Qkv in = RandomQkv(shape, dtype, 21);
    const Tensor dout = RandomTensor(shape, 24, dtype);
    const double scale = 0.45;
    const Grads64 ref =
        Backward64(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), dout.ToDoubles(), shape, scale);
    // The saved forward: the fused kernel's, as in training (ops/attention.cc);
    // both backward passes read the same out and lse.
    Tensor out = Empty(shape, {.dtype = dtype}), lse = Empty(LseShape(shape), {.dtype = AttentionLseDtype(dtype)});
    causal_attention_fwd(kCPU)(in.q, in.k, in.v, scale, out, lse);
    Tensor fused[3] = {Empty(shape, {.dtype = dtype}), Empty(shape, {.dtype = dtype}), Empty(shape, {.dtype = dtype})};
    causal_attention_bwd(kCPU)(in.q, in.k, in.v, out, dout, lse, scale, fused[0], fused[1], fused[2]);
    for (int wanted = 1; wanted < 8; ++wanted) {  // every non-empty subset of {dq, dk, dv}
      Tensor g[3];
      for (int i = 0; i < 3; ++i)
        if (wanted & (1 << i)) g[i] = NanFilled(shape, dtype);
      CausalAttentionBwdUnfused(in.q, in.k, in.v, out, dout, lse, scale, g[0], g[1], g[2]);
      for (int i = 0; i < 3; ++i) {
        if (!g[i].defined()) continue;
        const std::string what =
            What(shape, dtype) + " grad " + std::to_string(i) + " of subset " + std::to_string(wanted);
        EXPECT_TRUE(AllClose(g[i], ref[i], tol, tol)) << what;
        EXPECT_TRUE(AllClose(g[i], fused[i], FusedTol(tol), FusedTol(tol))) << what << " vs fused";
      }
    }
  }
}

// q/k/v: the slices of one (B,T,3,H,D) buffer viewed as (B,H,T,D) (strides
// (T*3*H*D, D, 3*H*D, 1)); dout: a (B,T,H,D) buffer viewed as (B,H,T,D).
TEST_P(UnfusedAttentionTest, StridedInputsMatchF64Reference) {
  const DType dtype = GetParam();
  const int64_t b = 2, t = 37, h = 3, d = 8;
  const Shape shape{b, h, t, d};
  const Tensor qkv = RandomTensor({b, t, 3, h, d}, 31, dtype).Permute({2, 0, 3, 1, 4});  // (3,B,H,T,D)
  const Tensor q = qkv.Select(0, 0), k = qkv.Select(0, 1), v = qkv.Select(0, 2);
  const Tensor dout = RandomTensor({b, t, h, d}, 32, dtype).Transpose(1, 2);
  ASSERT_FALSE(q.is_contiguous());
  ASSERT_FALSE(dout.is_contiguous());
  const double scale = 0.35;
  const std::vector<double> qd = q.ToDoubles(), kd = k.ToDoubles(), vd = v.ToDoubles();
  const Fwd64 ref = Forward64(qd, kd, vd, shape, scale);
  const Grads64 gref = Backward64(qd, kd, vd, dout.ToDoubles(), shape, scale);
  Tensor out = NanFilled(shape, dtype), lse = Empty({b, h, t}, {.dtype = AttentionLseDtype(dtype)});
  CausalAttentionFwdUnfused(q, k, v, scale, out, lse);
  EXPECT_TRUE(AllClose(out, ref.out, ForwardTol(dtype), ForwardTol(dtype))) << Name(dtype);
  Tensor g[3] = {NanFilled(shape, dtype), NanFilled(shape, dtype), NanFilled(shape, dtype)};
  CausalAttentionBwdUnfused(q, k, v, out, dout, lse, scale, g[0], g[1], g[2]);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(AllClose(g[i], gref[i], BackwardTol(dtype), BackwardTol(dtype))) << Name(dtype) << " grad " << i;
}

// Two runs on the same inputs give the same bits (no atomics, fixed orders).
TEST_P(UnfusedAttentionTest, RepeatedRunsAreBitIdentical) {
  const DType dtype = GetParam();
  const Shape shape{2, 2, 37, 16};
  const Qkv in = RandomQkv(shape, dtype, 41);
  const Tensor dout = RandomTensor(shape, 44, dtype);
  std::vector<double> first;
  for (int run = 0; run < 2; ++run) {
    Tensor out = Empty(shape, {.dtype = dtype}), lse = Empty(LseShape(shape), {.dtype = AttentionLseDtype(dtype)});
    CausalAttentionFwdUnfused(in.q, in.k, in.v, 0.25, out, lse);
    Tensor g[3] = {Empty(shape, {.dtype = dtype}), Empty(shape, {.dtype = dtype}), Empty(shape, {.dtype = dtype})};
    CausalAttentionBwdUnfused(in.q, in.k, in.v, out, dout, lse, 0.25, g[0], g[1], g[2]);
    std::vector<double> all;
    for (const Tensor& t : {out, lse, g[0], g[1], g[2]}) {
      const std::vector<double> x = t.ToDoubles();
      all.insert(all.end(), x.begin(), x.end());
    }
    if (run == 0) {
      first = std::move(all);
    } else {
      ASSERT_EQ(all.size(), first.size());
      for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], first[i]) << Name(dtype) << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnfusedAttentionTest,
                         ::testing::Values(DType::kFloat64, DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(Name(info.param)); });

// ---- numerics and modes ----

// Scores of magnitude ~1000: exp(S) overflows float32 unless the row max is
// subtracted first (forward) and P is exp(S - lse) <= 1 (backward).
TEST(UnfusedAttention, HugeScoresStayFinite) {
  const Shape shape{1, 2, 37, 4};
  const Qkv in = RandomQkv(shape, DType::kFloat32, 51, /*range=*/4.0);
  const double scale = 60.0;
  const std::vector<double> q = in.q.ToDoubles(), k = in.k.ToDoubles(), v = in.v.ToDoubles();
  const Tensor dout = RandomTensor(shape, 54, DType::kFloat32);
  const Fwd64 ref = Forward64(q, k, v, shape, scale);
  double max_lse = 0;
  for (double x : ref.lse) max_lse = std::max(max_lse, std::abs(x));
  ASSERT_GT(max_lse, 300.0) << "the test needs scores past float32's exp range";
  Tensor out = Empty(shape), lse = Empty(LseShape(shape));
  CausalAttentionFwdUnfused(in.q, in.k, in.v, scale, out, lse);
  // Scores carry float32 rounding of ~1e-7 * 4000: out and dv move by ~4e-4.
  EXPECT_TRUE(AllClose(out, ref.out, 2e-3, 2e-3));
  EXPECT_TRUE(AllClose(lse, ref.lse, 1e-6, 1e-4));
  Tensor dv = Empty(shape);
  CausalAttentionBwdUnfused(in.q, in.k, in.v, out, dout, lse, scale, Tensor(), Tensor(), dv);
  const Grads64 g = Backward64(q, k, v, dout.ToDoubles(), shape, scale);
  EXPECT_TRUE(AllClose(dv, g.dv, 3e-3, 3e-3));
}

// Grad mode on, inputs requiring grad: the kernels run their ops without
// recording (NoGradGuard inside) and leave the mode as they found it.
TEST(UnfusedAttention, RecordsNoGraphAndRestoresGradMode) {
  const Shape shape{1, 1, 6, 4};
  Qkv in = RandomQkv(shape, DType::kFloat32, 61);
  in.q.requires_grad_();
  in.k.requires_grad_();
  in.v.requires_grad_();
  ASSERT_TRUE(autograd::GradMode::IsEnabled());
  Tensor out = Empty(shape), lse = Empty(LseShape(shape));
  CausalAttentionFwdUnfused(in.q, in.k, in.v, 0.5, out, lse);
  Tensor dq = Empty(shape);
  CausalAttentionBwdUnfused(in.q, in.k, in.v, out, RandomTensor(shape, 64, DType::kFloat32), lse, 0.5, dq, Tensor(),
                            Tensor());
  EXPECT_TRUE(autograd::GradMode::IsEnabled());
  for (const Tensor& t : {out, lse, dq}) {
    EXPECT_FALSE(t.requires_grad());
    EXPECT_EQ(t.grad_fn(), nullptr);
  }
  const Fwd64 ref = Forward64(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), shape, 0.5);
  EXPECT_TRUE(AllClose(out, ref.out, 5e-6, 5e-6));
}

}  // namespace
}  // namespace octet
