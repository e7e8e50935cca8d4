// What the FP8 Linear's backward holds: once dY is quantized (and the bias
// gradient summed in the same pass), its floating-point bytes go back to the
// cache before the dgrad and wgrad GEMMs allocate (NOTE [backward owns its
// gradient] in autograd/function.h). Measured as the CPU peak of allocated
// bytes over one backward, with and without a hook that keeps dY: the
// difference is exactly dY's block.
#include <gtest/gtest.h>

#include <octet/core/allocator.h>
#include <octet/nn/amp.h>
#include <octet/nn/linear.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::RandomTensor;

constexpr int64_t kM = 512, kK = 256, kN = 1024;

struct Backward {
  int64_t peak_allocated = 0;
  std::vector<double> dx, dw;
};

// One forward and backward of `lin`; the loss Sum(y²) makes dY = 2y a fresh
// tensor that only the engine holds, unless `keep_dy` keeps it in a hook.
Backward RunStep(Linear& lin, const Tensor& x0, bool keep_dy) {
  lin.ZeroGrad();
  const Tensor x = x0.detach().requires_grad_();
  const Tensor y = lin(x);
  Tensor kept;
  if (keep_dy) {
    y.RegisterHook([&](const Tensor& g) {
      kept = g;
      return Tensor();
    });
  }
  const Tensor loss = Sum(Square(y).To(DType::kFloat32));
  ResetCpuPeakMemoryStats();
  const int64_t before = GetCpuMemoryStats().allocated_bytes;
  loss.Backward();
  Backward r;
  r.peak_allocated = GetCpuMemoryStats().peak_allocated_bytes - before;
  r.dx = x.grad().ToDoubles();
  r.dw = lin.weight().grad().ToDoubles();
  return r;
}

TEST(Fp8LinearMemory, BackwardGivesBackDyBeforeItsGemms) {
  for (bool bias : {true, false}) {
    Linear lin({.in = kK, .out = kN, .bias = bias});
    lin.SetAmp(amp::Level::kO1);
    const Tensor x = RandomTensor({kM, kK}, 11, DType::kBFloat16, -1, 1);
    RunStep(lin, x, false);  // first step: FP8 scales and the weight's cached copies
    const Backward dropped = RunStep(lin, x, false);
    const Backward kept = RunStep(lin, x, true);
    const Backward again = RunStep(lin, x, false);
    EXPECT_EQ(again.peak_allocated, dropped.peak_allocated) << "bias=" << bias;
    const int64_t dy_bytes = kM * kN * 2;  // (M,N) bfloat16, a whole number of 512-byte blocks
    EXPECT_EQ(kept.peak_allocated - dropped.peak_allocated, dy_bytes) << "bias=" << bias;
    // The same gradients either way.
    EXPECT_EQ(kept.dx, dropped.dx);
    EXPECT_EQ(kept.dw, dropped.dw);
  }
}

}  // namespace
}  // namespace octet::nn
