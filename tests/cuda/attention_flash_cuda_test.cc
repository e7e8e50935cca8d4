// The CUDA flash attention kernels (ops/cuda/attention_flash_cuda.h, NOTE
// [flash attention on CUDA]). Without a GPU: which calls they take
// (FlashAttentionUnsupportedReason) and their shared-memory budgets. On a
// GPU: forward (out, lse) and backward (every subset of dq/dk/dv) against the
// CPU kernels on the same inputs, float32 and float64, sequence lengths
// around the tiles, head dims 16..128, contiguous / fused-projection /
// transposed inputs; and that float32 no longer takes the unfused fallback
// while head dims above 128 still do, counted. The block algorithm itself is
// tested on the CPU in tests/ops/attention_flash_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/attention.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cuda/attention_cuda.h>
#include <octet/ops/cuda/attention_flash_cuda.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/cuda/parity_util.h"
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(FlashAttentionCuda, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using namespace ::octet::cuda;  // NOLINT

constexpr int64_t kH100Smem = 227 * 1024;

TEST(FlashAttentionCuda, TakesFloat32AndFloat64UpToHeadDim128) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3,
                      DType::kInt32}) {
    const bool float_ok = dtype == DType::kFloat32 || dtype == DType::kFloat64;
    for (int64_t d = 0; d <= 300; ++d) {
      const char* reason = FlashAttentionUnsupportedReason(dtype, d, kH100Smem);
      EXPECT_EQ(reason == nullptr, float_ok && d >= 1 && d <= 128) << Name(dtype) << " D=" << d;
      if (!float_ok) {
        ASSERT_NE(reason, nullptr);
        EXPECT_NE(std::string(reason).find("float32 or float64"), std::string::npos) << reason;
      } else if (d > 128) {
        ASSERT_NE(reason, nullptr);
        EXPECT_NE(std::string(reason).find("1..128"), std::string::npos) << reason;
      }
    }
  }
}

// A device with less shared memory per block (e.g. 99 KiB on sm_89) sends
// the calls whose kernels do not fit to the fallback instead of failing.
TEST(FlashAttentionCuda, SharedMemoryLimitDecides) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t d : {1, 64, 65, 128}) {
      const FlashSmemBytes s = FlashAttentionSmemBytes(dtype, d);
      const int64_t need = std::max({s.fwd, s.bwd_kv, s.bwd_q});
      EXPECT_LE(need, kH100Smem) << Name(dtype) << " D=" << d;
      EXPECT_GT(s.fwd, 0);
      EXPECT_EQ(FlashAttentionUnsupportedReason(dtype, d, need), nullptr) << Name(dtype) << " D=" << d;
      const char* reason = FlashAttentionUnsupportedReason(dtype, d, need - 1);
      ASSERT_NE(reason, nullptr);
      EXPECT_NE(std::string(reason).find("shared memory"), std::string::npos) << reason;
    }
  }
  // Padded head dims: everything up to 64 costs the same, 65..128 more.
  EXPECT_EQ(FlashAttentionSmemBytes(DType::kFloat32, 1).fwd, FlashAttentionSmemBytes(DType::kFloat32, 64).fwd);
  EXPECT_LT(FlashAttentionSmemBytes(DType::kFloat32, 64).fwd, FlashAttentionSmemBytes(DType::kFloat32, 65).fwd);
  EXPECT_NE(ErrorOf([] { FlashAttentionSmemBytes(DType::kFloat32, 129); }), "");
  EXPECT_NE(ErrorOf([] { FlashAttentionSmemBytes(DType::kBFloat16, 64); }), "");
}

// ---- on a GPU ----

enum class Layout { kContiguous, kFusedQkv, kTransposed };
const char* LayoutName(Layout l) {
  return l == Layout::kContiguous ? "contiguous" : l == Layout::kFusedQkv ? "fused-qkv" : "transposed";
}

// q, k, v (B,H,T,D) views of the same values on `dev`, laid out as `layout`.
std::vector<Tensor> Inputs(int64_t b, int64_t h, int64_t t, int64_t d, DType dtype, Layout layout, uint64_t seed,
                           const Device& dev) {
  std::vector<Tensor> qkv;
  if (layout == Layout::kFusedQkv) {
    const Tensor all = RandomTensor({b, t, 3, h, d}, seed, dtype, -2, 2).To(dev).Permute({2, 0, 3, 1, 4});
    for (int i = 0; i < 3; ++i) qkv.push_back(all.Select(0, i));
  } else if (layout == Layout::kTransposed) {
    for (int i = 0; i < 3; ++i)
      qkv.push_back(RandomTensor({b, h, d, t}, seed + i, dtype, -2, 2).To(dev).Transpose(2, 3));
  } else {
    for (int i = 0; i < 3; ++i) qkv.push_back(RandomTensor({b, h, t, d}, seed + i, dtype, -2, 2).To(dev));
  }
  return qkv;
}

struct Outputs {
  Tensor out, lse, dq, dk, dv;
};

// Runs the registered kernels of `dev` (CUDA: the dispatch of attention_cudnn.cc).
Outputs RunKernels(const std::vector<Tensor>& qkv, const Tensor& dout, double scale, int grads, const Device& dev) {
  const Tensor& q = qkv[0];
  const TensorOptions io{.dtype = q.dtype(), .device = dev};
  Outputs o;
  o.out = Empty(q.shape(), io);
  o.lse = Empty({q.size(0), q.size(1), q.size(2)}, {.dtype = AttentionLseDtype(q.dtype()), .device = dev});
  causal_attention_fwd(dev)(qkv[0], qkv[1], qkv[2], scale, o.out, o.lse);
  if (grads & 1) o.dq = Empty(q.shape(), io);
  if (grads & 2) o.dk = Empty(q.shape(), io);
  if (grads & 4) o.dv = Empty(q.shape(), io);
  causal_attention_bwd(dev)(qkv[0], qkv[1], qkv[2], o.out, dout, o.lse, scale, o.dq, o.dk, o.dv);
  return o;
}

void CompareWithCpu(DType dtype, int64_t b, int64_t h, int64_t t, int64_t d, Layout layout, int grads, double tol,
                    uint64_t seed) {
  const Device gpu = ::octet::testing::Gpu();
  const std::string what = std::string(Name(dtype)) + " B=" + std::to_string(b) + " H=" + std::to_string(h) +
                           " T=" + std::to_string(t) + " D=" + std::to_string(d) + " " + LayoutName(layout) +
                           " grads=" + std::to_string(grads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const Tensor dout_cpu = RandomTensor({b, h, t, d}, seed + 7, dtype);
  const Outputs cpu = RunKernels(Inputs(b, h, t, d, dtype, layout, seed, kCPU), dout_cpu, scale, grads, kCPU);
  const Outputs dev = RunKernels(Inputs(b, h, t, d, dtype, layout, seed, gpu), dout_cpu.To(gpu), scale, grads, gpu);
  EXPECT_TRUE(AllClose(dev.out.To(kCPU), cpu.out, tol, tol)) << what << " out";
  EXPECT_TRUE(AllClose(dev.lse.To(kCPU), cpu.lse, tol, tol)) << what << " lse";
  if (grads & 1) EXPECT_TRUE(AllClose(dev.dq.To(kCPU), cpu.dq, 4 * tol, 4 * tol)) << what << " dq";
  if (grads & 2) EXPECT_TRUE(AllClose(dev.dk.To(kCPU), cpu.dk, 4 * tol, 4 * tol)) << what << " dk";
  if (grads & 4) EXPECT_TRUE(AllClose(dev.dv.To(kCPU), cpu.dv, 4 * tol, 4 * tol)) << what << " dv";
}

TEST(FlashAttentionCudaDevice, MatchesCpuAcrossShapes) {
  OCTET_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const double tol = dtype == DType::kFloat32 ? 5e-5 : 1e-11;
    for (int64_t t : {1, 31, 33, 64, 65, 200})
      for (int64_t d : {16, 32, 64, 80, 128})
        for (Layout layout : {Layout::kContiguous, Layout::kFusedQkv, Layout::kTransposed})
          CompareWithCpu(dtype, 2, 3, t, d, layout, 7, tol, seed++);
  }
}

TEST(FlashAttentionCudaDevice, EverySubsetOfGradients) {
  OCTET_SKIP_WITHOUT_CUDA();
  for (int grads = 1; grads < 8; ++grads) {
    CompareWithCpu(DType::kFloat32, 1, 2, 130, 64, Layout::kFusedQkv, grads, 5e-5, 50 + grads);
    CompareWithCpu(DType::kFloat64, 1, 2, 70, 48, Layout::kContiguous, grads, 1e-11, 60 + grads);
  }
}

// A larger problem with many blocks in flight (every SM busy, several waves).
TEST(FlashAttentionCudaDevice, GptSizedHeadsMatchCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  CompareWithCpu(DType::kFloat32, 2, 12, 512, 64, Layout::kFusedQkv, 7, 5e-5, 99);
}

// Through the public op: float32 and float64 take the flash kernels (no
// fallback counted); a head dim above 128 still takes the counted fallback.
TEST(FlashAttentionCudaDevice, Float32NoLongerFallsBack) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Device gpu = ::octet::testing::Gpu();
  struct Case {
    DType dtype;
    int64_t d;
    int64_t fallbacks;  // per forward + backward
  };
  for (const Case& c : {Case{DType::kFloat32, 64, 0}, Case{DType::kFloat32, 1, 0}, Case{DType::kFloat64, 128, 0},
                        Case{DType::kFloat32, 136, 2}}) {
    const Tensor qkv = RandomTensor({2, 37, 3, 2, c.d}, 5, c.dtype);
    Tensor all = qkv.To(gpu);
    all.requires_grad_();
    const Tensor view = all.Permute({2, 0, 3, 1, 4});
    const int64_t before = AttentionFallbackCount();
    const Tensor out = CausalAttention(view.Select(0, 0), view.Select(0, 1), view.Select(0, 2));
    Sum(out).Backward();
    EXPECT_EQ(AttentionFallbackCount() - before, c.fallbacks) << Name(c.dtype) << " D=" << c.d;
    EXPECT_TRUE(all.grad().defined());
  }
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
