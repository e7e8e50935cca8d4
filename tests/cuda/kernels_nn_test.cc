// CPU-vs-CUDA parity of the row kernels: LayerNorm / AddLayerNorm / RMSNorm,
// softmax / log-softmax, fused softmax-cross-entropy and embedding, forward
// and backward (through autograd, so every CUDA kernel of these families
// runs). Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <octet/autograd/engine.h>
#include <octet/ops/embedding.h>
#include <octet/ops/norm.h>
#include <octet/ops/softmax.h>
#include "tests/cuda/parity_util.h"

namespace octet::testing {
namespace {

// A leaf requiring grad on each device, same values.
Pair Leaf(const Tensor& cpu_values) {
  Tensor c = cpu_values.Clone(), g = cpu_values.To(Gpu());
  c.requires_grad_();
  g.requires_grad_();
  return {c, g};
}

void ExpectGradsMatch(const Pair& p, Tol tol, const std::string& what) {
  ASSERT_TRUE(p.cpu.grad().defined()) << what;
  ASSERT_TRUE(p.gpu.grad().defined()) << what;
  EXPECT_TRUE(Matches(p.gpu.grad(), p.cpu.grad(), tol)) << what;
}

// Row statistics and parameter gradients sum C or N terms of magnitude ~1
// (in a different order on each device): widen the tolerance by the typical
// growth of the rounding error, sqrt(terms) eps.
Tol NormTol(DType d, int64_t terms) {
  const Tol t = ParityTol(d);
  const double eps = d == DType::kFloat64 ? 1e-16 : 6e-8;
  const double grow = 8 * eps * std::sqrt(static_cast<double>(terms));
  return {t.rtol + grow, t.atol + grow};
}

// ---- norms ----------------------------------------------------------------------------

using NormParam = std::tuple<Shape, DType, bool /*affine*/>;
class CudaNormParity : public ::testing::TestWithParam<NormParam> {};

TEST_P(CudaNormParity, LayerNormForwardAndBackward) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto& [shape, d, affine] = GetParam();
  const int64_t c = shape.back(), n = Numel(shape) / c;
  const Pair x = Leaf(RandomTensor(shape, 1, d, -2, 3));
  const Pair w = affine ? Leaf(RandomTensor({c}, 2, d, 0.5, 1.5)) : Pair{};
  const Pair b = affine ? Leaf(RandomTensor({c}, 3, d)) : Pair{};
  const Tensor yc = LayerNorm(x.cpu, w.cpu, b.cpu), yg = LayerNorm(x.gpu, w.gpu, b.gpu);
  EXPECT_TRUE(Matches(yg, yc, NormTol(d, c)));
  const Tensor dy = RandomTensor(shape, 4, d);
  yc.Backward(dy);
  yg.Backward(dy.To(Gpu()));
  ExpectGradsMatch(x, NormTol(d, c), "dx");
  if (affine) {
    ExpectGradsMatch(w, NormTol(d, n), "dweight");
    ExpectGradsMatch(b, NormTol(d, n), "dbias");
  }
}

TEST_P(CudaNormParity, AddLayerNormForwardAndBackward) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto& [shape, d, affine] = GetParam();
  const int64_t c = shape.back(), n = Numel(shape) / c;
  const Pair x = Leaf(RandomTensor(shape, 5, d, -2, 2));
  const Pair r = Leaf(RandomTensor(shape, 6, d, -2, 2));
  const Pair w = affine ? Leaf(RandomTensor({c}, 7, d, 0.5, 1.5)) : Pair{};
  const Pair b = affine ? Leaf(RandomTensor({c}, 8, d)) : Pair{};
  const AddLayerNormResult oc = AddLayerNorm(x.cpu, r.cpu, w.cpu, b.cpu);
  const AddLayerNormResult og = AddLayerNorm(x.gpu, r.gpu, w.gpu, b.gpu);
  EXPECT_TRUE(Identical(og.sum, oc.sum));  // one rounding of x + residual: exact
  EXPECT_TRUE(Matches(og.out, oc.out, NormTol(d, c)));
  const Tensor dsum = RandomTensor(shape, 9, d), dout = RandomTensor(shape, 10, d);
  autograd::Backward({oc.sum, oc.out}, {dsum, dout});
  autograd::Backward({og.sum, og.out}, {dsum.To(Gpu()), dout.To(Gpu())});
  ExpectGradsMatch(x, NormTol(d, c), "dx");
  ExpectGradsMatch(r, NormTol(d, c), "dresidual");
  if (affine) {
    ExpectGradsMatch(w, NormTol(d, n), "dweight");
    ExpectGradsMatch(b, NormTol(d, n), "dbias");
  }
}

TEST_P(CudaNormParity, RmsNormForwardAndBackward) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto& [shape, d, affine] = GetParam();
  const int64_t c = shape.back(), n = Numel(shape) / c;
  const Pair x = Leaf(RandomTensor(shape, 11, d, -2, 3));
  const Pair w = affine ? Leaf(RandomTensor({c}, 12, d, 0.5, 1.5)) : Pair{};
  const Tensor yc = RmsNorm(x.cpu, w.cpu), yg = RmsNorm(x.gpu, w.gpu);
  EXPECT_TRUE(Matches(yg, yc, NormTol(d, c)));
  const Tensor dy = RandomTensor(shape, 13, d);
  yc.Backward(dy);
  yg.Backward(dy.To(Gpu()));
  ExpectGradsMatch(x, NormTol(d, c), "dx");
  if (affine) ExpectGradsMatch(w, NormTol(d, n), "dweight");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaNormParity,
    ::testing::Combine(::testing::Values(Shape{1, 1}, Shape{7, 33}, Shape{4, 16, 768}, Shape{3, 5000},
                                         Shape{3000, 64}),
                       ::testing::Values(DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16),
                       ::testing::Bool()));

// ---- softmax ----------------------------------------------------------------------------

using SoftmaxParam = std::tuple<Shape, int64_t /*dim*/, DType, bool /*log*/>;
class CudaSoftmaxParity : public ::testing::TestWithParam<SoftmaxParam> {};

TEST_P(CudaSoftmaxParity, ForwardAndBackward) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto& [shape, dim, d, log] = GetParam();
  const Pair x = Leaf(RandomTensor(shape, 21, d, -4, 4));
  const int64_t n = shape[dim < 0 ? dim + static_cast<int64_t>(shape.size()) : dim];
  const Tensor yc = log ? LogSoftmax(x.cpu, dim) : Softmax(x.cpu, dim);
  const Tensor yg = log ? LogSoftmax(x.gpu, dim) : Softmax(x.gpu, dim);
  EXPECT_TRUE(Matches(yg, yc, SoftmaxTol(d, n)));
  const Tensor dy = RandomTensor(shape, 22, d);
  yc.Backward(dy);
  yg.Backward(dy.To(Gpu()));
  ExpectGradsMatch(x, SoftmaxTol(d, n), "dx");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaSoftmaxParity,
    ::testing::Combine(::testing::Values(Shape{4, 5, 6}, Shape{3, 50257}, Shape{64, 33}),
                       ::testing::Values(int64_t{-1}, int64_t{0}, int64_t{1}),
                       ::testing::Values(DType::kFloat32, DType::kFloat64, DType::kBFloat16), ::testing::Bool()));

TEST(CudaSoftmaxEdgeParity, NanAndInfinityRowsBehaveLikeTheCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  std::vector<double> v = RandomValues(4 * 9, 1, -3, 3);
  v[2] = NAN;                                      // row 0
  for (int i = 9; i < 18; ++i) v[i] = -INFINITY;  // row 1: all -inf
  v[20] = INFINITY;                                // row 2
  const Pair x = Both(FromVector(v, {4, 9}));
  EXPECT_TRUE(Matches(Softmax(x.gpu), Softmax(x.cpu), ParityTol(DType::kFloat32)));
  EXPECT_TRUE(Matches(LogSoftmax(x.gpu), LogSoftmax(x.cpu), ParityTol(DType::kFloat32)));
}

// ---- cross-entropy -------------------------------------------------------------------------

class CudaCrossEntropyParity : public ::testing::TestWithParam<std::tuple<DType, DType, Reduction>> {};

TEST_P(CudaCrossEntropyParity, LossAndLogitGradients) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto& [d, index_dtype, reduction] = GetParam();
  for (const auto& [rows, v] : {std::pair<int64_t, int64_t>{5, 7}, {64, 50257}, {300, 96}}) {
    const Pair logits = Leaf(RandomTensor({rows, v}, 31, d, -5, 5));
    std::vector<double> t = RandomValues(rows, 32, 0, static_cast<double>(v));
    for (double& x : t) x = std::floor(x);
    t[rows / 2] = -100;  // ignored
    const Pair targets = Both(FromVector(t, {rows}, {.dtype = index_dtype}));
    const Tensor lc = CrossEntropy(logits.cpu, targets.cpu, -100, reduction);
    const Tensor lg = CrossEntropy(logits.gpu, targets.gpu, -100, reduction);
    EXPECT_TRUE(Matches(lg, lc, SoftmaxTol(lc.dtype(), v * rows))) << rows << "x" << v;
    const Tensor seed = RandomTensor(lc.shape(), 33, lc.dtype(), 0.5, 1.5);
    lc.Backward(seed);
    lg.Backward(seed.To(Gpu()));
    ExpectGradsMatch(logits, SoftmaxTol(d, v), "dlogits");
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, CudaCrossEntropyParity,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat64, DType::kBFloat16),
                       ::testing::Values(DType::kInt64, DType::kInt32),
                       ::testing::Values(Reduction::kNone, Reduction::kMean, Reduction::kSum)));

TEST(CudaCrossEntropyEdgeParity, ABadTargetIsTheSameErrorOnBothDevices) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Pair logits = Both(RandomTensor({6, 10}, 1, DType::kFloat32));
  const Pair targets = Both(FromVector(std::vector<int64_t>{1, 2, 3, 10, 4, -1}, {6}));
  const std::string ec = ErrorOf([&] { CrossEntropy(logits.cpu, targets.cpu); });
  const std::string eg = ErrorOf([&] { CrossEntropy(logits.gpu, targets.gpu); });
  // The first bad target (value 10 at position 3) is reported on both.
  for (const std::string& e : {ec, eg})
    EXPECT_NE(e.find("target 10 at position 3 is out of range for V = 10"), std::string::npos) << e;
}

// ---- embedding ---------------------------------------------------------------------------

class CudaEmbeddingParity : public ::testing::TestWithParam<std::tuple<DType, DType, int64_t /*C*/>> {};

TEST_P(CudaEmbeddingParity, GatherAndDeterministicScatterAdd) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto& [d, index_dtype, c] = GetParam();
  const int64_t v = 50;
  const Pair w = Leaf(RandomTensor({v, c}, 41, d));
  // More positions than rows (repeats), some rows never used.
  std::vector<double> idx = RandomValues(4 * 97, 42, 0, 40);
  for (double& x : idx) x = std::floor(x);
  // A frequent row: ~200 hits span several chunks of NOTE [embedding backward order].
  for (size_t i = 0; i < idx.size(); i += 2) idx[i] = 7;
  const Pair indices = Both(FromVector(idx, {4, 97}, {.dtype = index_dtype}));
  const Tensor oc = Embedding(w.cpu, indices.cpu), og = Embedding(w.gpu, indices.gpu);
  EXPECT_TRUE(Identical(og, oc));
  const Tensor dy = RandomTensor(oc.shape(), 43, d);
  oc.Backward(dy);
  og.Backward(dy.To(Gpu()));
  // Same summation order as the CPU (NOTE [embedding backward order]): bitwise equal.
  EXPECT_TRUE(Identical(w.gpu.grad(), w.cpu.grad()));
}

INSTANTIATE_TEST_SUITE_P(All, CudaEmbeddingParity,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                                              DType::kFloat16),
                                            ::testing::Values(DType::kInt64, DType::kInt32),
                                            ::testing::Values(int64_t{3}, int64_t{64}, int64_t{768})));

TEST(CudaEmbeddingEdgeParity, AnOutOfRangeIndexIsTheSameErrorOnBothDevices) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Pair w = Both(RandomTensor({8, 4}, 1, DType::kFloat32));
  const Pair indices = Both(FromVector(std::vector<int64_t>{0, 7, 8, 9, -1}, {5}));
  const std::string ec = ErrorOf([&] { Embedding(w.cpu, indices.cpu); });
  const std::string eg = ErrorOf([&] { Embedding(w.gpu, indices.gpu); });
  for (const std::string& e : {ec, eg}) {
    EXPECT_NE(e.find("index 8 at position"), std::string::npos) << e;
    EXPECT_NE(e.find("out of range for V = 8 rows"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace octet::testing
