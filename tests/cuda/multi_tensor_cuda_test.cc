// The CUDA multi-tensor kernels (ops/cuda/multi_tensor.cu) against the CPU
// ones (tests/ops/multi_tensor_test.cc checks those against float64): the
// global norm of mixed-dtype lists (more tensors than one launch takes,
// sizes around the chunk size, empty tensors) to float32-accumulation
// tolerance and reproducible bit for bit; clipping by the same norm value
// bit for bit; ClipGradNormTensor on the device. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/core/host_reads.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/multi_tensor_kernels.h>
#include <octet/ops/multi_tensor_plan.h>
#include <octet/optim/clip.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(MultiTensorCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::RandomTensor;

using ::octet::testing::Bytes;

// 150 tensors (three launches for f32), four dtypes, sizes around the chunk.
TensorList MixedList() {
  TensorList xs;
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat32, DType::kFloat16, DType::kFloat64};
  const int64_t sizes[] = {1, 7, kMultiTensorChunk - 1, kMultiTensorChunk, kMultiTensorChunk + 3, 0, 768, 3 * 77777};
  for (int i = 0; i < 150; ++i)
    xs.push_back(RandomTensor({sizes[i % std::size(sizes)]}, 40 + i, dtypes[i % std::size(dtypes)], -2.0, 2.0));
  return xs;
}

TensorList ToGpu(const TensorList& xs) {
  TensorList out;
  for (const Tensor& x : xs) out.push_back(x.To(CUDA(0)));
  return out;
}

TEST(MultiTensorCuda, NormMatchesCpuAndIsReproducible) {
  OCTET_SKIP_WITHOUT_CUDA();
  const TensorList xs = MixedList();
  const TensorList gs = ToGpu(xs);
  Tensor cpu = Empty({}, {.dtype = DType::kFloat64});
  multi_tensor_l2_norm(kCPU)(xs, cpu);
  Tensor gpu = Empty({}, {.dtype = DType::kFloat64, .device = CUDA(0)});
  multi_tensor_l2_norm(CUDA(0))(gs, gpu);
  const double want = cpu.Item();
  EXPECT_NEAR(gpu.Item(), want, 1e-6 * want);
  Tensor again = Empty({}, {.dtype = DType::kFloat64, .device = CUDA(0)});
  multi_tensor_l2_norm(CUDA(0))(gs, again);
  EXPECT_EQ(Bytes(again), Bytes(gpu));
  multi_tensor_l2_norm(CUDA(0))({}, gpu);
  EXPECT_EQ(gpu.Item(), 0.0);
  // inf and NaN reach the norm.
  TensorList bad = {Full({5}, 1.0, {.device = CUDA(0)}), Full({3}, std::numeric_limits<double>::infinity(),
                                                              {.dtype = DType::kBFloat16, .device = CUDA(0)})};
  multi_tensor_l2_norm(CUDA(0))(bad, gpu);
  EXPECT_TRUE(std::isinf(gpu.Item()));
}

TEST(MultiTensorCuda, ClipScaleIsTheCpuBitForBit) {
  OCTET_SKIP_WITHOUT_CUDA();
  const TensorList xs = MixedList();
  for (double total : {123.25, 0.5, std::numeric_limits<double>::infinity()}) {
    TensorList cpu, gpu;
    for (const Tensor& x : xs) {
      cpu.push_back(x.Clone());
      gpu.push_back(x.To(CUDA(0)));
    }
    const Tensor norm = Full({}, total, {.dtype = DType::kFloat64});
    multi_tensor_clip_scale(kCPU)(cpu, norm, 2.0, 1e-6);
    multi_tensor_clip_scale(CUDA(0))(gpu, norm.To(CUDA(0)), 2.0, 1e-6);
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(Bytes(gpu[i]), Bytes(cpu[i])) << "tensor " << i << " total " << total;
  }
}

TEST(MultiTensorCuda, ClipGradNormTensorOnTheDeviceReadsNothing) {
  OCTET_SKIP_WITHOUT_CUDA();
  optim::NamedTensors cpu, gpu;
  for (int i = 0; i < 70; ++i) {
    const DType dt = i % 3 == 0 ? DType::kBFloat16 : DType::kFloat32;
    const Tensor p = RandomTensor({5 + i, 33}, 300 + i, dt);
    const Tensor g = RandomTensor({5 + i, 33}, 600 + i, dt, -3.0, 3.0);
    Tensor pc = p.Clone().requires_grad_(), pg = p.To(CUDA(0)).requires_grad_();
    pc.set_grad(g);
    pg.set_grad(g.To(CUDA(0)));
    cpu.emplace_back("p" + std::to_string(i), pc);
    gpu.emplace_back("p" + std::to_string(i), pg);
  }
  const double want = optim::ClipGradNorm(cpu, 1.0);
  const int64_t before = HostReadCount();
  const Tensor got = optim::ClipGradNormTensor(gpu, 1.0);
  EXPECT_EQ(HostReadCount(), before);
  EXPECT_NEAR(got.Item(), want, 1e-6 * want);
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::vector<double> a = cpu[i].second.grad().ToDoubles(), b = gpu[i].second.grad().To(kCPU).ToDoubles();
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(b[k], a[k], 1e-2 * std::abs(a[k]) + 1e-6) << i << "[" << k << "]";
  }
}

#endif

}  // namespace
}  // namespace octet
