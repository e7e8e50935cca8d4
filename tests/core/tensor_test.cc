// Tensor basics: geometry, views sharing storage, copies, dtype conversion,
// element access, FP8 scale metadata, and the error messages of bad calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>

#include <octet/core/scaling.h>
#include <octet/core/tensor.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/shape.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;

Tensor Iota(const Shape& shape, DType dtype = DType::kFloat32) {
  std::vector<double> v(Numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return FromVector(v, shape, {.dtype = dtype});
}

TEST(Tensor, EmptyHasContiguousStridesAndAlignedData) {
  Tensor t = Empty({2, 3, 4});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Empty({1}, {.dtype = DType::kUInt8}).raw_data()) % 64, 0u);
}

TEST(Tensor, FromVectorConvertsAndAtReads) {
  Tensor t = FromVector(std::vector<double>{1.5, -2.25, 3, 4}, {2, 2}, {.dtype = DType::kBFloat16});
  EXPECT_EQ(t.dtype(), DType::kBFloat16);
  EXPECT_EQ(t.At({0, 0}), 1.5);
  EXPECT_EQ(t.At({0, 1}), -2.25);
  EXPECT_EQ(t.At({1, 1}), 4.0);
}

TEST(Tensor, ReshapeOfContiguousIsAView) {
  Tensor a = Iota({2, 6});
  Tensor b = a.Reshape({3, 4});
  EXPECT_EQ(b.storage(), a.storage());
  EXPECT_EQ(b.At({2, 1}), 9.0);
  Tensor c = a.View({-1, 3});
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
}

TEST(Tensor, ViewOfTransposedNeedsReshape) {
  Tensor a = Iota({3, 4}).T();  // [4, 3], strides [1, 4]
  EXPECT_FALSE(a.is_contiguous());
  const std::string msg = ErrorOf([&] { a.View({12}); });
  EXPECT_NE(msg.find("cannot be viewed as [12] without a copy"), std::string::npos) << msg;
  Tensor r = a.Reshape({12});
  EXPECT_NE(r.storage(), a.storage());
  // Row-major order of the transposed tensor: 0,4,8,1,5,9,...
  EXPECT_TRUE(AllClose(r, std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 0, 0));
}

TEST(Tensor, PermuteNarrowSelectExpandShareStorage) {
  Tensor a = Iota({2, 3, 4});
  Tensor p = a.Permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.At({3, 1, 2}), a.At({1, 2, 3}));
  Tensor n = a.Narrow(2, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(n.At({1, 2, 1}), a.At({1, 2, 2}));
  Tensor s = a.Slice(1, 0, 3, 2);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(s.At({1, 1, 3}), a.At({1, 2, 3}));
  Tensor sel = a.Select(0, -1);
  EXPECT_EQ(sel.shape(), (Shape{3, 4}));
  EXPECT_EQ(sel.At({2, 3}), 23.0);
  Tensor e = Iota({3, 1}).Expand({2, 3, 5});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.At({1, 2, 4}), 2.0);
  for (const Tensor& v : {p, n, s, sel}) EXPECT_EQ(v.storage(), a.storage());
}

TEST(Tensor, SqueezeUnsqueezeFlatten) {
  Tensor a = Iota({2, 1, 3});
  EXPECT_EQ(a.Squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(a.Unsqueeze(0).shape(), (Shape{1, 2, 1, 3}));
  EXPECT_EQ(a.Unsqueeze(-1).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_EQ(Iota({2, 3, 4}).Flatten(1).shape(), (Shape{2, 12}));
  const std::string msg = ErrorOf([&] { a.Squeeze(0); });
  EXPECT_NE(msg.find("squeeze: dim 0 of float32[2, 1, 3] has size 2, not 1"), std::string::npos) << msg;
}

TEST(Tensor, WritesThroughAViewAreSeenByTheBase) {
  Tensor a = Zeros({3, 3});
  a.Narrow(0, 1, 1).Fill_(7.0);
  EXPECT_EQ(a.At({1, 2}), 7.0);
  EXPECT_EQ(a.At({0, 2}), 0.0);
  a.T().Narrow(0, 0, 1).CopyFrom_(FromVector(std::vector<double>{1, 2, 3}, {1, 3}));
  EXPECT_EQ(a.At({2, 0}), 3.0);  // column 0 of a
}

TEST(Tensor, CloneAndContiguousCopy) {
  Tensor a = Iota({2, 3});
  Tensor c = a.Clone();
  EXPECT_NE(c.storage(), a.storage());
  c.Fill_(0);
  EXPECT_EQ(a.At({1, 2}), 5.0);
  EXPECT_TRUE(a.Contiguous().is_same(a));
  Tensor t = a.T().Contiguous();
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(AllClose(t, std::vector<double>{0, 3, 1, 4, 2, 5}, 0, 0));
}

TEST(Tensor, ToDtypeRoundsToNearestEven) {
  // 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: rounds to even (1).
  Tensor x = FromVector(std::vector<double>{1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 1e30, -0.0}, {4});
  Tensor b = x.To(DType::kBFloat16);
  EXPECT_EQ(b.At({0}), 1.0);
  EXPECT_EQ(b.At({1}), 1.0 + 4.0 / 256);
  EXPECT_NEAR(b.At({2}), 1e30, 1e30 * 1e-2);
  Tensor h = x.To(DType::kFloat16);
  EXPECT_TRUE(std::isinf(h.At({2})));  // past 65504 without saturation
  EXPECT_EQ(x.Narrow(0, 0, 2).To(DType::kInt64).At({1}), 1.0);  // 1e30 is past int64: tensor_limits_test
}

TEST(Tensor, ToFp8CarriesScaleAndDequantizes) {
  Tensor x = FromVector(std::vector<double>{0.5, -3.0, 500.0, 0.0}, {4});
  Tensor q = x.To(DType::kFloat8E4M3);
  ASSERT_NE(q.scale_meta(), nullptr);
  EXPECT_EQ(ScaleValue(q), 1.0f);
  EXPECT_EQ(q.scale_meta()->amax.Item(), 500.0);
  EXPECT_EQ(q.At({2}), 448.0);  // saturated to max finite
  Tensor back = q.To(DType::kFloat32);
  EXPECT_TRUE(AllClose(back, std::vector<double>{0.5, -3.0, 448.0, 0.0}, 0, 0));
  // A metadata-only change of scale_inv rescales every value without touching bytes.
  Tensor halved = q.WithScaleMeta(MakePerTensorScale(2.0f, 500.0f));
  EXPECT_EQ(halved.storage(), q.storage());
  EXPECT_EQ(halved.At({1}), -1.5);
}

TEST(Tensor, PrintingShowsDtypeShapeAndValues) {
  const std::string s = Iota({2, 2}).ToString();
  EXPECT_NE(s.find("float32[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("[0, 1]"), std::string::npos) << s;
  EXPECT_NE(s.find("[2, 3]"), std::string::npos) << s;
  // The whole text for a scalar, a long tensor cut short, an FP8 tensor with
  // its scale, a leaf requiring grad, and operator<<.
  EXPECT_EQ(Scalar(2.5).ToString(), "Tensor(float32[])\n2.5");
  EXPECT_EQ(Iota({10}).ToString(4), "Tensor(float32[10])\n[0, 1, 2, 3 ... (6 more)");
  const Tensor q = FromVector(std::vector<double>{1, -2}, {2}, {.dtype = DType::kFloat8E4M3})
                       .WithScaleMeta(MakePerTensorScale(4.0f, 8.0f));
  EXPECT_EQ(q.ToString(), "Tensor(fp8_e4m3[2], scale_inv=0.25)\n[0.25, -0.5]");
  const Tensor w = Zeros({1, 2}, {.requires_grad = true});
  std::ostringstream os;
  os << w;
  EXPECT_EQ(os.str(), "Tensor(float32[1, 2], requires_grad)\n[0, 0]");
  EXPECT_EQ(Tensor().ToString(), "Tensor(undefined)");
}

TEST(Tensor, LikeFactoriesCopyShapeDtypeAndDevice) {
  const Tensor x = Full({2, 3}, 7.0, {.dtype = DType::kBFloat16});
  const Tensor z = ZerosLike(x), e = EmptyLike(x);
  EXPECT_EQ(z.shape(), x.shape());
  EXPECT_EQ(z.dtype(), DType::kBFloat16);
  EXPECT_EQ(z.ToDoubles(), std::vector<double>(6, 0.0));
  EXPECT_EQ(e.shape(), x.shape());
  EXPECT_EQ(e.dtype(), DType::kBFloat16);
  EXPECT_NE(e.storage(), x.storage());
}

TEST(Tensor, BadCallsNameTheProblem) {
  Tensor a = Iota({2, 3});
  EXPECT_NE(ErrorOf([&] { a.At({2, 0}); }).find("At: index [2, 0] is out of range for shape [2, 3]"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { a.Reshape({4, 2}); }).find("reshape: shape [4, 2] is invalid for 6 elements"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { a.Narrow(1, 2, 2); })
                .find("narrow: start 2 and length 2 are out of bounds for dim 1 of size 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { a.Expand({3, 3}); }).find("expand: float32[2, 3] cannot be expanded to [3, 3]"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { a.Permute({0, 0}); }).find("permute: dim 0 repeated"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { a.Transpose(0, 2); }).find("dim 2 is out of range for a tensor of rank 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { a.data<double>(); }).find("data<float64>() called on a float32 tensor"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { Tensor().shape(); }).find("use of an undefined tensor"), std::string::npos);
  // One past the last CUDA device: an error with or without a GPU here.
  const Device missing(DeviceType::kCUDA, DeviceCount(DeviceType::kCUDA));
  const std::string to_missing = ErrorOf([&] { a.To(kCPU).To(missing); });
  EXPECT_NE(to_missing.find(ToString(missing)), std::string::npos) << to_missing;
}

TEST(Tensor, CatSplitChunkStack) {
  Tensor a = Iota({2, 3});
  Tensor b = Iota({2, 2});
  Tensor c = Cat({a, b}, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 5}));
  EXPECT_TRUE(AllClose(c, std::vector<double>{0, 1, 2, 0, 1, 3, 4, 5, 2, 3}, 0, 0));
  TensorList parts = Split(c, {3, 2}, 1);
  EXPECT_TRUE(AllClose(parts[0], a, 0, 0));
  EXPECT_TRUE(AllClose(parts[1], b, 0, 0));
  EXPECT_EQ(Chunk(Iota({6}), 3, 0)[2].At({1}), 5.0);
  EXPECT_EQ(Stack({a, a}, 0).shape(), (Shape{2, 2, 3}));
  EXPECT_NE(ErrorOf([&] { Cat({a, Iota({3, 3})}, 1); }).find("does not match tensor 0"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Split(c, {3, 3}, 1); }).find("sizes add up to 6 but dim 1"), std::string::npos);
}

}  // namespace
}  // namespace octet
