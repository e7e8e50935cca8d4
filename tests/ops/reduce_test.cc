// Reductions: values against float64 references over every dim combination,
// keepdim, non-contiguous inputs, tie handling, gradcheck, errors.
#include <gtest/gtest.h>

#include <cmath>

#include <octet/autograd/gradcheck.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

enum class Kind { kSum, kMean, kMax, kMin, kAbsMax };

// f64 reference over a [2,3,4] tensor reducing the dims whose bit is set in mask.
std::vector<double> Reference(const std::vector<double>& x, const Shape& shape, int mask, Kind kind) {
  Shape kept = shape;
  for (int d = 0; d < 3; ++d)
    if (mask & (1 << d)) kept[d] = 1;
  std::vector<double> acc(Numel(kept), kind == Kind::kMax   ? -INFINITY
                                       : kind == Kind::kMin ? INFINITY
                                                            : 0.0);
  std::vector<int> count(acc.size(), 0);
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < shape[1]; ++j)
      for (int64_t k = 0; k < shape[2]; ++k) {
        const double v = x[(i * shape[1] + j) * shape[2] + k];
        const int64_t o = ((kept[0] == 1 ? 0 : i) * kept[1] + (kept[1] == 1 ? 0 : j)) * kept[2] + (kept[2] == 1 ? 0 : k);
        double& a = acc[o];
        switch (kind) {
          case Kind::kSum:
          case Kind::kMean: a += v; break;
          case Kind::kMax: a = std::max(a, v); break;
          case Kind::kMin: a = std::min(a, v); break;
          case Kind::kAbsMax: a = std::max(a, std::abs(v)); break;
        }
        count[o]++;
      }
  if (kind == Kind::kMean)
    for (size_t i = 0; i < acc.size(); ++i) acc[i] /= count[i];
  return acc;
}

Tensor Reduce(Kind kind, const Tensor& x, const Shape& dims, bool keepdim) {
  switch (kind) {
    case Kind::kSum: return Sum(x, dims, keepdim);
    case Kind::kMean: return Mean(x, dims, keepdim);
    case Kind::kMax: return Max(x, dims, keepdim);
    case Kind::kMin: return Min(x, dims, keepdim);
    case Kind::kAbsMax: return AbsMax(x, dims, keepdim);
  }
  return {};
}

std::string KindName(Kind k) {
  static const char* const kNames[] = {"sum", "mean", "max", "min", "absmax"};
  return kNames[static_cast<int>(k)];
}

class ReduceTest : public ::testing::TestWithParam<Kind> {};

TEST_P(ReduceTest, EveryDimCombinationMatchesReference) {
  const Kind kind = GetParam();
  const Shape shape{2, 3, 4};
  for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
    Tensor x = RandomTensor(shape, 3, dtype, -2, 2);
    const std::vector<double> xv = x.ToDoubles();
    for (int mask = 1; mask < 8; ++mask) {
      Shape dims;
      for (int d = 0; d < 3; ++d)
        if (mask & (1 << d)) dims.push_back(d == 2 ? -1 : d);  // a negative dim too
      const double tol = dtype == DType::kBFloat16 ? 2e-2 : dtype == DType::kFloat32 ? 1e-6 : 1e-14;
      Tensor y = Reduce(kind, x, dims, /*keepdim=*/true);
      EXPECT_TRUE(AllClose(y, Reference(xv, shape, mask, kind), tol, tol)) << "mask " << mask << " " << Name(dtype);
      Tensor yn = Reduce(kind, x, dims, /*keepdim=*/false);
      EXPECT_EQ(yn.numel(), y.numel());
      EXPECT_EQ(yn.dim(), 3 - static_cast<int64_t>(dims.size()));
      // Same result from a permuted (non-contiguous) view of the same data.
      Tensor xp = x.Permute({2, 0, 1});
      Shape pdims;
      for (int64_t d : dims) pdims.push_back(d == -1 ? 0 : d + 1);
      Tensor yp = Reduce(kind, xp, pdims, true).Permute({1, 2, 0});  // back to the original dim order
      EXPECT_TRUE(AllClose(yp, y, tol, tol)) << "permuted mask " << mask;
    }
  }
}

TEST_P(ReduceTest, PassesGradcheck) {
  const Kind kind = GetParam();
  Tensor x = RandomTensor({3, 4, 5}, 9, DType::kFloat64, -2, 2).requires_grad_();
  for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, 2}, Shape{-1}}) {
    GradcheckResult r = Gradcheck([&](const TensorList& in) { return Reduce(kind, in[0], dims, false); }, {x});
    EXPECT_TRUE(r.ok) << ShapeStr(dims) << ": " << r.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceTest,
                         ::testing::Values(Kind::kSum, Kind::kMean, Kind::kMax, Kind::kMin, Kind::kAbsMax),
                         [](const auto& info) { return KindName(info.param); });

TEST(Reduce, LargeColumnSumUsesFloat32AccumulationAccurately) {
  // [4096, 300] -> [300]: the bias-gradient shape.
  Tensor x = RandomTensor({4096, 300}, 4, DType::kFloat32, 0, 1);
  Tensor s = Sum(x, {0});
  std::vector<double> ref(300, 0.0);
  const std::vector<double> xv = x.ToDoubles();
  for (int64_t i = 0; i < 4096; ++i)
    for (int64_t j = 0; j < 300; ++j) ref[j] += xv[i * 300 + j];
  EXPECT_TRUE(AllClose(s, ref, 1e-5, 0));
}

TEST(Reduce, MaxSplitsGradientBetweenTies) {
  Tensor x = FromVector(std::vector<double>{1, 3, 3, 2}, {4}, {.dtype = DType::kFloat64, .requires_grad = true});
  Max(x).Backward();
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{0, 0.5, 0.5, 0}, 0, 0));
}

TEST(Reduce, ArgMaxFindsFirstMaximum) {
  Tensor x = FromVector(std::vector<double>{1, 7, 7, 2, 9, 0}, {2, 3});
  EXPECT_TRUE(AllClose(ArgMax(x, 1), std::vector<double>{1, 1}, 0, 0));
  EXPECT_TRUE(AllClose(ArgMax(x, 0), std::vector<double>{1, 1, 0}, 0, 0));
  EXPECT_EQ(ArgMax(x, -1, true).shape(), (Shape{2, 1}));
}

TEST(Reduce, ArgMaxOfIntegerAndNarrowFloatInputs) {
  const std::vector<double> v = {1, 7, 7, 2, 9, 0};
  for (DType dt : {DType::kInt64, DType::kInt32, DType::kBFloat16, DType::kFloat16}) {
    const Tensor x = FromVector(v, {2, 3}, {.dtype = dt});
    EXPECT_EQ(ArgMax(x, 1).ToDoubles(), (std::vector<double>{1, 1})) << Name(dt);
    EXPECT_EQ(ArgMax(x, 0).ToDoubles(), (std::vector<double>{1, 1, 0})) << Name(dt);
  }
}

TEST(Reduce, SumToShapeUndoesBroadcast) {
  Tensor g = Ones({2, 3, 4});
  EXPECT_TRUE(AllClose(SumToShape(g, {3, 1}), std::vector<double>{8, 8, 8}, 0, 0));
  EXPECT_TRUE(AllClose(SumToShape(g, {4}), std::vector<double>{6, 6, 6, 6}, 0, 0));
}

TEST(Reduce, BadInputsNameTheProblem) {
  Tensor x = Zeros({2, 3});
  EXPECT_NE(ErrorOf([&] { Sum(x, {2}); }).find("sum: dim 2 is out of range for a tensor of rank 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { Max(Zeros({0})); }).find("max: cannot reduce an empty tensor"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Sum(x.To(DType::kFloat8E5M2)); }).find("sum: argument 'x' is fp8_e5m2[2, 3]"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { Mean(x, {0, 0}); }).find("mean: dim 0 given twice"), std::string::npos);
}

}  // namespace
}  // namespace octet
