// CPU-vs-CUDA parity of the optimizer pieces that run as tensor ops on a
// device: SGD (NOTE [sgd on a device]: plain, momentum, Nesterov, weight
// decay; float32 and bfloat16 parameters, a float32 gradient for bf16) and
// the dynamic loss scaler's unscale + inf/NaN check. The CPU kernels are the
// reference (tests/optim check them against float64 math). Skips without a
// CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <octet/core/tensor.h>
#include <octet/optim/loss_scaler.h>
#include <octet/optim/sgd.h>
#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet::optim {
namespace {

#if !OCTET_WITH_CUDA

TEST(OptimCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::AllClose;
using ::octet::testing::RandomTensor;

#define SKIP_WITHOUT_GPU() OCTET_SKIP_WITHOUT_CUDA()

// Two copies of the same parameters: on the CPU and on cuda:0.
struct Params {
  NamedTensors cpu, gpu;
};

Params MakeParams(DType dtype) {
  Params ps;
  for (int i = 0; i < 3; ++i) {
    const Tensor p = RandomTensor({9 + i, 7}, 10 + i, dtype);
    ps.cpu.emplace_back("p" + std::to_string(i), p.Clone().requires_grad_());
    ps.gpu.emplace_back("p" + std::to_string(i), p.To(CUDA(0)).requires_grad_());
  }
  return ps;
}

// Gradients in the parameter's dtype (set_grad refuses any other).
void SetGrads(Params& ps, int step) {
  for (size_t i = 0; i < ps.cpu.size(); ++i) {
    const Tensor& p = ps.cpu[i].second;
    const Tensor g = RandomTensor(p.shape(), 100 * step + static_cast<int>(i), p.dtype());
    ps.cpu[i].second.set_grad(g);
    ps.gpu[i].second.set_grad(g.To(CUDA(0)));
  }
}

TEST(OptimCuda, SgdMatchesTheCpuKernel) {
  SKIP_WITHOUT_GPU();
  const std::vector<SGD::Options> configs = {{.lr = 0.1},
                                             {.lr = 0.05, .momentum = 0.9},
                                             {.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01}};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const SGD::Options& o : configs) {
      Params ps = MakeParams(dtype);
      SGD cpu(ps.cpu, o), gpu(ps.gpu, o);
      for (int step = 0; step < 3; ++step) {
        SetGrads(ps, step);
        cpu.Step();
        gpu.Step();
      }
      // The CPU loop may contract multiply-adds into FMAs: one rounding apart.
      const double tol = dtype == DType::kFloat32 ? 1e-6 : 8e-3;
      for (size_t i = 0; i < ps.cpu.size(); ++i)
        EXPECT_TRUE(AllClose(ps.gpu[i].second.To(kCPU), ps.cpu[i].second.ToDoubles(), tol, tol))
            << Name(dtype) << " momentum " << o.momentum << " nesterov " << o.nesterov << " " << ps.cpu[i].first;
    }
  }
}

TEST(OptimCuda, LossScalerUnscalesAndFindsInfOnTheDevice) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    Params ps = MakeParams(dtype);
    SetGrads(ps, 0);
    DynamicLossScaler cpu(DynamicLossScaler::Options{}), gpu(DynamicLossScaler::Options{});
    EXPECT_FALSE(cpu.Unscale(ps.cpu));
    EXPECT_FALSE(gpu.Unscale(ps.gpu));
    for (size_t i = 0; i < ps.cpu.size(); ++i)
      EXPECT_EQ(ps.gpu[i].second.grad().ToDoubles(), ps.cpu[i].second.grad().ToDoubles()) << Name(dtype);
    // One inf (and, separately, one NaN) anywhere is found.
    for (double bad : {INFINITY, NAN}) {
      Tensor g = ps.gpu[1].second.grad();
      g.Narrow(0, 3, 1).Fill_(bad);
      EXPECT_TRUE(gpu.Unscale(ps.gpu)) << Name(dtype) << " " << bad;
      g.Narrow(0, 3, 1).Fill_(0.0);
    }
  }
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet::optim
