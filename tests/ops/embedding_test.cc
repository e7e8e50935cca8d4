// Embedding: gathered values, the scatter-add gradient against a float64
// reference written here, gradcheck, non-contiguous weight and indices,
// thread-count independence, and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <octet/autograd/gradcheck.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/embedding.h>
#include <octet/ops/embedding_kernels.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

// Tolerances for dweight per dtype, stated once (the forward is a copy and is
// compared exactly). Sums run in f32 (f64 for f64) with one final rounding to
// the dtype; at most 4 terms per row in these tests.
double GradRtol(DType d) {
  switch (d) {
    case DType::kFloat64: return 1e-14;
    case DType::kFloat32: return 1e-6;
    case DType::kBFloat16: return 4e-3;  // 2^-9 rounding of the result
    case DType::kFloat16: return 5e-4;
    default: return 0;
  }
}

// f64 reference: dweight (V, C) from dout (N, C) and flat indices.
std::vector<double> RefDWeight(const std::vector<double>& dout, const std::vector<int64_t>& idx, int64_t v,
                               int64_t c) {
  std::vector<double> dw(v * c, 0.0);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t j = 0; j < c; ++j) dw[idx[i] * c + j] += dout[i * c + j];
  return dw;
}

class EmbeddingValueTest : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(EmbeddingValueTest, GathersRowsAndScatterAddsGradients) {
  const auto [dtype, idtype] = GetParam();
  const int64_t v = 11, c = 6;
  Tensor w = RandomTensor({v, c}, 1, dtype).requires_grad_();
  // Repeated indices (3 four times, 0 twice), rows 1, 4, 6, 8, 9 never used.
  const std::vector<int64_t> idx = {3, 0, 10, 3, 7, 3, 2, 0, 3, 5};
  const Tensor indices = idtype == DType::kInt64
                             ? FromVector(idx, {2, 5})
                             : FromVector(std::vector<int32_t>(idx.begin(), idx.end()), {2, 5});
  const Tensor out = Embedding(w, indices);
  ASSERT_EQ(out.shape(), (Shape{2, 5, c}));
  ASSERT_EQ(out.dtype(), dtype);
  const std::vector<double> wv = w.ToDoubles();
  std::vector<double> expected;
  for (int64_t k : idx) expected.insert(expected.end(), wv.begin() + k * c, wv.begin() + (k + 1) * c);
  EXPECT_TRUE(AllClose(out, expected, 0, 0));
  const Tensor dout = RandomTensor({2, 5, c}, 2, dtype);
  out.Backward(dout);
  const double tol = GradRtol(dtype);
  EXPECT_TRUE(AllClose(w.grad(), RefDWeight(dout.ToDoubles(), idx, v, c), tol, tol));
}

INSTANTIATE_TEST_SUITE_P(Embedding, EmbeddingValueTest,
                         ::testing::Combine(::testing::Values(DType::kFloat64, DType::kFloat32, DType::kBFloat16,
                                                              DType::kFloat16),
                                            ::testing::Values(DType::kInt64, DType::kInt32)),
                         [](const auto& info) {
                           return std::string(Name(std::get<0>(info.param))) + "_" + Name(std::get<1>(info.param));
                         });

TEST(Embedding, RankZeroIndexGivesOneRow) {
  const Tensor w = RandomTensor({4, 3}, 3, DType::kFloat32);
  const Tensor out = Embedding(w, FromVector(std::vector<int64_t>{2}, {}));
  EXPECT_EQ(out.shape(), (Shape{3}));
  EXPECT_TRUE(AllClose(out, w.Select(0, 2).Contiguous(), 0, 0));
}

TEST(Embedding, NonContiguousWeightAndIndices) {
  const Tensor base = RandomTensor({5, 9}, 4, DType::kFloat32);
  const Tensor w = base.T();  // (9, 5), not contiguous
  const Tensor all = FromVector(std::vector<int64_t>{8, 1, 0, 4, 8, 2, 7, 3}, {2, 4});
  const Tensor idx = all.Slice(1, 0, 4, 2);  // (2, 2): {8, 0}, {8, 7}
  ASSERT_FALSE(idx.is_contiguous());
  EXPECT_TRUE(AllClose(Embedding(w, idx), Embedding(w.Contiguous(), idx.Contiguous()), 0, 0));
}

// A (V, 0) weight has no storage (null data): the gather and the scatter-add
// must not hand its pointer to memcpy (UB found by UBSan), and the indices are
// still checked against V.
TEST(Embedding, ZeroColumnsGivesEmptyRowsAndAnEmptyGradient) {
  Tensor w = Zeros({4, 0});
  w.requires_grad_();
  const Tensor out = Embedding(w, FromVector(std::vector<int64_t>{3, 0}, {2}));
  EXPECT_EQ(out.shape(), (Shape{2, 0}));
  Sum(out).Backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().shape(), (Shape{4, 0}));
  const std::string e = ErrorOf([&] { Embedding(w, FromVector(std::vector<int64_t>{4}, {1})); });
  EXPECT_NE(e.find("embedding: index 4 at position [0]"), std::string::npos) << e;
}

TEST(EmbeddingGrad, PassesGradcheckWithRepeatedAndUnusedRows) {
  Tensor w = RandomTensor({6, 4}, 5, DType::kFloat64).requires_grad_();
  const Tensor idx = FromVector(std::vector<int64_t>{1, 5, 1, 1, 0, 5, 3}, {7});
  GradcheckResult r = Gradcheck([&](const TensorList& in) { return Embedding(in[0], idx); }, {w});
  EXPECT_TRUE(r.ok) << r.message;
  // Through a transposed weight and 2-D int32 indices.
  Tensor wt = RandomTensor({3, 5}, 6, DType::kFloat64).requires_grad_();  // used as (5, 3)
  const Tensor idx32 = FromVector(std::vector<int32_t>{4, 4, 0, 2}, {2, 2});
  r = Gradcheck([&](const TensorList& in) { return Embedding(in[0].T(), idx32); }, {wt});
  EXPECT_TRUE(r.ok) << "transposed: " << r.message;
}

TEST(EmbeddingGrad, IsBitwiseIndependentOfTheThreadCount) {
  // Many repeats of few rows in f32: any change in summation order shows.
  const int64_t v = 300, c = 256, n = 4000;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = (i * 7919) % 37 == 0 ? 299 : (i * i) % 13;
  const Tensor indices = FromVector(idx, {n});
  const Tensor dout = RandomTensor({n, c}, 7, DType::kFloat32, -1e3, 1e3);
  auto dweight = [&](int threads) {
    const cpu::ScopedOmpThreads scoped(threads);
    Tensor w = Zeros({v, c}).requires_grad_();
    Embedding(w, indices).Backward(dout);
    return w.grad();
  };
  const Tensor one = dweight(1), two = dweight(2);
  EXPECT_TRUE(AllClose(one, two, 0, 0));
  EXPECT_TRUE(AllClose(one, RefDWeight(dout.ToDoubles(), idx, v, c), 1e-4, 0.05));
}

// NOTE [embedding backward order], written out here independently: per row,
// float32 sums of chunks of kEmbeddingBwdChunk positions (in increasing
// position), added in chunk order. The CPU kernel must equal it bit for bit
// (and the CUDA kernel equals the CPU's in tests/cuda/kernels_nn_test.cc), so
// the order both backends share is pinned down, with runs shorter than, equal
// to and many times a chunk.
TEST(EmbeddingGrad, SumsEachRowInChunksOfTheDocumentedSize) {
  const int64_t v = 6, c = 33, n = 3 * kEmbeddingBwdChunk + 150;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i < kEmbeddingBwdChunk ? 1 : (i % 3 == 0 ? 2 : (i % 7 == 0 ? 4 : 1));
  idx[5] = 3;  // a row hit once; row 0 and 5 never
  const Tensor dout = RandomTensor({n, c}, 17, DType::kFloat32, -1e3, 1e3);
  const std::vector<double> g = dout.ToDoubles();
  std::vector<float> want(v * c, 0.0f);
  for (int64_t row = 0; row < v; ++row) {
    std::vector<int64_t> pos;
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] == row) pos.push_back(i);
    for (int64_t j = 0; j < c; ++j) {
      float acc = 0.0f;
      for (size_t p0 = 0; p0 < pos.size(); p0 += kEmbeddingBwdChunk) {
        float part = 0.0f;
        for (size_t p = p0; p < std::min(pos.size(), p0 + kEmbeddingBwdChunk); ++p)
          part += static_cast<float>(g[pos[p] * c + j]);
        acc += part;
      }
      want[row * c + j] = acc;
    }
  }
  Tensor w = Zeros({v, c}).requires_grad_();
  Embedding(w, FromVector(idx, {n})).Backward(dout);
  const std::vector<double> got = w.grad().ToDoubles();
  for (int64_t i = 0; i < v * c; ++i) ASSERT_EQ(static_cast<float>(got[i]), want[i]) << "element " << i;
}

TEST(EmbeddingErrors, OutOfRangeIndexNamesValuePositionAndV) {
  const Tensor w = RandomTensor({5, 3}, 8, DType::kFloat32);
  std::string e = ErrorOf([&] { Embedding(w, FromVector(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, {2, 3})); });
  EXPECT_NE(e.find("embedding: index 5 at position [1, 2] of indices int64[2, 3]"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range for V = 5 rows"), std::string::npos) << e;
  e = ErrorOf([&] { Embedding(w, FromVector(std::vector<int32_t>{1, -1}, {2})); });
  EXPECT_NE(e.find("embedding: index -1 at position [1]"), std::string::npos) << e;
}

TEST(EmbeddingErrors, BadShapesAndDtypesNameTheOp) {
  const Tensor w = RandomTensor({5, 3}, 9, DType::kFloat32);
  const Tensor idx = FromVector(std::vector<int64_t>{0, 1}, {2});
  std::string e = ErrorOf([&] { Embedding(w.Reshape({15}), idx); });
  EXPECT_NE(e.find("embedding: weight must be (V, C), got float32[15]"), std::string::npos) << e;
  e = ErrorOf([&] { Embedding(w, idx.To(DType::kFloat32)); });
  EXPECT_NE(e.find("embedding: argument 'indices' is float32[2]; expected dtype int64, int32"), std::string::npos)
      << e;
  e = ErrorOf([&] { Embedding(w.To(DType::kFloat8E4M3), idx); });
  EXPECT_NE(e.find("embedding: argument 'weight' is fp8_e4m3[5, 3]"), std::string::npos) << e;
  EXPECT_NE(e.find("FP8 inputs are rejected"), std::string::npos) << e;
  e = ErrorOf([&] { Embedding(Zeros({5, 3}, {.dtype = DType::kInt32}), idx); });
  EXPECT_NE(e.find("embedding: argument 'weight' is int32[5, 3]"), std::string::npos) << e;
}

}  // namespace
}  // namespace octet
