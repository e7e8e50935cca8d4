// amp O1 and non-finite values (NOTE [non-finite fp8 linear operands] in
// nn/fp8_linear.cc): an inf or NaN in the FP8 Linear's input, weight or
// output gradient -- also one the fused LayerNorm / GELU quantized -- gives
// non-finite results and the loss scaler's found_inf, as at O0, while finite
// values past the FP8 range still saturate.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/nn/amp.h>
#include <octet/nn/layer_norm.h>
#include <octet/nn/linear.h>
#include <octet/optim/loss_scaler.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::RandomTensor;

int64_t NonFinite(const Tensor& t) {
  int64_t n = 0;
  for (double v : t.ToDoubles()) n += !std::isfinite(v);
  return n;
}

// (2, 4) values in [-1, 1] with `bad` at element 0.
Tensor WithOne(double bad, int seed, DType dtype = DType::kFloat32) {
  std::vector<double> v = RandomTensor({2, 4}, seed, DType::kFloat64, -1.0, 1.0).ToDoubles();
  v[0] = bad;
  return FromVector(v, {2, 4}).To(dtype);
}

// The input slot with scale 1 and an initialised history: delayed scaling
// uses it (and the fused LayerNorm / GELU paths are taken).
void ReadyInputScale(Linear& lin) {
  NoGradGuard ng;
  lin.FindBuffer("fp8_input_amax_history")->Fill_(1.0);
  lin.FindBuffer("fp8_input_scale")->Fill_(1.0);
  lin.fp8_state()->input().SetInitialized(true);  // as a load would (NOTE [initialised on the host])
}

TEST(AmpNonFinite, InfOrNanInputGivesNonFiniteOutput) {
  for (const amp::Scaling scaling : {amp::Scaling::kDelayed, amp::Scaling::kCurrent}) {
    for (const double bad : {INFINITY, -INFINITY, NAN}) {
      Linear lin({.in = 4, .out = 4});
      lin.SetAmp(amp::Level::kO1, {.scaling = scaling});
      EXPECT_GT(NonFinite(lin(WithOne(bad, 1))), 0) << bad << " scaling " << static_cast<int>(scaling);
      // A finite input afterwards: finite again (the slot's scale did not take the inf).
      EXPECT_EQ(NonFinite(lin(RandomTensor({2, 4}, 2, DType::kFloat32))), 0) << bad;
    }
  }
}

TEST(AmpNonFinite, InfWeightGivesNonFiniteOutput) {
  Linear lin({.in = 4, .out = 4, .bias = false});
  lin.SetAmp(amp::Level::kO1);
  {
    NoGradGuard ng;
    lin.weight().Flatten().Slice(0, 5, 6).Fill_(INFINITY);
  }
  EXPECT_GT(NonFinite(lin(RandomTensor({2, 4}, 3, DType::kFloat32))), 0);
}

// The probe of the report: an inf in the output gradient came back as finite
// dX / dW (~2e4) and found_inf = 0 at O1, while O0 and O2 reported it.
TEST(AmpNonFinite, InfOrNanGradientReachesTheGradientsAndTheLossScaler) {
  for (const amp::Level level : {amp::Level::kO0, amp::Level::kO1}) {
    for (const bool bias : {false, true}) {
      for (const double bad : {INFINITY, NAN}) {
        Linear lin({.in = 4, .out = 4, .bias = bias});
        lin.SetAmp(level);
        const Tensor x = RandomTensor({2, 4}, 4, DType::kFloat32).requires_grad_();
        const Tensor y = lin(x);
        y.Backward(WithOne(bad, 5, y.dtype()));
        const std::string what = std::string(level == amp::Level::kO1 ? "O1" : "O0") + (bias ? " bias " : " ") +
                                 std::to_string(bad);
        EXPECT_GT(NonFinite(x.grad()), 0) << what;
        EXPECT_GT(NonFinite(lin.weight().grad()), 0) << what;
        optim::DynamicLossScaler scaler;
        EXPECT_TRUE(scaler.Unscale(lin.NamedParameters())) << what;
      }
    }
  }
}

TEST(AmpNonFinite, FiniteValuesPastTheRangeStillSaturate) {
  Linear lin({.in = 4, .out = 4});
  lin.SetAmp(amp::Level::kO1);
  ReadyInputScale(lin);
  // With scale 1, 1000 and 2000 both clamp to E4M3's 448: the rows are equal and finite.
  const Tensor x = FromVector(std::vector<float>{1000, 1, 2, -3, 2000, 1, 2, -3, 448, 1, 2, -3}, {3, 4});
  const std::vector<double> y = lin(x).ToDoubles();
  for (double v : y) EXPECT_TRUE(std::isfinite(v));
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(y[j], y[4 + j]) << j;
    EXPECT_EQ(y[j], y[8 + j]) << j;
  }
  // A large finite gradient likewise stays finite.
  Linear lin2({.in = 4, .out = 4});
  lin2.SetAmp(amp::Level::kO1);
  const Tensor x2 = RandomTensor({2, 4}, 6, DType::kFloat32).requires_grad_();
  const Tensor y2 = lin2(x2);
  y2.Backward(WithOne(1e30, 7, y2.dtype()));
  EXPECT_EQ(NonFinite(x2.grad()), 0);
  EXPECT_EQ(NonFinite(lin2.weight().grad()), 0);
}

// The pre-quantized inputs (NOTE [pre-quantized fp8 linear input]): the
// fused GELU and LayerNorm write FP8 with kSatFinite too.
TEST(AmpNonFinite, InfFromTheFusedGeluOrLayerNormGivesNonFiniteOutput) {
  Linear lin({.in = 4, .out = 4});
  lin.SetAmp(amp::Level::kO1);
  ReadyInputScale(lin);
  EXPECT_GT(NonFinite(lin.ForwardGeluInput(WithOne(INFINITY, 8))), 0);
  EXPECT_EQ(lin.gelu_fusions(), 1);
  EXPECT_EQ(NonFinite(lin.ForwardGeluInput(RandomTensor({2, 4}, 9, DType::kFloat32))), 0);

  // A LayerNorm whose output overflows float32 (a huge gain): inf, not NaN.
  LayerNorm ln({.dim = 4});
  ln.SetAmp(amp::Level::kO1);
  {
    NoGradGuard ng;
    ln.weight()->Fill_(3e38);
  }
  const Tensor x = FromVector(std::vector<float>{4, 0, 0, 0, 0, 0, 0, 4}, {2, 4});
  EXPECT_GT(NonFinite(lin.ForwardLayerNorm(ln, x)), 0);
  EXPECT_EQ(lin.layer_norm_fusions(), 1);
}

}  // namespace
}  // namespace octet::nn
