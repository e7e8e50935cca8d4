// CastLinear (NOTE [cast linear] in ops/matmul.h): an f32 master weight used
// by a bf16 Linear without a bf16 copy, on both CPU GEMM paths, packed and
// unpacked B, with and without bias and GELU.
//
// References: the composition Linear(x.To(bf16), w.To(bf16), b.To(bf16))
// for the output, dx and dbias (bit for bit: the fused route must compute on
// the same values), and a float64 GEMM for the weight gradient, which the
// fused route writes from its f32 accumulators: its error is bounded by
// f32 accumulation, (R + 2) * 2^-24 * sum_r |dz_rn| |x_rk|, where the
// composition's carries one more rounding to bf16 (2^-9 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/core/tensor.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>
#include <octet/ops/matmul.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/matmul_testing.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/gemm_path_fixture.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::Bytes;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kF32 = DType::kFloat32;

struct Case {
  int64_t rows;  // 300: B is packed (>= 256 rows); 20: B stays plain
  bool bias;
  bool gelu;
};

class CastLinearTest : public ::octet::testing::ForcedGemmPathTest {
 protected:
  void TearDown() override {
    ForcedGemmPathTest::TearDown();
    SetCastLinearFusionForTesting(std::nullopt);
  }
};

// Leaves: x (rows, K) bf16, w (N, K) f32 with values bf16 cannot hold, b (N) f32.
struct Leaves {
  Tensor x, w, b;
};
Leaves MakeLeaves(const Case& c, int64_t K, int64_t N, uint64_t seed) {
  Leaves l;
  l.x = RandomTensor({c.rows, K}, seed, kBf16);
  l.x.requires_grad_();
  l.w = RandomTensor({N, K}, seed + 1, kF32, -0.3, 0.3);
  l.w.requires_grad_();
  if (c.bias) {
    l.b = RandomTensor({N}, seed + 2, kF32);
    l.b.requires_grad_();
  }
  return l;
}

struct Result {
  Tensor y, dx, dw, db;
};

// y and the gradients of sum(y * g) for one route.
template <typename F>
Result RunRoute(const Leaves& l, const Tensor& g, F&& forward) {
  const Tensor y = forward(l);
  Sum(Mul(y.To(kF32), g)).Backward();
  Result r{y.detach(), l.x.grad(), l.w.grad(), l.b.defined() ? l.b.grad() : Tensor()};
  for (const Tensor* t : {&l.x, &l.w, &l.b})
    if (t->defined()) t->zero_grad();
  return r;
}

Tensor Composition(const Leaves& l, bool gelu) {
  const Tensor b = l.b.defined() ? l.b.To(kBf16) : Tensor();
  return gelu ? LinearGelu(l.x.To(kBf16), l.w.To(kBf16), b) : Linear(l.x.To(kBf16), l.w.To(kBf16), b);
}

// max over (n, k) of |got - ref| / S(n, k), with ref = dzᵀ·x in float64 and
// S = sum_r |dz_rn| |x_rk| (the scale of f32 accumulation error).
double WeightGradError(const Tensor& got, const Tensor& dz, const Tensor& x) {
  const std::vector<double> dzv = dz.Contiguous().ToDoubles(), xv = x.Contiguous().ToDoubles(),
                            gv = got.Contiguous().ToDoubles();
  const int64_t R = x.size(0), K = x.size(1), N = dz.size(1);
  double worst = 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double ref = 0.0, scale = 0.0;
      for (int64_t r = 0; r < R; ++r) {
        ref += dzv[r * N + n] * xv[r * K + k];
        scale += std::abs(dzv[r * N + n] * xv[r * K + k]);
      }
      if (scale > 0.0) worst = std::max(worst, std::abs(gv[n * K + k] - ref) / scale);
    }
  return worst;
}

TEST_P(CastLinearTest, MatchesTheCompositionAndKeepsTheF32WeightGradient) {
  const int64_t K = 70, N = 90;  // edge blocks in K and N
  uint64_t seed = 10;
  for (const Case c : {Case{300, true, false}, Case{300, false, false}, Case{300, true, true}, Case{20, true, false},
                       Case{20, false, true}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + (c.bias ? " bias" : "") + (c.gelu ? " gelu" : ""));
    const Leaves l = MakeLeaves(c, K, N, seed += 10);
    const Tensor g = RandomTensor({c.rows, N}, seed + 5, kF32);
    ASSERT_TRUE(CastLinearFusesFor(l.x, l.w, kBf16));
    const Result fused = RunRoute(l, g, [&](const Leaves& v) { return CastLinear(v.x, v.w, v.b, kBf16, c.gelu); });
    const Result ref = RunRoute(l, g, [&](const Leaves& v) { return Composition(v, c.gelu); });
    ASSERT_EQ(fused.y.dtype(), kBf16);
    EXPECT_EQ(Bytes(fused.y), Bytes(ref.y));
    EXPECT_EQ(Bytes(fused.dx), Bytes(ref.dx));
    if (c.bias) EXPECT_EQ(Bytes(fused.db), Bytes(ref.db));
    ASSERT_EQ(fused.dw.dtype(), kF32);

    // The weight gradient against float64: dz is what reached the GEMM (bf16:
    // the output gradient in y's dtype, through GELU's derivative).
    const Tensor dy = g.To(kBf16);
    Tensor dz = dy;
    if (c.gelu) {
      const Tensor b = l.b.defined() ? l.b.detach().To(kBf16) : Tensor();
      const Tensor pre = Linear(l.x.detach(), l.w.detach().To(kBf16), b);
      dz = BinaryRaw(BinaryOp::kGeluBackward, dy, pre);
    }
    const double fused_err = WeightGradError(fused.dw, dz, l.x.detach());
    const double ref_err = WeightGradError(ref.dw, dz, l.x.detach());
    EXPECT_LE(fused_err, (c.rows + 2) * std::ldexp(1.0, -24)) << "composition: " << ref_err;
    // The composition's bf16 rounding is visible at this scale: the test
    // would notice a fused route that rounded too.
    EXPECT_GT(ref_err, 4 * (c.rows + 2) * std::ldexp(1.0, -24));
  }
}

// Forced off, the route is the composition's, weight gradient included.
TEST_P(CastLinearTest, UnfusedRouteIsTheComposition) {
  SetCastLinearFusionForTesting(false);
  const Case c{300, true, true};
  const Leaves l = MakeLeaves(c, 64, 48, 77);
  ASSERT_FALSE(CastLinearFusesFor(l.x, l.w, kBf16));
  const Tensor g = RandomTensor({c.rows, 48}, 78, kF32);
  const Result unfused = RunRoute(l, g, [&](const Leaves& v) { return CastLinear(v.x, v.w, v.b, kBf16, c.gelu); });
  const Result ref = RunRoute(l, g, [&](const Leaves& v) { return Composition(v, c.gelu); });
  EXPECT_EQ(Bytes(unfused.y), Bytes(ref.y));
  EXPECT_EQ(Bytes(unfused.dx), Bytes(ref.dx));
  EXPECT_EQ(Bytes(unfused.dw), Bytes(ref.dw));
  EXPECT_EQ(Bytes(unfused.db), Bytes(ref.db));
}

INSTANTIATE_TEST_SUITE_P(Paths, CastLinearTest, ::octet::testing::AllGemmPaths(), ::octet::testing::GemmPathName);

// An f32 x is cast like the composition's x.To(bf16), and its gradient comes
// back as f32; other compute dtypes take the composition.
TEST(CastLinear, CastsXAndOtherComputeDtypes) {
  Tensor x = RandomTensor({8, 16}, 1, kF32), w = RandomTensor({4, 16}, 2, kF32);
  x.requires_grad_();
  w.requires_grad_();
  const Tensor y = CastLinear(x, w, Tensor(), kBf16);
  EXPECT_EQ(Bytes(y), Bytes(Linear(x.detach().To(kBf16), w.detach().To(kBf16))));
  Sum(y.To(kF32)).Backward();
  EXPECT_EQ(x.grad().dtype(), kF32);
  EXPECT_EQ(w.grad().dtype(), kF32);
  EXPECT_FALSE(CastLinearFusesFor(x, w, kF32));
  const Tensor x64 = RandomTensor({3, 5}, 3), w64 = RandomTensor({2, 5}, 4);
  EXPECT_TRUE(::octet::testing::AllClose(CastLinear(x64, w64, Tensor(), DType::kFloat64), Linear(x64, w64), 0, 0));
}

// The fused route saves the master weight itself: changing it in place
// before backward is reported, as for any saved tensor.
TEST(CastLinear, WeightChangedBeforeBackwardIsAnError) {
  Tensor x = RandomTensor({300, 32}, 5, kBf16), w = RandomTensor({16, 32}, 6, kF32);
  x.requires_grad_();
  w.requires_grad_();
  const Tensor y = CastLinear(x, w, Tensor(), kBf16);
  {
    NoGradGuard no_grad;
    w.Fill_(0.5);
  }
  EXPECT_NE(ErrorOf([&] { Sum(y.To(kF32)).Backward(); }).find("modified in place"), std::string::npos)
      << ErrorOf([&] { Sum(y.To(kF32)).Backward(); });
}

TEST(CastLinear, BadArgumentsAreNamed) {
  const Tensor x = RandomTensor({4, 8}, 1, kBf16), w = RandomTensor({3, 8}, 2, kF32);
  EXPECT_NE(ErrorOf([&] { CastLinear(x, RandomTensor({3, 7}, 3, kF32), Tensor(), kBf16); })
                .find("cast_linear: the last dim of x (8) does not match weight's in_features (7)"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { CastLinear(x, w, RandomTensor({4}, 4, kF32), kBf16, /*gelu=*/true); })
                .find("cast_linear_gelu: bias must have shape [3]"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { CastLinear(x, w, Tensor(), DType::kFloat8E4M3); })
                .find("cast_linear: compute dtype must be float32, float64, bfloat16 or float16, got fp8_e4m3"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { CastLinear(x, w.To(DType::kFloat8E4M3), Tensor(), kBf16); }).find("cast_linear: weight is"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { CastLinear(Tensor(), w, Tensor(), kBf16); }).find("cast_linear"), std::string::npos);
}

// The CPU GEMM mixes only what CastLinear hands it: a bf16 a with an f32 b
// and/or out; other mixes are refused by name.
TEST(CastLinear, CpuGemmRefusesOtherMixes) {
  const Tensor a = RandomTensor({4, 8}, 1, kF32), b = RandomTensor({8, 3}, 2, kBf16);
  const Tensor out = Empty({4, 3}, {.dtype = kF32});
  EXPECT_NE(ErrorOf([&] { matmul_kernel(kCPU)(a, b, Tensor(), out, Tensor()); })
                .find("matmul: mixed operands a float32, b bfloat16, out float32: the CPU GEMM mixes only a bfloat16 a "
                      "with a float32 b and/or out"),
            std::string::npos);
  const Tensor out16 = Empty({4, 3}, {.dtype = DType::kFloat16});
  EXPECT_NE(ErrorOf([&] { matmul_kernel(kCPU)(a.To(kBf16), b, Tensor(), out16, Tensor()); })
                .find("matmul: mixed operands a bfloat16, b bfloat16, out float16"),
            std::string::npos);
}

}  // namespace
}  // namespace octet
