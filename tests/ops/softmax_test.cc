// Softmax, LogSoftmax and CrossEntropy: values against float64 references
// written here, gradcheck, softmax along non-last dims, non-contiguous inputs,
// ignore_index and the reductions, and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <octet/autograd/gradcheck.h>
#include <octet/autograd/grad_mode.h>
#include <octet/core/convert_testing.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/ops/softmax.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::octet::testing::RandomValues;

// Tolerances per dtype, stated once: (rtol, atol) against f64 references run
// on the values stored in the input dtype. Softmax outputs are in [0, 1];
// log-softmax outputs and losses are O(1..10). bf16/f16 outputs carry one
// rounding of the result; f32 carries ExpFast's ~2 ulp (NOTE [fast exp]).
struct Tol {
  double rtol, atol;
};
Tol TolFor(DType d) {
  switch (d) {
    case DType::kFloat64: return {1e-12, 1e-14};
    case DType::kFloat32: return {1e-5, 1e-6};
    case DType::kBFloat16: return {8e-3, 1e-4};
    case DType::kFloat16: return {1e-3, 1e-5};
    default: return {0, 0};
  }
}

// f64 reference softmax / log-softmax of x (shape) along dim.
std::vector<double> RefSoftmax(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
  const int64_t n = shape[dim];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return o * n * inner + k * inner + j; };
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) y[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  return y;
}

constexpr int64_t kIgnore = -100;

// Per-row f64 cross-entropy losses (0 where ignored) and dlogits for dloss_i.
struct CeRef {
  std::vector<double> loss, dlogits;
  int64_t count = 0;
};
CeRef RefCrossEntropy(const std::vector<double>& logits, const std::vector<int64_t>& t, int64_t v,
                      int64_t ignore_index, const std::vector<double>& dloss) {
  const int64_t n = static_cast<int64_t>(t.size());
  CeRef r{std::vector<double>(n, 0.0), std::vector<double>(n * v, 0.0)};
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index) continue;
    ++r.count;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < v; ++j) m = std::max(m, logits[i * v + j]);
    for (int64_t j = 0; j < v; ++j) s += std::exp(logits[i * v + j] - m);
    const double lse = m + std::log(s);
    r.loss[i] = lse - logits[i * v + t[i]];
    for (int64_t j = 0; j < v; ++j)
      r.dlogits[i * v + j] = (std::exp(logits[i * v + j] - lse) - (j == t[i] ? 1.0 : 0.0)) * dloss[i];
  }
  return r;
}

// ---- softmax values ----------------------------------------------------------

class SoftmaxValueTest : public ::testing::TestWithParam<std::tuple<DType, int, bool>> {};

TEST_P(SoftmaxValueTest, MatchesFloat64ReferenceAlongEveryDim) {
  const auto [dtype, dim, log] = GetParam();
  const Shape shape{3, 70, 5};
  const Tensor x = RandomTensor(shape, 1, dtype, -4, 4);
  const Tensor y = log ? LogSoftmax(x, dim) : Softmax(x, dim);
  ASSERT_EQ(y.dtype(), dtype);
  ASSERT_EQ(y.shape(), shape);
  const int64_t d = dim < 0 ? dim + 3 : dim;
  const Tol t = TolFor(dtype);
  EXPECT_TRUE(AllClose(y, RefSoftmax(x.ToDoubles(), shape, d, log), t.rtol, t.atol));
  // Backward against the closed forms, with dy in the same dtype.
  const Tensor xg = x.detach().requires_grad_();
  const Tensor dy = RandomTensor(shape, 2, dtype);
  (log ? LogSoftmax(xg, dim) : Softmax(xg, dim)).Backward(dy);
  const std::vector<double> yr = RefSoftmax(x.ToDoubles(), shape, d, false), g = dy.ToDoubles();
  // sum over the softmax dim of dy (log) or dy * y (softmax), per (outer, inner).
  std::vector<double> expected(yr.size());
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shape[k];
  for (int64_t k = d + 1; k < 3; ++k) inner *= shape[k];
  const int64_t n = shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = o * n * inner + k * inner + j;
        s += log ? g[i] : g[i] * yr[i];
      }
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = o * n * inner + k * inner + j;
        expected[i] = log ? g[i] - yr[i] * s : yr[i] * (g[i] - s);
      }
    }
  double scale = 0;
  for (double e : expected) scale = std::max(scale, std::abs(e));
  EXPECT_TRUE(AllClose(xg.grad(), expected, t.rtol, 4 * t.rtol * scale + t.atol)) << "dx";
}

INSTANTIATE_TEST_SUITE_P(Softmax, SoftmaxValueTest,
                         ::testing::Combine(::testing::Values(DType::kFloat64, DType::kFloat32, DType::kBFloat16,
                                                              DType::kFloat16),
                                            ::testing::Values(-1, 0, 1), ::testing::Bool()),
                         [](const auto& info) {
                           const int dim = std::get<1>(info.param);
                           return std::string(Name(std::get<0>(info.param))) + "_dim" +
                                  (dim < 0 ? "last" : std::to_string(dim)) +
                                  (std::get<2>(info.param) ? "_log" : "");
                         });

TEST(Softmax, IsStableForLargeInputs) {
  const Tensor x = FromVector(std::vector<double>{1000, 1000, -1000, 3e4, 3e4 - std::log(3.0), -3e4}, {2, 3},
                              {.dtype = DType::kFloat32});
  EXPECT_TRUE(AllClose(Softmax(x), std::vector<double>{0.5, 0.5, 0, 0.75, 0.25, 0}, 1e-3, 1e-6));
  EXPECT_TRUE(AllClose(Softmax(x, 0), std::vector<double>{0, 0, 1, 1, 1, 0}, 0, 1e-6));
  const Tensor ls = LogSoftmax(x);
  EXPECT_NEAR(ls.At({0, 0}), -std::log(2.0), 1e-6);
  EXPECT_NEAR(ls.At({0, 2}), -2000 - std::log(2.0), 1e-3);
}

TEST(Softmax, NonContiguousInputGivesTheContiguousResult) {
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor base = RandomTensor({33, 6}, 3, d, -3, 3);
    const Tensor xt = base.T();  // (6, 33), not contiguous
    EXPECT_TRUE(AllClose(Softmax(xt), Softmax(xt.Contiguous()), 0, 0)) << Name(d);
    EXPECT_TRUE(AllClose(LogSoftmax(xt, 0), LogSoftmax(xt.Contiguous(), 0), 0, 0)) << Name(d);
    const Tensor xs = base.Slice(0, 1, 33, 3);  // (11, 6), rows stride 18
    EXPECT_TRUE(AllClose(Softmax(xs), Softmax(xs.Contiguous()), 0, 0)) << Name(d);
  }
}

TEST(Softmax, LargeInputsSplitAcrossThreadsMatchReference) {
  // Above the parallel grain on both paths.
  for (const auto& [shape, dim] : {std::pair<Shape, int64_t>{{64, 1024}, 1}, {{8, 300, 40}, 1}}) {
    const Tensor x = RandomTensor(shape, 20, DType::kFloat32, -8, 8);
    const Tol t = TolFor(DType::kFloat32);
    EXPECT_TRUE(AllClose(Softmax(x, dim), RefSoftmax(x.ToDoubles(), shape, dim, false), t.rtol, t.atol))
        << ShapeStr(shape);
    EXPECT_TRUE(AllClose(LogSoftmax(x, dim), RefSoftmax(x.ToDoubles(), shape, dim, true), t.rtol, t.atol))
        << ShapeStr(shape);
  }
  const int64_t n = 96, v = 1000;
  const Tensor logits = RandomTensor({n, v}, 21, DType::kFloat32, -8, 8);
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = (i * 37) % v;
  const CeRef ref = RefCrossEntropy(logits.ToDoubles(), t, v, kIgnore, std::vector<double>(n, 1.0));
  EXPECT_TRUE(AllClose(CrossEntropy(logits, FromVector(t, {n}), kIgnore, Reduction::kNone), ref.loss, 1e-5, 1e-6));
}

TEST(Softmax, NanInARowGivesNanForThatRowOnly) {
  const Tensor x = FromVector(std::vector<double>{1, NAN, 2, 1, 2, 3}, {2, 3}, {.dtype = DType::kFloat32});
  const std::vector<double> y = Softmax(x).ToDoubles();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  EXPECT_NEAR(y[5], std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-6);
  EXPECT_TRUE(std::isnan(Softmax(x, 0).ToDoubles()[1]));
  EXPECT_FALSE(std::isnan(Softmax(x, 0).ToDoubles()[0]));
}

TEST(Softmax, RankZeroIsOne) {
  EXPECT_EQ(Softmax(Scalar(3.5)).Item(), 1.0);
  EXPECT_EQ(LogSoftmax(Scalar(3.5)).Item(), 0.0);
}

TEST(SoftmaxGrad, PassesGradcheckAlongLastAndMiddleDims) {
  Tensor x = RandomTensor({3, 4, 5}, 4, DType::kFloat64, -2, 2).requires_grad_();
  for (int dim : {-1, 1, 0}) {
    GradcheckResult r = Gradcheck([dim](const TensorList& in) { return Softmax(in[0], dim); }, {x});
    EXPECT_TRUE(r.ok) << "softmax dim " << dim << ": " << r.message;
    r = Gradcheck([dim](const TensorList& in) { return LogSoftmax(in[0], dim); }, {x});
    EXPECT_TRUE(r.ok) << "log_softmax dim " << dim << ": " << r.message;
  }
  Tensor xt = RandomTensor({5, 3}, 5, DType::kFloat64, -2, 2).requires_grad_();
  GradcheckResult r = Gradcheck([](const TensorList& in) { return Softmax(in[0].T()); }, {xt});
  EXPECT_TRUE(r.ok) << "transposed: " << r.message;
}

TEST(SoftmaxErrors, BadArgumentsNameTheOp) {
  const Tensor x = RandomTensor({2, 3}, 6, DType::kFloat32);
  std::string e = ErrorOf([&] { Softmax(x, 2); });
  EXPECT_NE(e.find("softmax"), std::string::npos) << e;
  EXPECT_NE(e.find("2"), std::string::npos) << e;
  e = ErrorOf([&] { LogSoftmax(x.To(DType::kFloat8E4M3)); });
  EXPECT_NE(e.find("log_softmax: argument 'x' is fp8_e4m3[2, 3]"), std::string::npos) << e;
  EXPECT_NE(e.find("FP8 inputs are rejected"), std::string::npos) << e;
  e = ErrorOf([&] { Softmax(Zeros({2, 3}, {.dtype = DType::kInt64})); });
  EXPECT_NE(e.find("softmax: argument 'x' is int64[2, 3]"), std::string::npos) << e;
}

// ---- cross-entropy ---------------------------------------------------------

const char* RedName(Reduction r) {
  switch (r) {
    case Reduction::kNone: return "none";
    case Reduction::kMean: return "mean";
    case Reduction::kSum: return "sum";
  }
  return "?";
}

class CrossEntropyValueTest : public ::testing::TestWithParam<std::tuple<DType, DType, Reduction>> {};

TEST_P(CrossEntropyValueTest, LossAndGradientMatchFloat64Reference) {
  const auto [dtype, tdtype, reduction] = GetParam();
  const int64_t n = 9, v = 37;
  const Tensor logits = RandomTensor({n, v}, 7, dtype, -5, 5);
  const std::vector<int64_t> t = {3, 0, kIgnore, 36, 5, 5, kIgnore, 17, 1};
  const Tensor targets = tdtype == DType::kInt64 ? FromVector(t, {n})
                                                 : FromVector(std::vector<int32_t>(t.begin(), t.end()), {n});
  Tensor x = logits.detach().requires_grad_();
  const Tensor loss = CrossEntropy(x, targets, kIgnore, reduction);
  const DType acc = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  EXPECT_EQ(loss.dtype(), acc);
  // Upstream gradient: random per row for kNone, 1.7 for the reductions.
  std::vector<double> dloss(n, 1.7);
  Tensor seed = Full({}, 1.7, {.dtype = acc});
  if (reduction == Reduction::kNone) {
    dloss = RandomValues(n, 8, 0.5, 2.0);
    seed = FromVector(dloss, {n}, {.dtype = acc});
  }
  CeRef ref = RefCrossEntropy(logits.ToDoubles(), t, v, kIgnore, dloss);
  ASSERT_EQ(ref.count, 7);
  const Tol tol = TolFor(dtype);
  // The loss is computed in f32/f64 from the stored logits: f32 accuracy for
  // every float type but f64.
  const double lrtol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
  if (reduction == Reduction::kNone) {
    EXPECT_EQ(loss.shape(), (Shape{n}));
    EXPECT_TRUE(AllClose(loss, ref.loss, lrtol, lrtol));
  } else {
    EXPECT_EQ(loss.shape(), Shape{});
    double s = 0;
    for (double l : ref.loss) s += l;
    EXPECT_NEAR(loss.Item(), reduction == Reduction::kMean ? s / ref.count : s, lrtol * std::abs(s));
    if (reduction == Reduction::kMean)
      for (double& g : ref.dlogits) g /= ref.count;
  }
  loss.Backward(seed);
  EXPECT_EQ(x.grad().dtype(), dtype);
  EXPECT_TRUE(AllClose(x.grad(), ref.dlogits, tol.rtol, tol.rtol * 0.05)) << "dlogits";
}

INSTANTIATE_TEST_SUITE_P(CrossEntropy, CrossEntropyValueTest,
                         ::testing::Combine(::testing::Values(DType::kFloat64, DType::kFloat32, DType::kBFloat16,
                                                              DType::kFloat16),
                                            ::testing::Values(DType::kInt64, DType::kInt32),
                                            ::testing::Values(Reduction::kNone, Reduction::kMean, Reduction::kSum)),
                         [](const auto& info) {
                           return std::string(Name(std::get<0>(info.param))) + "_" +
                                  Name(std::get<1>(info.param)) + "_" +
                                  RedName(std::get<2>(info.param));
                         });

TEST(CrossEntropyGrad, PassesGradcheckForEveryReduction) {
  Tensor x = RandomTensor({6, 7}, 9, DType::kFloat64, -3, 3).requires_grad_();
  const Tensor t = FromVector(std::vector<int64_t>{2, kIgnore, 6, 0, 2, 4}, {6});
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    GradcheckResult r =
        Gradcheck([&](const TensorList& in) { return CrossEntropy(in[0], t, kIgnore, red); }, {x});
    EXPECT_TRUE(r.ok) << "reduction " << static_cast<int>(red) << ": " << r.message;
  }
  // Non-contiguous logits and a custom ignore_index.
  Tensor xt = RandomTensor({7, 6}, 10, DType::kFloat64, -3, 3).requires_grad_();
  const Tensor t32 = FromVector(std::vector<int32_t>{2, 5, 6, 0, 5, 4}, {6});
  GradcheckResult r = Gradcheck([&](const TensorList& in) { return CrossEntropy(in[0].T(), t32, 5); }, {xt});
  EXPECT_TRUE(r.ok) << "transposed: " << r.message;
}

TEST(CrossEntropy, NonContiguousLogitsGiveTheContiguousResult) {
  const Tensor base = RandomTensor({40, 8}, 11, DType::kFloat32, -3, 3);
  const Tensor t = FromVector(std::vector<int64_t>{0, 39, 7, kIgnore, 12, 3, 3, 20}, {8});
  const Tensor a = CrossEntropy(base.T(), t, kIgnore, Reduction::kNone);
  const Tensor b = CrossEntropy(base.T().Contiguous(), t, kIgnore, Reduction::kNone);
  EXPECT_TRUE(AllClose(a, b, 0, 0));
}

// The backward builds a bf16 or f16 row in chunks of 256 columns (NOTE in
// ops/cpu/cross_entropy_cpu.cc, CeBwdRange): targets at both edges of every chunk
// and in the ragged last one must get their -1 in the right place.
TEST(CrossEntropy, TargetsInEveryBackwardChunkMatchFloat64Reference) {
  const int64_t v = 600;
  const std::vector<int64_t> t = {0, 255, 256, 257, 511, 512, 599, kIgnore, 300};
  const int64_t n = static_cast<int64_t>(t.size());
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const Tensor logits = RandomTensor({n, v}, 75, dtype, -6, 6);
    Tensor x = logits.detach().requires_grad_();
    const Tensor loss = CrossEntropy(x, FromVector(t, {n}), kIgnore, Reduction::kSum);
    loss.Backward();
    const CeRef ref = RefCrossEntropy(logits.ToDoubles(), t, v, kIgnore, std::vector<double>(n, 1.0));
    const Tol tol = TolFor(dtype);
    EXPECT_TRUE(AllClose(x.grad(), ref.dlogits, tol.rtol, tol.rtol * 0.05)) << Name(dtype);
  }
}

// NOTE [softmax isa dispatch]: softmax and log-softmax over the last dim and
// cross-entropy, forward and backward, are compiled for the baseline and for
// AVX-512; both must give the same bits on every float dtype (a ragged row
// width, an ignored target, rows split across threads). On a CPU without
// AVX-512 both runs take the baseline.
TEST(CrossEntropy, IsaBuildsGiveIdenticalBits) {
  const int64_t rows = 64, v = 333;
  std::vector<int64_t> targets(rows);
  for (int64_t i = 0; i < rows; ++i) targets[i] = i == 5 ? kIgnore : (i * 37) % v;
  const Tensor t = FromVector(targets, {rows});
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    std::vector<std::vector<std::vector<uint8_t>>> results;  // [build][output]
    for (bool avx512 : {false, true}) {
      internal::SetConverterIsaForTesting({avx512, avx512, avx512, true});
      std::vector<std::vector<uint8_t>> all;
      const auto add = [&](const Tensor& x) { all.push_back(::octet::testing::Bytes(x)); };
      const Tensor dy = RandomTensor({rows, v}, 72, dtype);
      for (bool log : {false, true}) {
        Tensor x = RandomTensor({rows, v}, 71, dtype, -9, 9).requires_grad_();
        const Tensor y = log ? LogSoftmax(x) : Softmax(x);
        y.Backward(dy);
        add(y);
        add(x.grad());
      }
      Tensor logits = RandomTensor({rows, v}, 73, dtype, -9, 9).requires_grad_();
      const Tensor loss = CrossEntropy(logits, t, kIgnore, Reduction::kNone);
      loss.Backward(RandomTensor({rows}, 74, loss.dtype()));
      add(loss);
      add(logits.grad());
      results.push_back(all);
    }
    internal::ForceScalarConvertersForTesting(false);
    const char* const names[] = {"softmax", "softmax backward", "log_softmax", "log_softmax backward",
                                 "cross_entropy", "cross_entropy backward"};
    for (size_t k = 0; k < results[0].size(); ++k) EXPECT_EQ(results[0][k], results[1][k]) << names[k] << " " << Name(dtype);
  }
}

// NOTE [cross-entropy rows in registers] (ops/cpu/cross_entropy_cpu.cc): on
// AVX-512 CPUs f32 and bf16 rows run intrinsic forms of the loops (the bf16
// backward where the CPU has AVX-512 BF16); the loss, the logsumexp (seen
// through the backward) and dlogits are the baseline loop's bits, in every
// build (NOTE [exp fused multiply-adds] in ops/functors.h), for row widths
// with and without a tail, short and long, and logits wide enough to reach
// the exponential's clamp.
TEST(CrossEntropy, IntrinsicRowsMatchTheBaselineLoop) {
  const internal::ConverterIsa cpu = internal::DetectedConverterIsa();
  if (!cpu.avx512) GTEST_SKIP() << "this CPU has no AVX-512: the intrinsic rows never run";
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const auto& [rows, v, range, specials] :
         {std::tuple<int64_t, int64_t, double, bool>{2048, 256, 9, false}, {301, 333, 9, false}, {64, 4096, 9, false},
          {128, 15, 9, false}, {97, 48, 120, false}, {130, 128, 9, false}, {16, 256, 9, true}, {16, 333, 9, true}}) {
      std::vector<int64_t> targets(rows);
      for (int64_t i = 0; i < rows; ++i) targets[i] = i == 5 ? kIgnore : (i * 37) % v;
      const Tensor t = FromVector(targets, {rows});
      std::vector<std::vector<uint8_t>> results;
      for (const internal::ConverterIsa isa : {internal::ConverterIsa{false, false, false, true},
                                               internal::ConverterIsa{true, true, false, true},
                                               internal::ConverterIsa{true, true, cpu.bf16, true}}) {
        internal::SetConverterIsaForTesting(isa);
        Tensor logits = RandomTensor({rows, v}, 75 + v, dtype, -range, range);
        if (specials) {  // +inf, -inf and NaN logits in rows 1-3, at and away from the target
          std::vector<double> vals = logits.ToDoubles();
          vals[1 * v + (37 % v)] = std::numeric_limits<double>::infinity();
          vals[2 * v + v - 1] = -std::numeric_limits<double>::infinity();
          vals[3 * v] = std::numeric_limits<double>::quiet_NaN();
          logits = FromVector(vals, {rows, v}, {.dtype = dtype});
        }
        logits.requires_grad_();
        const Tensor loss = CrossEntropy(logits, t, kIgnore, Reduction::kNone);
        loss.Backward(RandomTensor({rows}, 76, loss.dtype()));
        std::vector<uint8_t> all;
        ::octet::testing::AppendBytes(&all, loss);
        ::octet::testing::AppendBytes(&all, logits.grad());
        results.push_back(all);
      }
      internal::ForceScalarConvertersForTesting(false);
      const std::string what = std::string(Name(dtype)) + ", rows " + std::to_string(rows) + ", width " +
                               std::to_string(v);
      EXPECT_EQ(results[1], results[0]) << what << ": AVX-512 against the baseline";
      EXPECT_EQ(results[2], results[0]) << what << ": AVX-512 BF16 against the baseline";
    }
  }
}

TEST(CrossEntropy, AllIgnoredMeanIsZeroWithZeroGradient) {
  Tensor x = RandomTensor({3, 4}, 12, DType::kFloat32).requires_grad_();
  const Tensor t = FromVector(std::vector<int64_t>{-1, -1, -1}, {3});
  Tensor loss = CrossEntropy(x, t, -1);
  EXPECT_EQ(loss.Item(), 0.0);
  loss.Backward();
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>(12, 0.0), 0, 0));
  EXPECT_EQ(CrossEntropy(x.detach(), t, -1, Reduction::kSum).Item(), 0.0);
}

TEST(CrossEntropy, UniformLogitsGiveLogV) {
  const Tensor x = Zeros({4, 4096}, {.dtype = DType::kBFloat16});
  const Tensor t = FromVector(std::vector<int64_t>{0, 1, 2, 4095}, {4});
  EXPECT_NEAR(CrossEntropy(x, t).Item(), std::log(4096.0), 1e-5);
}

TEST(CrossEntropyErrors, OutOfRangeTargetsNameValuePositionAndV) {
  const Tensor x = RandomTensor({4, 5}, 13, DType::kFloat32);
  std::string e = ErrorOf([&] { CrossEntropy(x, FromVector(std::vector<int64_t>{0, 1, 7, 2}, {4})); });
  EXPECT_NE(e.find("cross_entropy: target 7 at position 2 is out of range for V = 5 classes"), std::string::npos)
      << e;
  e = ErrorOf([&] { CrossEntropy(x, FromVector(std::vector<int32_t>{0, -3, 1, 2}, {4})); });
  EXPECT_NE(e.find("cross_entropy: target -3 at position 1 is out of range for V = 5"), std::string::npos) << e;
  EXPECT_NE(e.find("ignore_index (-100)"), std::string::npos) << e;
  // -100 is fine by default but not when another ignore_index is given.
  const Tensor t = FromVector(std::vector<int64_t>{0, -100, 1, 2}, {4});
  EXPECT_EQ(ErrorOf([&] { CrossEntropy(x, t); }), "");
  e = ErrorOf([&] { CrossEntropy(x, t, -1); });
  EXPECT_NE(e.find("target -100 at position 1"), std::string::npos) << e;
}

TEST(CrossEntropyErrors, BadShapesAndDtypesNameTheOp) {
  const Tensor x = RandomTensor({4, 5}, 14, DType::kFloat32);
  const Tensor t = FromVector(std::vector<int64_t>{0, 1, 2, 3}, {4});
  std::string e = ErrorOf([&] { CrossEntropy(x.Reshape({2, 2, 5}), t); });
  EXPECT_NE(e.find("cross_entropy: logits must be (N, V), got float32[2, 2, 5]"), std::string::npos) << e;
  e = ErrorOf([&] { CrossEntropy(x, FromVector(std::vector<int64_t>{0, 1, 2}, {3})); });
  EXPECT_NE(e.find("cross_entropy: targets must be (N) with N = 4"), std::string::npos) << e;
  EXPECT_NE(e.find("int64[3]"), std::string::npos) << e;
  e = ErrorOf([&] { CrossEntropy(x, t.Reshape({4, 1})); });
  EXPECT_NE(e.find("targets must be (N)"), std::string::npos) << e;
  e = ErrorOf([&] { CrossEntropy(x, t.To(DType::kFloat32)); });
  EXPECT_NE(e.find("cross_entropy: argument 'targets' is float32[4]; expected dtype int64, int32"),
            std::string::npos)
      << e;
  e = ErrorOf([&] { CrossEntropy(x.To(DType::kFloat8E5M2), t); });
  EXPECT_NE(e.find("cross_entropy: argument 'logits' is fp8_e5m2[4, 5]"), std::string::npos) << e;
  EXPECT_NE(e.find("FP8 inputs are rejected"), std::string::npos) << e;
  e = ErrorOf([&] { CrossEntropy(Zeros({4, 0}), t); });
  EXPECT_NE(e.find("cross_entropy: logits have no classes"), std::string::npos) << e;
}

}  // namespace
}  // namespace octet
