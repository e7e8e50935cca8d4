// The FP8 Linear's bias gradient from the output-gradient cast-transpose
// (Fp8LinearOp::Backward with CastTransposeWithBiasGrad, ops/cast.h), forced
// on the CPU as a TN-only GPU takes it: db has the same bits as the separate
// Sum(dy as f32, {0}) of the row-wise path and matches a float64 column sum
// of dy; a Linear without a bias, or whose bias needs no gradient, is
// unaffected; a frozen weight with a trainable bias gets its bias gradient
// from the separate sum.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include <octet/nn/amp.h>
#include <octet/nn/linear.h>
#include <octet/ops/matmul_testing.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::RandomTensor;

struct Forced {
  explicit Forced(bool v) { SetFp8TransposedCopiesForTesting(v); }
  ~Forced() { SetFp8TransposedCopiesForTesting(std::nullopt); }
};

std::vector<double> ColumnSums64(const Tensor& dy, int64_t n) {
  const std::vector<double> v = dy.ToDoubles();
  std::vector<double> s(n, 0.0);
  for (size_t i = 0; i < v.size(); ++i) s[i % n] += v[i];
  return s;
}

TEST(Fp8LinearBiasGrad, FusedSumHasTheBitsOfTheSeparateSum) {
  for (DType dy_dtype : {DType::kBFloat16, DType::kFloat32}) {
    Linear rows({.in = 40, .out = 56}), tn({.in = 40, .out = 56});
    tn.LoadStateDict(rows.StateDict());
    rows.SetAmp(amp::Level::kO1);
    tn.SetAmp(amp::Level::kO1);
    const Tensor x = RandomTensor({3, 37, 40}, 7, DType::kBFloat16, -2, 2);
    const Tensor dy = RandomTensor({3, 37, 56}, 8, dy_dtype, -1, 1);
    const Tensor yr = rows(x.detach().requires_grad_());
    yr.Backward(dy.To(yr.dtype()));
    {
      Forced on(true);
      const Tensor yt = tn(x.detach().requires_grad_());
      yt.Backward(dy.To(yt.dtype()));
    }
    const Tensor db_tn = tn.bias()->grad(), db_rows = rows.bias()->grad();
    ASSERT_TRUE(db_tn.defined());
    EXPECT_EQ(db_tn.dtype(), db_rows.dtype());
    EXPECT_EQ(db_tn.ToDoubles(), db_rows.ToDoubles()) << Name(dy_dtype);
    const std::vector<double> want = ColumnSums64(dy.To(yr.dtype()), 56), got = db_tn.ToDoubles();
    for (int c = 0; c < 56; ++c) EXPECT_NEAR(got[c], want[c], 1e-3) << c;
  }
}

TEST(Fp8LinearBiasGrad, NoBiasStillGivesWeightAndInputGradients) {
  Linear rows({.in = 32, .out = 16, .bias = false}), tn({.in = 32, .out = 16, .bias = false});
  tn.LoadStateDict(rows.StateDict());
  rows.SetAmp(amp::Level::kO1);
  tn.SetAmp(amp::Level::kO1);
  const Tensor x = RandomTensor({24, 32}, 3, DType::kBFloat16, -2, 2);
  const Tensor dy = RandomTensor({24, 16}, 4, DType::kBFloat16, -1, 1);
  const Tensor xr = x.detach().requires_grad_(), xt = x.detach().requires_grad_();
  rows(xr).Backward(dy);
  {
    Forced on(true);
    tn(xt).Backward(dy);
  }
  EXPECT_TRUE(::octet::testing::AllClose(tn.weight().grad(), rows.weight().grad().ToDoubles(), 1e-5, 1e-9));
  EXPECT_TRUE(::octet::testing::AllClose(xt.grad(), xr.grad().ToDoubles(), 1e-5, 1e-9));
}

// A frozen weight with a trainable bias (bias-only fine-tuning): no
// column-wise dY is made, so no cast sums the bias gradient; the separate sum
// does, with the same bits either way, and the weight gets no gradient.
TEST(Fp8LinearBiasGrad, FrozenWeightTrainableBias) {
  Linear rows({.in = 32, .out = 24}), tn({.in = 32, .out = 24});
  tn.LoadStateDict(rows.StateDict());
  for (Linear* l : {&rows, &tn}) {
    l->SetAmp(amp::Level::kO1);
    l->weight().requires_grad_(false);
  }
  const Tensor x = RandomTensor({2, 19, 32}, 5, DType::kBFloat16, -2, 2);
  const Tensor dy = RandomTensor({2, 19, 24}, 6, DType::kBFloat16, -1, 1);
  const Tensor xr = x.detach().requires_grad_(), xt = x.detach().requires_grad_();
  rows(xr).Backward(dy);
  {
    Forced on(true);
    tn(xt).Backward(dy);
  }
  EXPECT_FALSE(rows.weight().grad().defined());
  EXPECT_FALSE(tn.weight().grad().defined());
  ASSERT_TRUE(tn.bias()->grad().defined());
  EXPECT_EQ(tn.bias()->grad().ToDoubles(), rows.bias()->grad().ToDoubles());
  const std::vector<double> want = ColumnSums64(dy, 24), got = tn.bias()->grad().ToDoubles();
  for (int c = 0; c < 24; ++c) EXPECT_NEAR(got[c], want[c], 1e-4) << c;
  EXPECT_EQ(::octet::testing::Bytes(xt.grad()), ::octet::testing::Bytes(xr.grad()));
}

}  // namespace
}  // namespace octet::nn
