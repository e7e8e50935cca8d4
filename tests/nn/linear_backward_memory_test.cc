// What a Linear's backward holds on to: the incoming gradient dY goes back to
// the cache as soon as the op has what it needs from it (the FP8 Linear:
// dY quantized and the bias gradient summed in the same pass; a Linear with
// a fused GELU: dY·gelu'), before the dgrad and wgrad GEMMs allocate (NOTE
// [backward owns its gradient] in autograd/function.h). Measured as the CPU
// peak of allocated bytes over one backward, with and without a hook that
// keeps dY: the difference is exactly dY's block, at O0 (LinearGelu), O2
// (CastLinear with GELU) and O1 (Fp8Linear, with and without GELU).
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

// dW (N,K) and dX (M,K) outweigh dY (M,N), so the peak falls in the GEMMs.
constexpr int64_t kM = 512, kK = 1024, kN = 1024;

struct Backward {
  int64_t peak_allocated = 0;
  int64_t dy_bytes = 0;
  std::vector<double> dx, dw;
};

// One forward and backward of `lin`; the loss Sum(y²) makes dY = 2y a fresh
// tensor that only the engine holds, unless `keep_dy` keeps it in a hook.
Backward RunStep(Linear& lin, const Tensor& x0, bool gelu, bool keep_dy) {
  lin.ZeroGrad();
  const Tensor x = x0.detach().requires_grad_();
  const Tensor y = gelu ? lin.ForwardGelu(x) : lin(x);
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
  r.dy_bytes = static_cast<int64_t>(y.numel() * SizeOf(y.dtype()));  // a whole number of 512-byte blocks
  r.dx = x.grad().ToDoubles();
  r.dw = lin.weight().grad().ToDoubles();
  return r;
}

struct Case {
  amp::Level level;
  DType x_dtype;
  bool gelu;
};

TEST(LinearBackwardMemory, DyIsGivenBackBeforeTheGemms) {
  for (const Case c : {Case{amp::Level::kO0, DType::kFloat32, true}, Case{amp::Level::kO2, DType::kFloat32, true},
                       Case{amp::Level::kO1, DType::kBFloat16, false}, Case{amp::Level::kO1, DType::kBFloat16, true}}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "level " << amp::Name(c.level) << " gelu " << c.gelu << " bias " << bias);
      Linear lin({.in = kK, .out = kN, .bias = bias});
      lin.SetAmp(c.level);
      const Tensor x = RandomTensor({kM, kK}, 11, c.x_dtype, -1, 1);
      RunStep(lin, x, c.gelu, false);  // first step: FP8 scales and the weight's cached copies
      const Backward dropped = RunStep(lin, x, c.gelu, false);
      const Backward kept = RunStep(lin, x, c.gelu, true);
      const Backward again = RunStep(lin, x, c.gelu, false);
      EXPECT_EQ(again.peak_allocated, dropped.peak_allocated);
      EXPECT_EQ(kept.peak_allocated - dropped.peak_allocated, dropped.dy_bytes);
      // The same gradients either way.
      EXPECT_EQ(kept.dx, dropped.dx);
      EXPECT_EQ(kept.dw, dropped.dw);
    }
  }
}

}  // namespace
}  // namespace octet::nn
