// Gradient hooks (Tensor::RegisterHook): a replacement must match the
// gradient the hook received in shape, dtype and device, on leaves and on
// intermediate tensors, and an undefined return keeps the gradient.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <octet/autograd/engine.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::testing::HasSubstr;

Tensor Leaf(const Shape& shape) { return Ones(shape, {.requires_grad = true}); }

TEST(GradHook, LeafHookReturningAnotherShapeThrows) {
  // Was accepted: x.grad() became [5] on a [3] leaf (set_grad rejects that).
  Tensor x = Leaf({3});
  x.RegisterHook([](const Tensor&) { return Ones({5}); });
  const std::string msg = ErrorOf([&] { Sum(MulScalar(x, 2.0)).Backward(); });
  EXPECT_THAT(msg, HasSubstr("RegisterHook: the hook on leaf tensor float32[3] returned gradient float32[5] but "
                             "received float32[3]"));
  EXPECT_THAT(msg, HasSubstr("same shape, dtype and device"));
  EXPECT_FALSE(x.grad().defined());
}

TEST(GradHook, LeafHookReturningAnotherDtypeThrows) {
  // Was accepted: an int64 gradient on a float32 leaf.
  Tensor x = Leaf({3});
  x.RegisterHook([](const Tensor&) { return Ones({3}, {.dtype = DType::kInt64}); });
  EXPECT_THAT(ErrorOf([&] { Sum(x).Backward(); }),
              HasSubstr("leaf tensor float32[3] returned gradient int64[3] but received float32[3]"));
}

TEST(GradHook, NonLeafHookReturningABroadcastableShapeThrows) {
  // Was broadcast silently into the next backward function.
  Tensor x = Leaf({64});
  Tensor h = MulScalar(x, 3.0);
  h.RegisterHook([](const Tensor&) { return Ones({1}); });
  const std::string msg = ErrorOf([&] { Sum(Mul(h, h)).Backward(); });
  EXPECT_THAT(msg, HasSubstr("the hook on tensor float32[64] (output 0 of mul_scalar) returned gradient "
                             "float32[1] but received float32[64]"));
}

TEST(GradHook, NonLeafHookReturningAnotherShapeNamesTheHook) {
  // Was an unrelated "mul: shapes [5] and [3] cannot be broadcast".
  Tensor x = Leaf({3});
  Tensor h = MulScalar(x, 3.0);
  h.RegisterHook([](const Tensor&) { return Ones({5}); });
  EXPECT_THAT(ErrorOf([&] { Sum(Mul(h, h)).Backward(); }),
              HasSubstr("RegisterHook: the hook on tensor float32[3] (output 0 of mul_scalar) returned gradient "
                        "float32[5]"));
}

TEST(GradHook, MatchingAndUndefinedReturnsAreUsed) {
  Tensor x = Leaf({2});
  Tensor h = MulScalar(x, 2.0);
  h.RegisterHook([](const Tensor& g) { return MulScalar(g, 10.0); });
  x.RegisterHook([](const Tensor&) { return Tensor(); });  // keeps the gradient as it is
  Sum(h).Backward();
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{20, 20}, 0, 0));
}

TEST(GradHook, GradSeesTheCheckToo) {
  Tensor x = Leaf({2});
  Tensor y = Sum(Square(x));
  x.RegisterHook([](const Tensor&) { return Ones({2}, {.dtype = DType::kFloat64}); });
  EXPECT_THAT(ErrorOf([&] { autograd::Grad({y}, {x}); }),
              HasSubstr("leaf tensor float32[2] returned gradient float64[2] but received float32[2]"));
}

}  // namespace
}  // namespace octet
