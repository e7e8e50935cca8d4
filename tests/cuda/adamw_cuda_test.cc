// CPU-vs-CUDA parity of the fused AdamW kernel (ops/optim_kernels.h,
// ops/cuda/adamw.cu): the same tensors and gradients go through a few steps
// on both devices, in one multi-tensor call each (several tensors, one of
// several chunks, more tensors than one launch takes), for f32 and bf16
// (+ f32 master) parameters and the three state dtypes. The CPU kernel is
// the reference (tests/optim check it against float64 math). The CUDA kernel
// replicates the CPU arithmetic without FMA contraction, so results should be
// equal; the tolerances below still allow one rounding step of each stored
// dtype. Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <octet/core/tensor.h>
#include <octet/ops/optim_kernels.h>
#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet::testing {
namespace {

#if OCTET_WITH_CUDA

enum class State { kFloat32, kBFloat16, kFp8Fp16 };

const char* Name(State s) {
  switch (s) {
    case State::kFloat32: return "f32state";
    case State::kBFloat16: return "bf16state";
    case State::kFp8Fp16: return "fp8f16state";
  }
  return "?";
}

// One parameter with its optimizer state, on one device.
struct Slot {
  Tensor param, master, m, v;
  Tensor m_scale, m_scale_inv, m_amax, v_scale, v_scale_inv, v_amax;
  double weight_decay = 0.0;

  Slot To(Device d) const {
    Slot s;
    auto to = [&](const Tensor& t) { return t.defined() ? t.To(d) : Tensor(); };
    s.param = to(param);
    s.master = to(master);
    s.m = to(m);
    s.v = to(v);
    s.m_scale = to(m_scale);
    s.m_scale_inv = to(m_scale_inv);
    s.m_amax = to(m_amax);
    s.v_scale = to(v_scale);
    s.v_scale_inv = to(v_scale_inv);
    s.v_amax = to(v_amax);
    s.weight_decay = weight_decay;
    return s;
  }

  AdamWTensorArgs Args(const Tensor& grad) const {
    AdamWTensorArgs a;
    a.param = param;
    a.grad = grad;
    a.master = master;
    a.m = m;
    a.v = v;
    a.m_scale = m_scale;
    a.m_scale_inv = m_scale_inv;
    a.m_amax = m_amax;
    a.v_scale = v_scale;
    a.v_scale_inv = v_scale_inv;
    a.v_amax = v_amax;
    a.weight_decay = weight_decay;
    return a;
  }
};

Slot MakeSlot(int64_t n, uint64_t seed, DType param_dtype, State state, double weight_decay) {
  Slot s;
  s.param = RandomTensor({n}, seed, param_dtype);
  if (param_dtype != DType::kFloat32) s.master = s.param.To(DType::kFloat32);
  const TensorOptions f32{DType::kFloat32, kCPU};
  switch (state) {
    case State::kFloat32:
      s.m = Zeros({n}, f32);
      s.v = Zeros({n}, f32);
      break;
    case State::kBFloat16:
      s.m = Zeros({n}, TensorOptions{DType::kBFloat16, kCPU});
      s.v = Zeros({n}, TensorOptions{DType::kBFloat16, kCPU});
      break;
    case State::kFp8Fp16:
      s.m = Zeros({n}, TensorOptions{DType::kFloat8E4M3, kCPU});
      s.v = Zeros({n}, TensorOptions{DType::kFloat16, kCPU});
      s.m_scale = Full({1}, 1.0, f32);
      s.m_scale_inv = Full({1}, 1.0, f32);
      s.m_amax = Zeros({1}, f32);
      s.v_scale = Full({1}, 1.0, f32);
      s.v_scale_inv = Full({1}, 1.0, f32);
      s.v_amax = Zeros({1}, f32);
      break;
  }
  s.weight_decay = weight_decay;
  return s;
}

// Relative tolerance of one rounding step of a stored dtype.
double StoreRtol(DType d) {
  switch (d) {
    case DType::kFloat32: return 2e-6;
    case DType::kBFloat16: return 8e-3;
    case DType::kFloat16: return 1e-3;
    case DType::kFloat8E4M3: return 0.13;
    default: return 0.0;
  }
}

void ExpectSlotsClose(const Slot& cpu, const Slot& gpu, const std::string& what) {
  auto check = [&](const Tensor& c, const Tensor& g, const char* name, double atol) {
    if (!c.defined()) return;
    EXPECT_TRUE(AllClose(g.To(kCPU), c, StoreRtol(c.dtype()), atol)) << what << " " << name;
  };
  check(cpu.param, gpu.param, "param", 1e-7);
  check(cpu.master, gpu.master, "master", 1e-7);
  check(cpu.m, gpu.m, "m", cpu.m.dtype() == DType::kFloat8E4M3 ? 0x1p-9 : 1e-9);
  check(cpu.v, gpu.v, "v", 1e-7);  // f16 subnormal step is 2^-24
  for (auto [c, g, name] : {std::tuple{cpu.m_scale, gpu.m_scale, "m_scale"},
                            std::tuple{cpu.m_scale_inv, gpu.m_scale_inv, "m_scale_inv"},
                            std::tuple{cpu.m_amax, gpu.m_amax, "m_amax"},
                            std::tuple{cpu.v_scale, gpu.v_scale, "v_scale"},
                            std::tuple{cpu.v_scale_inv, gpu.v_scale_inv, "v_scale_inv"},
                            std::tuple{cpu.v_amax, gpu.v_amax, "v_amax"}}) {
    if (c.defined()) EXPECT_TRUE(AllClose(g.To(kCPU), c, 1e-6, 0.0)) << what << " " << name;
  }
}

// Sizes of one multi-tensor call: a multi-chunk tensor (the CUDA chunk is
// 16384 elements), odd sizes, and more tensors than one launch takes (16).
std::vector<int64_t> Sizes() {
  std::vector<int64_t> sizes = {40000, 1000, 7, 16384, 16385};
  for (int i = 0; i < 15; ++i) sizes.push_back(33 + 97 * i);
  return sizes;
}

using ParityParam = std::tuple<DType, DType, State>;  // param, grad, state

class AdamWCudaParity : public ::testing::TestWithParam<ParityParam> {};

// Three steps of one multi-tensor call on both devices, then compares.
void RunParity(const std::vector<int64_t>& sizes, DType param_dtype, DType grad_dtype, State state) {
  const Device gpu = CUDA(0);
  std::vector<Slot> cpu, dev;
  for (size_t i = 0; i < sizes.size(); ++i) {
    cpu.push_back(MakeSlot(sizes[i], 100 + i, param_dtype, state, i % 2 == 0 ? 0.1 : 0.0));
    dev.push_back(cpu.back().To(gpu));
  }
  AdamWHyper h;
  h.lr = 1e-3;
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.eps = 1e-8;
  for (int step = 1; step <= 3; ++step) {
    h.bias_correction1 = 1.0 - std::pow(h.beta1, step);
    h.bias_correction2 = 1.0 - std::pow(h.beta2, step);
    std::vector<AdamWTensorArgs> cpu_args, dev_args;
    for (size_t i = 0; i < sizes.size(); ++i) {
      // Gradients of different magnitudes per tensor and step.
      const double mag = std::ldexp(1.0, static_cast<int>(i % 5) - 2 - step);
      const Tensor g = RandomTensor({sizes[i]}, 1000 * step + i, grad_dtype, -mag, mag);
      cpu_args.push_back(cpu[i].Args(g));
      dev_args.push_back(dev[i].Args(g.To(gpu)));
    }
    adamw_kernel(kCPU)(h, cpu_args);
    adamw_kernel(gpu)(h, dev_args);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    ExpectSlotsClose(cpu[i], dev[i], std::string(Name(state)) + " tensor " + std::to_string(i) +
                                         " (n=" + std::to_string(sizes[i]) + ")");
  }
}

TEST_P(AdamWCudaParity, MatchesCpuOverSteps) {
  OCTET_SKIP_WITHOUT_CUDA();
  const auto [param_dtype, grad_dtype, state] = GetParam();
  RunParity(Sizes(), param_dtype, grad_dtype, state);
}

// NOTE [adamw multi-tensor apply] at its edges: a tensor of more chunks than
// one launch takes (320 x 16384 elements; a scaled-state tensor then runs its
// amax and update passes over several launches), one that fills a launch
// after small tensors (it starts a new one), and an empty tensor in the
// middle of a call (no blocks; its amax is written 0, as on the CPU).
TEST(AdamWCudaLimits, TensorsLargerThanOneLaunchAndEmptyTensors) {
  OCTET_SKIP_WITHOUT_CUDA();
  const std::vector<int64_t> sizes = {7, 1000, 300 * 16384 + 5, 321 * 16384 + 11, 0, 33};
  for (State state : {State::kFloat32, State::kFp8Fp16}) RunParity(sizes, DType::kFloat32, DType::kFloat32, state);
}

INSTANTIATE_TEST_SUITE_P(
    All, AdamWCudaParity,
    ::testing::Values(ParityParam{DType::kFloat32, DType::kFloat32, State::kFloat32},
                      ParityParam{DType::kFloat32, DType::kFloat32, State::kBFloat16},
                      ParityParam{DType::kFloat32, DType::kFloat32, State::kFp8Fp16},
                      ParityParam{DType::kBFloat16, DType::kBFloat16, State::kFloat32},
                      ParityParam{DType::kBFloat16, DType::kBFloat16, State::kBFloat16},
                      ParityParam{DType::kBFloat16, DType::kBFloat16, State::kFp8Fp16},
                      ParityParam{DType::kBFloat16, DType::kFloat32, State::kFp8Fp16}),
    [](const ::testing::TestParamInfo<ParityParam>& info) {
      return std::string(octet::Name(std::get<0>(info.param))) + "_grad_" +
             octet::Name(std::get<1>(info.param)) + "_" + Name(std::get<2>(info.param));
    });

// A step whose gradient is zero everywhere keeps m = v = 0: the amax is 0 and
// the scales must stay as they were (ComputeScale keeps the old scale).
TEST(AdamWCuda, ScaledStateKeepsScalesOnZeroAmax) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Device gpu = CUDA(0);
  Slot cpu = MakeSlot(5000, 7, DType::kFloat32, State::kFp8Fp16, 0.0);
  cpu.m_scale.Fill_(4.0);
  cpu.m_scale_inv.Fill_(0.25);
  Slot dev = cpu.To(gpu);
  AdamWHyper h;
  h.lr = 1e-3;
  h.bias_correction1 = 0.1;
  h.bias_correction2 = 0.001;
  const Tensor g = Zeros({5000});
  const Tensor gf = g.To(DType::kFloat32);
  adamw_kernel(kCPU)(h, {cpu.Args(gf)});
  adamw_kernel(gpu)(h, {dev.Args(gf.To(gpu))});
  ExpectSlotsClose(cpu, dev, "zero gradient");
  EXPECT_EQ(dev.m_scale.To(kCPU).ToDoubles()[0], 4.0);
  EXPECT_EQ(dev.m_scale_inv.To(kCPU).ToDoubles()[0], 0.25);
  EXPECT_EQ(dev.m_amax.To(kCPU).ToDoubles()[0], 0.0);
}

#else  // !OCTET_WITH_CUDA

TEST(AdamWCuda, Skipped) { OCTET_SKIP_WITHOUT_CUDA(); }

#endif

}  // namespace
}  // namespace octet::testing
