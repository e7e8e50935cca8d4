// CPU-vs-CUDA parity of the elementwise, reduction, copy/fill and random
// kernels: every CUDA kernel run on the same inputs as the CPU kernel, over
// ops, dtypes and memory layouts (vector path, strided, misaligned). The CPU
// is the reference (its own tests check it against float64 math). Every test
// skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <octet/core/random.h>
#include <octet/ops/functors.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/random.h>
#include <octet/ops/reduce.h>
#include "tests/cuda/parity_util.h"

namespace octet::testing {
namespace {

const DType kFloatDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};
const Layout kLayouts[] = {Layout::kContiguous, Layout::kTransposed, Layout::kSliced, Layout::kMisaligned};

std::string DTypeLayoutName(DType d, Layout l) { return std::string(Name(d)) + "_" + Name(l); }

// Test names of (op, dtype, layout) grids, e.g. "gelu_bfloat16_transposed".
template <typename Op>
std::string OpParamName(const ::testing::TestParamInfo<std::tuple<Op, DType, Layout>>& info) {
  return std::string(Name(std::get<0>(info.param))) + "_" +
         DTypeLayoutName(std::get<1>(info.param), std::get<2>(info.param));
}

std::string CopyParamName(const ::testing::TestParamInfo<std::tuple<DType, DType, Layout>>& info) {
  return std::string(Name(std::get<0>(info.param))) + "_to_" + Name(std::get<1>(info.param)) + "_" +
         Name(std::get<2>(info.param));
}

// Input range on which an op is defined and well conditioned.
std::pair<double, double> UnaryRange(UnaryOp op) {
  switch (op) {
    case UnaryOp::kLog:
    case UnaryOp::kSqrt:
    case UnaryOp::kRsqrt:
    case UnaryOp::kPowScalar: return {0.1, 3.0};
    default: return {-3.0, 3.0};
  }
}

// ---- unary ---------------------------------------------------------------------------

using UnaryParam = std::tuple<UnaryOp, DType, Layout>;
class CudaUnaryParity : public ::testing::TestWithParam<UnaryParam> {};

TEST_P(CudaUnaryParity, MatchesCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto [op, dtype, layout] = GetParam();
  const auto [lo, hi] = UnaryRange(op);
  const Pair x = MakeInput(37, 129, layout, 11, dtype, lo, hi);
  const double alpha = op == UnaryOp::kPowScalar ? 2.5 : -1.5;
  EXPECT_TRUE(Matches(UnaryRaw(op, x.gpu, alpha), UnaryRaw(op, x.cpu, alpha), ParityTol(dtype)));
}

std::vector<UnaryParam> UnaryParams() {
  std::vector<UnaryParam> v;
  for (int op = 0; op < static_cast<int>(UnaryOp::kCount); ++op)
    for (DType d : kFloatDTypes)
      for (Layout l : kLayouts) v.emplace_back(static_cast<UnaryOp>(op), d, l);
  return v;
}
INSTANTIATE_TEST_SUITE_P(AllOps, CudaUnaryParity, ::testing::ValuesIn(UnaryParams()), OpParamName<UnaryOp>);

// ---- binary --------------------------------------------------------------------------

using BinaryParam = std::tuple<BinaryOp, DType, Layout>;
class CudaBinaryParity : public ::testing::TestWithParam<BinaryParam> {};

TEST_P(CudaBinaryParity, MatchesCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto [op, dtype, layout] = GetParam();
  const bool positive_b = op == BinaryOp::kDiv || op == BinaryOp::kPowBackward;
  const Pair a = MakeInput(37, 129, layout, 21, dtype, -3.0, 3.0);
  const Pair b = MakeInput(37, 129, Layout::kContiguous, 22, dtype, positive_b ? 0.2 : -3.0, 3.0);
  const double alpha = 2.5;
  EXPECT_TRUE(Matches(BinaryRaw(op, a.gpu, b.gpu, alpha), BinaryRaw(op, a.cpu, b.cpu, alpha), ParityTol(dtype)));
}

std::vector<BinaryParam> BinaryParams() {
  std::vector<BinaryParam> v;
  for (int op = 0; op < static_cast<int>(BinaryOp::kCount); ++op)
    for (DType d : kFloatDTypes)
      for (Layout l : kLayouts) v.emplace_back(static_cast<BinaryOp>(op), d, l);
  return v;
}
INSTANTIATE_TEST_SUITE_P(AllOps, CudaBinaryParity, ::testing::ValuesIn(BinaryParams()), OpParamName<BinaryOp>);

TEST(CudaPointwiseParity, BroadcastOperands) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType d : kFloatDTypes) {
    const Pair a = Both(RandomTensor({4, 1, 6}, 1, d));
    const Pair b = Both(RandomTensor({5, 1}, 2, d));
    EXPECT_TRUE(Matches(Add(a.gpu, b.gpu), Add(a.cpu, b.cpu), ParityTol(d))) << Name(d);
    EXPECT_TRUE(Matches(Mul(b.gpu, a.gpu), Mul(b.cpu, a.cpu), ParityTol(d))) << Name(d);
    const Pair s = Both(RandomTensor({}, 3, d));  // a 0-d operand
    EXPECT_TRUE(Matches(Sub(a.gpu, s.gpu), Sub(a.cpu, s.cpu), ParityTol(d))) << Name(d);
  }
}

TEST(CudaPointwiseParity, LargeTensorsUseEveryBlockOfTheGrid) {
  OCTET_SKIP_WITHOUT_CUDA();
  const int64_t n = (int64_t{1} << 22) + 5;  // more elements than one grid pass covers
  const Pair x = Both(RandomTensor({n}, 4, DType::kFloat32, -3, 3));
  EXPECT_TRUE(Matches(Gelu(x.gpu), Gelu(x.cpu), ParityTol(DType::kFloat32)));
  const Pair y = Both(RandomTensor({n}, 5, DType::kBFloat16, -3, 3));
  EXPECT_TRUE(Matches(Add(x.gpu.To(DType::kBFloat16), y.gpu), Add(x.cpu.To(DType::kBFloat16), y.cpu),
                      ParityTol(DType::kBFloat16)));
}

TEST(CudaPointwiseParity, EmptyAndScalarTensors) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Pair e = Both(Zeros({0, 3}));
  EXPECT_EQ(Exp(e.gpu).shape(), (Shape{0, 3}));
  const Pair s = Both(Full({}, 0.5));
  EXPECT_TRUE(Matches(Tanh(s.gpu), Tanh(s.cpu), ParityTol(DType::kFloat32)));
}

TEST(CudaPointwiseParity, GradientsThroughAutogradMatch) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor base = RandomTensor({16, 33}, 6, d, -2, 2);
    Tensor xc = base.Clone(), xg = base.To(Gpu());
    xc.requires_grad_();
    xg.requires_grad_();
    const Tensor dy = RandomTensor({16, 33}, 7, d);
    (Gelu(xc) * Sigmoid(xc)).Backward(dy);
    (Gelu(xg) * Sigmoid(xg)).Backward(dy.To(Gpu()));
    EXPECT_TRUE(Matches(xg.grad(), xc.grad(), ParityTol(d))) << Name(d);
  }
}

// ---- compare / where -------------------------------------------------------------------

TEST(CudaCompareParity, EveryOpAndDType) {
  OCTET_SKIP_WITHOUT_CUDA();
  // Values on a coarse grid so that equal pairs occur.
  auto grid_values = [](int64_t n, uint64_t seed) {
    std::vector<double> v = RandomValues(n, seed, -3, 3);
    for (double& x : v) x = std::round(x);
    return v;
  };
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64,
                  DType::kUInt8, DType::kBool}) {
    const bool unsigned_type = d == DType::kUInt8 || d == DType::kBool;
    std::vector<double> va = grid_values(7 * 9, 1), vb = grid_values(9, 2);
    if (unsigned_type)
      for (auto* v : {&va, &vb})
        for (double& x : *v) x = std::abs(x);
    const Pair a = Both(FromVector(va, {7, 9}, {.dtype = d}));
    const Pair b = Both(FromVector(vb, {9}, {.dtype = d}));  // broadcast
    for (int op = 0; op < static_cast<int>(CompareOp::kCount); ++op) {
      const CompareOp c = static_cast<CompareOp>(op);
      EXPECT_TRUE(Identical(Compare(c, a.gpu, b.gpu), Compare(c, a.cpu, b.cpu))) << Name(c) << " " << Name(d);
      EXPECT_TRUE(Identical(Compare(c, a.gpu.T(), a.gpu.T()), Compare(c, a.cpu.T(), a.cpu.T())));
    }
  }
}

TEST(CudaWhereParity, BroadcastConditionAndStridedOperands) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType d : kFloatDTypes) {
    const Pair a = MakeInput(12, 10, Layout::kTransposed, 1, d);
    const Pair b = MakeInput(12, 10, Layout::kSliced, 2, d);
    const Pair x = Both(RandomTensor({10}, 3, DType::kFloat32));
    const Pair cond = {Gt(x.cpu, Zeros({10})), Gt(x.gpu, Zeros({10}, {.device = Gpu()}))};
    EXPECT_TRUE(Identical(Where(cond.gpu, a.gpu, b.gpu), Where(cond.cpu, a.cpu, b.cpu))) << Name(d);
  }
}

// ---- reductions --------------------------------------------------------------------------

struct ReduceCase {
  Shape shape;
  Shape dims;
  bool transposed;  // reduce a transposed view of the input
};

class CudaReduceParity : public ::testing::TestWithParam<std::tuple<ReduceCase, DType>> {};

TEST_P(CudaReduceParity, SumMeanMaxMinAbsMaxMatchCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto [rc, d] = GetParam();
  const Tensor base = RandomTensor(rc.shape, 9, d, -2, 2);
  Pair x = Both(base);
  if (rc.transposed) x = {x.cpu.Transpose(0, -1), x.gpu.Transpose(0, -1)};
  int64_t reduced = 1;
  if (rc.dims.empty()) reduced = x.cpu.numel();
  for (int64_t dim : rc.dims) reduced *= x.cpu.shape()[dim < 0 ? dim + x.cpu.dim() : dim];
  EXPECT_TRUE(Matches(Sum(x.gpu, rc.dims), Sum(x.cpu, rc.dims), SumTol(d, reduced)));
  EXPECT_TRUE(Matches(Mean(x.gpu, rc.dims, true), Mean(x.cpu, rc.dims, true), SumTol(d, reduced)));
  // Extremes involve no rounding: bitwise equal.
  EXPECT_TRUE(Identical(Max(x.gpu, rc.dims), Max(x.cpu, rc.dims)));
  EXPECT_TRUE(Identical(Min(x.gpu, rc.dims), Min(x.cpu, rc.dims)));
  EXPECT_TRUE(Identical(AbsMax(x.gpu, rc.dims), AbsMax(x.cpu, rc.dims)));
}

const ReduceCase kReduceCases[] = {
    {{3, 4, 5}, {}, false},             // everything
    {{3, 4, 5}, {-1}, false},           // rows, warp per row
    {{3, 4, 5}, {0}, false},            // columns
    {{3, 4, 5}, {1}, false},            // middle: (outer, r, inner)
    {{3, 4, 5}, {0, 2}, false},         // scattered: permuted copy first
    {{2, 1, 7}, {1}, false},            // a reduced dim of size 1
    {{6, 5}, {1}, true},                // non-contiguous input
    {{64, 4096}, {-1}, false},          // long rows: block per row
    {{2, 300000}, {-1}, false},         // few long rows: split into partials
    {{4096, 96}, {0}, false},           // tall columns: split into partials
    {{8, 64, 768}, {0, 1}, false},      // a bias gradient
    {{1 << 20}, {}, false},             // one huge reduction
};

INSTANTIATE_TEST_SUITE_P(Cases, CudaReduceParity,
                         ::testing::Combine(::testing::ValuesIn(kReduceCases), ::testing::ValuesIn(kFloatDTypes)));

TEST(CudaReduceEdgeParity, NanPropagatesThroughMaxMinAndAbsMax) {
  OCTET_SKIP_WITHOUT_CUDA();
  std::vector<double> v = RandomValues(5000, 1, -1, 1);
  v[4321] = NAN;
  for (DType d : kFloatDTypes) {
    const Pair x = Both(FromVector(v, {5, 1000}, {.dtype = d}));
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0}}) {
      EXPECT_TRUE(Identical(Max(x.gpu, dims), Max(x.cpu, dims))) << Name(d);
      EXPECT_TRUE(Identical(Min(x.gpu, dims), Min(x.cpu, dims))) << Name(d);
      EXPECT_TRUE(Identical(AbsMax(x.gpu, dims), AbsMax(x.cpu, dims))) << Name(d);
    }
  }
}

TEST(CudaReduceEdgeParity, ArgMaxFindsTheFirstMaximumOrNan) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (int64_t n : {7, 600, 5000}) {
    std::vector<double> v = RandomValues(6 * n, 2, -3, 3);
    for (double& x : v) x = std::round(x);  // many ties
    v[n + n / 2] = NAN;                     // row 1 has a NaN
    for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32,
                    DType::kInt64}) {
      std::vector<double> w = v;
      if (!IsFloat(d)) w[n + n / 2] = 0;
      const Pair x = Both(FromVector(w, {6, n}, {.dtype = d}));
      EXPECT_TRUE(Identical(ArgMax(x.gpu, 1), ArgMax(x.cpu, 1))) << Name(d) << " n=" << n;
      EXPECT_TRUE(Identical(ArgMax(x.gpu, 0), ArgMax(x.cpu, 0))) << Name(d) << " n=" << n;
    }
  }
}

// ---- copy / fill --------------------------------------------------------------------------

const DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64,    DType::kBFloat16, DType::kFloat16,
                            DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt32,    DType::kInt64,
                            DType::kUInt8,   DType::kBool};

class CudaCopyParity : public ::testing::TestWithParam<std::tuple<DType, DType, Layout>> {};

TEST_P(CudaCopyParity, ConvertsBitIdenticallyToTheCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto [from, to, layout] = GetParam();
  // Values every pair converts without undefined behaviour (no negative
  // float -> uint8); fp8 rounding and f16/bf16 rounding are exercised.
  const double lo = (to == DType::kUInt8 || from == DType::kUInt8) ? 0.0 : -120.0;
  const Pair src = MakeInput(19, 35, layout, 5, from, lo, 120.0);
  Tensor dst_cpu = Empty({19, 35}, {.dtype = to});
  Tensor dst_gpu = Empty({19, 35}, {.dtype = to, .device = Gpu()});
  dst_cpu.CopyFrom_(src.cpu);
  dst_gpu.CopyFrom_(src.gpu);
  EXPECT_TRUE(Identical(dst_gpu, dst_cpu));
  // Into a strided destination too.
  Tensor tcpu = Empty({35, 19}, {.dtype = to}), tgpu = Empty({35, 19}, {.dtype = to, .device = Gpu()});
  tcpu.T().CopyFrom_(src.cpu);
  tgpu.T().CopyFrom_(src.gpu);
  EXPECT_TRUE(Identical(tgpu, tcpu));
}

INSTANTIATE_TEST_SUITE_P(AllPairs, CudaCopyParity,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(Layout::kContiguous, Layout::kTransposed,
                                                              Layout::kMisaligned)),
                         CopyParamName);

TEST(CudaCopyParity, Fp8ConversionsSaturateLikeTheCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  std::vector<double> v = RandomValues(4099, 3, -70000, 70000);
  v[0] = 464.0;  // e4m3 tie: rounds to 448
  v[1] = 1e-3;   // subnormal territory
  v[2] = INFINITY;
  const Pair x = Both(FromVector(v, {4099}));
  for (DType d : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    Tensor c = Empty({4099}, {.dtype = d}), g = Empty({4099}, {.dtype = d, .device = Gpu()});
    c.CopyFrom_(x.cpu);
    g.CopyFrom_(x.gpu);
    EXPECT_TRUE(Identical(g, c)) << Name(d);
  }
}

TEST(CudaFillParity, EveryDTypeContiguousAndStrided) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType d : kAllDTypes) {
    for (double value : {3.5, -2.0, 1e30}) {
      if (!IsFloat(d) && (value < 0 || value > 100)) continue;
      Tensor c = Zeros({13, 17}, {.dtype = d}), g = Zeros({13, 17}, {.dtype = d, .device = Gpu()});
      c.Fill_(value);
      g.Fill_(value);
      EXPECT_TRUE(Identical(g, c)) << Name(d) << " " << value;
      c.T().Narrow(0, 2, 5).Fill_(1.0);
      g.T().Narrow(0, 2, 5).Fill_(1.0);
      EXPECT_TRUE(Identical(g, c)) << Name(d) << " strided";
    }
  }
}

// ---- random / dropout ------------------------------------------------------------------

TEST(CudaRandomParity, UniformAndIntegersAreBitIdentical) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (int64_t n : {1, 7, 4096, 100003}) {
    for (DType d : kFloatDTypes) {
      Generator gc(1234), gg(1234);
      EXPECT_TRUE(Identical(Rand({n}, -2, 5, {.dtype = d, .device = Gpu()}, &gg), Rand({n}, -2, 5, {.dtype = d}, &gc)))
          << Name(d) << " n=" << n;
      EXPECT_EQ(gc.offset(), gg.offset());
    }
    for (DType d : {DType::kInt32, DType::kInt64, DType::kUInt8}) {
      Generator gc(77), gg(77);
      EXPECT_TRUE(Identical(RandInt({n}, 0, 200, {.dtype = d, .device = Gpu()}, &gg),
                            RandInt({n}, 0, 200, {.dtype = d}, &gc)))
          << Name(d);
    }
  }
}

TEST(CudaRandomParity, NormalMatchesToTheLastBitsOfDoubleMath) {
  OCTET_SKIP_WITHOUT_CUDA();
  // See NOTE [cuda random parity]: log1p/sqrt/sincos may differ in the last
  // bits between glibc and CUDA.
  for (DType d : kFloatDTypes) {
    Generator gc(99), gg(99);
    EXPECT_TRUE(Matches(Randn({100001}, 0.5, 2.0, {.dtype = d, .device = Gpu()}, &gg),
                        Randn({100001}, 0.5, 2.0, {.dtype = d}, &gc), ParityTol(d)))
        << Name(d);
  }
}

TEST(CudaRandomParity, DropoutMaskAndGradientAreBitIdentical) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (DType d : kFloatDTypes) {
    for (Layout layout : {Layout::kContiguous, Layout::kMisaligned}) {
      const Pair x = MakeInput(31, 33, layout, 8, d);
      // detach() keeps the view (and its misaligned start) as a leaf.
      Tensor xc = x.cpu.detach(), xg = x.gpu.detach();
      xc.requires_grad_();
      xg.requires_grad_();
      Generator gc(5), gg(5);
      const Tensor yc = Dropout(xc, 0.3, true, &gc), yg = Dropout(xg, 0.3, true, &gg);
      EXPECT_TRUE(Identical(yg, yc)) << Name(d) << " " << Name(layout);
      const Tensor dy = RandomTensor({31, 33}, 9, d);
      yc.Backward(dy);
      yg.Backward(dy.To(Gpu()));
      EXPECT_TRUE(Identical(xg.grad(), xc.grad())) << Name(d);
    }
  }
}

}  // namespace
}  // namespace octet::testing
