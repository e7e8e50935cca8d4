// The multi-tensor kernels on the CPU (ops/multi_tensor_kernels.h) against
// float64 references, and the launch plan the CUDA kernels follow
// (ops/multi_tensor_plan.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <octet/ops/cpu/loops.h>
#include <octet/ops/multi_tensor_kernels.h>
#include <octet/ops/multi_tensor_plan.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::RandomTensor;

TEST(MultiTensorPlan, GroupsByDtypeCapsTensorsPerLaunchAndNumbersChunksAcrossLaunches) {
  // 5 tensors of group 0, 2 of group 1 (interleaved), one empty.
  const std::vector<int64_t> numels = {10, 25, 0, 7, 40, 1, 100, 3};
  const std::vector<int> groups = {0, 1, 0, 0, 1, 0, 0, 0};
  const auto plan = PlanMultiTensor(numels, groups, /*chunk=*/8, /*max_per_launch=*/2);
  // Group 0 (non-empty): 0, 3, 5, 6, 7 -> launches {0,3} {5,6} {7}; group 1: {1,4}.
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].tensors, (std::vector<int>{0, 3}));
  EXPECT_EQ(plan[1].tensors, (std::vector<int>{5, 6}));
  EXPECT_EQ(plan[2].tensors, (std::vector<int>{7}));
  EXPECT_EQ(plan[3].tensors, (std::vector<int>{1, 4}));
  EXPECT_EQ(plan[0].chunk_begin, (std::vector<int64_t>{0, 2, 3}));   // ceil(10/8)=2, ceil(7/8)=1
  EXPECT_EQ(plan[1].chunk_begin, (std::vector<int64_t>{0, 1, 14}));  // 1, ceil(100/8)=13
  EXPECT_EQ(plan[3].chunk_begin, (std::vector<int64_t>{0, 4, 9}));   // ceil(25/8)=4, 5
  int64_t next = 0;
  for (const auto& l : plan) {
    EXPECT_EQ(l.first_chunk, next);
    next += l.chunks();
  }
  EXPECT_EQ(MultiTensorChunks(plan), next);
  EXPECT_EQ(next, 3 + 14 + 1 + 9);
  // Every chunk of a launch maps back to its tensor and covers its elements once.
  for (const auto& l : plan) {
    std::vector<int64_t> covered(l.tensors.size(), 0);
    for (int64_t c = 0; c < l.chunks(); ++c) {
      const int t = MultiTensorOwner(l.chunk_begin.data(), static_cast<int>(l.tensors.size()), c);
      ASSERT_GE(c, l.chunk_begin[t]);
      ASSERT_LT(c, l.chunk_begin[t + 1]);
      const int64_t begin = (c - l.chunk_begin[t]) * 8;
      covered[t] += std::min<int64_t>(numels[l.tensors[t]], begin + 8) - begin;
    }
    for (size_t t = 0; t < l.tensors.size(); ++t) EXPECT_EQ(covered[t], numels[l.tensors[t]]);
  }
  EXPECT_TRUE(PlanMultiTensor({}, {}).empty());
  EXPECT_TRUE(PlanMultiTensor({0, 0}, {1, 2}).empty());
}

TEST(MultiTensorPlan, GptSizedListNeedsFewLaunches) {
  // GPT-2 small: 12 layers x 12 tensors + embeddings and final norm (148 tensors).
  std::vector<int64_t> numels = {50257 * 768, 1024 * 768, 768, 768};
  for (int l = 0; l < 12; ++l)
    for (int64_t n : {768, 768, 2304 * 768, 2304, 768 * 768, 768, 768, 768, 3072 * 768, 3072, 768 * 3072, 768})
      numels.push_back(n);
  const auto plan = PlanMultiTensor(numels, std::vector<int>(numels.size(), 0));
  EXPECT_EQ(plan.size(), 3u);  // ceil(148 / 64)
}

double Norm64(const TensorList& xs) {
  double s = 0.0;
  for (const Tensor& x : xs)
    for (double v : x.ToDoubles()) s += v * v;
  return std::sqrt(s);
}

TEST(MultiTensorCpu, L2NormOfMixedDtypesMatchesFloat64Reference) {
  const TensorList xs = {RandomTensor({3, 5}, 1, DType::kFloat32), RandomTensor({40000}, 2, DType::kBFloat16),
                         RandomTensor({7}, 3, DType::kFloat64), RandomTensor({0}, 4, DType::kFloat32),
                         RandomTensor({33, 17}, 5, DType::kFloat16)};
  Tensor norm = Empty({}, {.dtype = DType::kFloat64});
  multi_tensor_l2_norm(kCPU)(xs, norm);
  const double want = Norm64(xs);
  EXPECT_NEAR(norm.Item(), want, 1e-12 * want);
  multi_tensor_l2_norm(kCPU)({}, norm);
  EXPECT_EQ(norm.Item(), 0.0);
}

TEST(MultiTensorCpu, ClipScaleMultipliesByTheCoefficientInEachDtype) {
  const TensorList orig = {RandomTensor({4, 6}, 7, DType::kFloat32, -3, 3), RandomTensor({5}, 8, DType::kFloat64, -3, 3),
                           RandomTensor({9}, 9, DType::kBFloat16, -3, 3)};
  TensorList xs;
  for (const Tensor& t : orig) xs.push_back(t.Clone());
  const double total = 12.5, max_norm = 2.0;
  multi_tensor_clip_scale(kCPU)(xs, Full({}, total, {.dtype = DType::kFloat64}), max_norm, 1e-6);
  const double coef = max_norm / (total + 1e-6);
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::vector<double> a = orig[i].ToDoubles(), b = xs[i].ToDoubles();
    for (size_t k = 0; k < a.size(); ++k) {
      double want;
      if (orig[i].dtype() == DType::kFloat64) {
        want = a[k] * coef;
      } else {
        want = static_cast<double>(static_cast<float>(a[k]) * static_cast<float>(coef));
        if (orig[i].dtype() == DType::kBFloat16) want = FromVector(std::vector<double>{want}, {1}).To(DType::kBFloat16).ToDoubles()[0];
      }
      EXPECT_EQ(b[k], want) << i << "[" << k << "]";
    }
  }
  // Within max_norm, or a non-finite norm: untouched.
  for (double t : {1.5, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    TensorList ys = {orig[0].Clone()};
    multi_tensor_clip_scale(kCPU)(ys, Full({}, t, {.dtype = DType::kFloat64}), max_norm, 1e-6);
    EXPECT_EQ(ys[0].ToDoubles(), orig[0].ToDoubles()) << t;
  }
}

// The whole list runs in one parallel region (NOTE [multi-tensor one
// region] in ops/cpu/multi_tensor_cpu.cc): pieces cut across tensor
// boundaries must still scale every element once, and the norm must not
// depend on the thread count (fixed blocks, summed in a fixed order).
TEST(MultiTensorCpu, ManyLargeTensorsInOneRegionKeepTheirBitsAtAnyThreadCount) {
  const TensorList orig = {RandomTensor({70001}, 11, DType::kFloat32, -2, 2), RandomTensor({3}, 12, DType::kFloat32),
                           RandomTensor({0}, 13, DType::kFloat32), RandomTensor({257, 300}, 14, DType::kBFloat16, -2, 2),
                           RandomTensor({40000}, 15, DType::kFloat64, -2, 2)};
  std::vector<double> norms;
  std::vector<std::vector<double>> clipped;
  for (int threads : {1, 2, 3}) {
    const cpu::ScopedOmpThreads scoped(threads);
    Tensor norm = Empty({}, {.dtype = DType::kFloat64});
    multi_tensor_l2_norm(kCPU)(orig, norm);
    norms.push_back(norm.Item());
    TensorList xs;
    for (const Tensor& t : orig) xs.push_back(t.Clone());
    multi_tensor_clip_scale(kCPU)(xs, norm, /*max_norm=*/1.0, 1e-6);
    std::vector<double> all;
    for (const Tensor& x : xs) {
      const std::vector<double> v = x.ToDoubles();
      all.insert(all.end(), v.begin(), v.end());
    }
    clipped.push_back(all);
  }
  const double want = Norm64(orig);
  EXPECT_NEAR(norms[0], want, 1e-12 * want);
  EXPECT_EQ(norms[1], norms[0]);
  EXPECT_EQ(norms[2], norms[0]);
  EXPECT_EQ(clipped[1], clipped[0]);
  EXPECT_EQ(clipped[2], clipped[0]);
  // Each element once, by the coefficient (the f32 tensors' products in f32).
  const double coef = 1.0 / (norms[0] + 1e-6);
  const std::vector<double> first = orig[0].ToDoubles();
  for (size_t k = 0; k < first.size(); ++k)
    ASSERT_EQ(clipped[0][k], static_cast<double>(static_cast<float>(first[k]) * static_cast<float>(coef))) << k;
  const std::vector<double> last = orig[4].ToDoubles();
  const size_t offset = clipped[0].size() - last.size();
  for (size_t k = 0; k < last.size(); ++k) ASSERT_EQ(clipped[0][offset + k], last[k] * coef) << k;
}

}  // namespace
}  // namespace octet
