// CausalAttentionQkvFp8 on a GPU (NOTE [fp8 attention inputs] in
// ops/attention.cc): there the op dequantizes the codes and runs the compute
// dtype's kernels (cuDNN for bf16), where the CPU kernels read the codes
// through a table; both compute on Dequantize(qkv, compute), so the GPU's
// output and gradient match the CPU's within the bf16 attention's
// tolerance, and the codes the GPU keeps are the CPU's bytes. Skips without a GPU.
#include <gtest/gtest.h>

#include <utility>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/attention.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cast.h>
#include "tests/cuda/parity_util.h"
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(AttentionFp8Cuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::AllClose;
using ::octet::testing::RandomTensor;

TEST(AttentionFp8Cuda, KernelsTakeFp8OnlyOnTheCpu) {
  EXPECT_TRUE(attention_reads_fp8(kCPU)(kCPU));
  OCTET_SKIP_WITHOUT_CUDA();
  const Device gpu = ::octet::testing::Gpu();
  EXPECT_FALSE(attention_reads_fp8(gpu)(gpu));
}

TEST(AttentionFp8Cuda, MatchesCpuForwardAndBackward) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Device gpu = ::octet::testing::Gpu();
  const int64_t b = 2, t = 70, h = 4, d = 64, C = h * d;
  const Tensor x = RandomTensor({b, t, 3 * C}, 90, DType::kBFloat16, -3.0, 3.0);
  const Tensor dout = RandomTensor({b, t, C}, 91, DType::kBFloat16);
  auto run = [&](const Device& dev, Tensor* dx) {
    Tensor in = x.detach().To(dev).detach().requires_grad_();
    const Tensor codes = Quantize(in, DType::kFloat8E4M3, 37.0f);
    const Tensor out = CausalAttentionQkvFp8(codes, h, DType::kBFloat16);
    out.Backward(dout.To(dev));
    *dx = in.grad().To(kCPU);
    return std::make_pair(out.To(kCPU), codes.To(kCPU));
  };
  Tensor cpu_dx, gpu_dx;
  const auto [cpu_out, cpu_codes] = run(kCPU, &cpu_dx);
  const auto [gpu_out, gpu_codes] = run(gpu, &gpu_dx);
  EXPECT_EQ(gpu_codes.ToDoubles(), cpu_codes.ToDoubles());
  EXPECT_TRUE(AllClose(gpu_out.To(DType::kFloat32), cpu_out.To(DType::kFloat32), 2e-2, 2e-2));
  EXPECT_TRUE(AllClose(gpu_dx.To(DType::kFloat32), cpu_dx.To(DType::kFloat32), 5e-2, 5e-2));
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
