// The autograd engine: accumulation along several edges, retain_graph, grad
// mode, detach, hooks, in-place detection on saved tensors, Grad().
#include <gtest/gtest.h>

#include <octet/autograd/engine.h>
#include <octet/autograd/function.h>
#include <octet/autograd/grad_mode.h>
#include <octet/autograd/gradcheck.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;

Tensor Leaf(std::vector<double> v, const Shape& shape, DType dtype = DType::kFloat64) {
  return FromVector(v, shape, {.dtype = dtype, .requires_grad = true});
}

TEST(Autograd, GradientsAccumulateAcrossEdges) {
  // y = x*x + 3x  => dy/dx = 2x + 3
  Tensor x = Leaf({1, -2, 0.5}, {3});
  Tensor y = Sum(Add(Mul(x, x), MulScalar(x, 3.0)));
  y.Backward();
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{5, -1, 4}, 0, 1e-12));
}

TEST(Autograd, SecondBackwardAccumulatesIntoGrad) {
  Tensor x = Leaf({2}, {1});
  Tensor y = Sum(Mul(x, x));
  y.Backward(Tensor(), /*retain_graph=*/true);
  y.Backward();
  EXPECT_EQ(x.grad().Item(), 8.0);
}

TEST(Autograd, BackwardTwiceWithoutRetainGraphThrows) {
  Tensor x = Leaf({2}, {1});
  Tensor y = Sum(Mul(x, x));
  y.Backward();
  const std::string msg = ErrorOf([&] { y.Backward(); });
  EXPECT_NE(msg.find("backward through the graph a second time"), std::string::npos) << msg;
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = Leaf({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard guard;
    y = Mul(x, x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_TRUE(autograd::GradMode::IsEnabled());
}

TEST(Autograd, DetachCutsTheGraph) {
  Tensor x = Leaf({3}, {1});
  Tensor y = Mul(x.detach(), x);  // d/dx = x (detached factor is a constant)
  Sum(y).Backward();
  EXPECT_EQ(x.grad().Item(), 3.0);
}

TEST(Autograd, InPlaceChangeOfSavedTensorMakesBackwardThrow) {
  Tensor x = Leaf({1, 2}, {2});
  Tensor w = FromVector(std::vector<double>{3, 4}, {2}, {.dtype = DType::kFloat64});
  Tensor y = Sum(Mul(x, w));  // mul saves w
  w.Fill_(0.0);
  const std::string msg = ErrorOf([&] { y.Backward(); });
  EXPECT_NE(msg.find("mul: a tensor saved for backward (float64[2]) was modified in place"), std::string::npos)
      << msg;
}

TEST(Autograd, InPlaceOpOnLeafRequiringGradIsRejected) {
  Tensor x = Leaf({1, 2}, {2});
  const std::string msg = ErrorOf([&] { MulScalarInPlace(x, 2.0); });
  EXPECT_NE(msg.find("mul_: in-place op on float64[2] which requires grad"), std::string::npos) << msg;
  NoGradGuard guard;
  MulScalarInPlace(x, 2.0);  // fine without grad mode (optimizer updates)
  EXPECT_EQ(x.At({1}), 4.0);
}

TEST(Autograd, HooksSeeAndReplaceGradients) {
  Tensor x = Leaf({1, 2}, {2});
  Tensor h = MulScalar(x, 2.0);
  Tensor seen;
  h.RegisterHook([&](const Tensor& g) {
    seen = g.Clone();
    return MulScalar(g, 10.0);
  });
  int post_calls = 0;
  x.RegisterPostAccumulateHook([&](const Tensor& leaf) {
    ++post_calls;
    EXPECT_TRUE(leaf.grad().defined());
  });
  Sum(h).Backward();
  EXPECT_TRUE(AllClose(seen, std::vector<double>{1, 1}, 0, 0));
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{20, 20}, 0, 0));
  EXPECT_EQ(post_calls, 1);
}

TEST(Autograd, PostAccumulateHookFiresOnceWhenGradIsFinal) {
  Tensor x = Leaf({1}, {1});
  int calls = 0;
  double value_at_call = 0;
  x.RegisterPostAccumulateHook([&](const Tensor& leaf) {
    ++calls;
    value_at_call = leaf.grad().Item();
  });
  // x reaches the loss along three edges; the hook must see the sum.
  Sum(Add(Add(x, x), MulScalar(x, 5.0))).Backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(value_at_call, 7.0);
}

TEST(Autograd, GradReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = Leaf({1, 2, 3}, {3});
  Tensor y = Sum(Mul(x, x));
  TensorList g = autograd::Grad({y}, {x});
  EXPECT_TRUE(AllClose(g[0], std::vector<double>{2, 4, 6}, 0, 0));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, NonScalarRootNeedsAGradient) {
  Tensor x = Leaf({1, 2}, {2});
  Tensor y = Mul(x, x);
  EXPECT_NE(ErrorOf([&] { y.Backward(); }).find("a gradient must be given for a non-scalar root of shape [2]"),
            std::string::npos);
  y.Backward(FromVector(std::vector<double>{1, 0.5}, {2}, {.dtype = DType::kFloat64}));
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{2, 2}, 0, 0));
}

TEST(Autograd, RequiresGradOnlyOnFloatLeaves) {
  Tensor i = Zeros({2}, {.dtype = DType::kInt64});
  EXPECT_NE(ErrorOf([&] { i.requires_grad_(); }).find("only float32/float64/bfloat16/float16"), std::string::npos);
  Tensor x = Leaf({1}, {1});
  Tensor y = Mul(x, x);
  EXPECT_NE(ErrorOf([&] { y.requires_grad_(false); }).find("only leaf tensors"), std::string::npos);
}

TEST(Autograd, Bf16GradientsKeepTheDtype) {
  Tensor x = Leaf({1, 2}, {2}, DType::kBFloat16);
  Sum(Mul(x, x)).Backward();
  EXPECT_EQ(x.grad().dtype(), DType::kBFloat16);
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{2, 4}, 0, 0));
}

// A deliberately wrong backward that Gradcheck must report.
struct BadSquare : autograd::Op<BadSquare> {
    static constexpr const char* kName = "bad_square";
    static Tensor Forward(autograd::Ctx& ctx, const Tensor& x) {
      ctx.Save(x);
      return UnaryRaw(UnaryOp::kSquare, x);
    }
    static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
      return {BinaryRaw(BinaryOp::kMul, dy, ctx.Saved(0))};  // missing factor 2
    }
};

TEST(Gradcheck, CatchesAWrongGradient) {
  Tensor x = Leaf({0.3, -0.7}, {2});
  GradcheckResult bad = Gradcheck([](const TensorList& in) { return BadSquare::Apply(in[0]); }, {x});
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.message.find("2 gradient elements differ"), std::string::npos) << bad.message;
  GradcheckResult good = Gradcheck([](const TensorList& in) { return Square(in[0]); }, {x});
  EXPECT_TRUE(good.ok) << good.message;
}

// What Gradcheck cannot check it says, rather than passing: no input that
// requires grad, an output cut from its inputs, a float32 output or input.
TEST(Gradcheck, SaysWhenThereIsNothingToCheck) {
  const Tensor x = Leaf({0.3, -0.7}, {2});
  const Tensor constant = FromVector(std::vector<double>{0.3, -0.7}, {2}, {.dtype = DType::kFloat64});
  GradcheckResult r = Gradcheck([](const TensorList& in) { return Square(in[0]); }, {constant});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "no input requires grad");
  r = Gradcheck([](const TensorList& in) { return Square(in[0].detach()); }, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "output does not require grad");
  EXPECT_NE(ErrorOf([&] {
              Gradcheck([](const TensorList& in) { return Square(in[0]).To(DType::kFloat32); }, {x});
            }).find("Gradcheck: output must be float64, got float32[2]"),
            std::string::npos);
  const Tensor x32 = FromVector(std::vector<double>{1.0}, {1}, {.requires_grad = true});
  EXPECT_NE(ErrorOf([&] { Gradcheck([](const TensorList& in) { return Square(in[0]); }, {x32}); })
                .find("Gradcheck: inputs that require grad must be float64, got float32[1]"),
            std::string::npos);
}

// NOTE [backward owns its gradient]: a Backward that takes dY by value holds
// the only reference the engine had; how many handles share its tensor, and
// how many tensors its bytes, is recorded.
struct OwnsItsGradient : autograd::Op<OwnsItsGradient> {
  static constexpr const char* kName = "owns_its_gradient";
  static inline long references = -1, storage_users = -1;
  static Tensor Forward(autograd::Ctx&, const Tensor& x) { return MulScalar(x, 3.0); }
  static TensorList Backward(autograd::Ctx&, Tensor dy) {
    references = dy.impl_ptr().use_count();
    storage_users = dy.storage().use_count();
    Tensor dx = MulScalar(dy, 3.0);
    dy = Tensor();  // what an op does once dY is used
    return {dx};
  }
};

TEST(Autograd, BackwardTakingItsGradientByValueHoldsTheOnlyReference) {
  Tensor x = Leaf({0.5, -2}, {2});
  // Square's backward makes a fresh dY = 2·y·1 that only the engine holds.
  Sum(Square(OwnsItsGradient::Apply(x))).Backward();
  EXPECT_EQ(OwnsItsGradient::references, 1);
  EXPECT_EQ(OwnsItsGradient::storage_users, 1);
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{2 * 1.5 * 3, 2 * -6.0 * 3}, 0, 0));

  // A hook that keeps the gradient holds a second reference: dropping the op's
  // own leaves the hook's copy intact.
  Tensor y = OwnsItsGradient::Apply(x);
  Tensor kept;
  y.RegisterHook([&](const Tensor& g) {
    kept = g;
    return Tensor();
  });
  Sum(Square(y)).Backward();
  EXPECT_EQ(OwnsItsGradient::references, 2);
  EXPECT_TRUE(AllClose(kept, std::vector<double>{3, -12}, 0, 0));
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{2 * 9, 2 * -36.0}, 0, 0));
}

}  // namespace
}  // namespace octet
