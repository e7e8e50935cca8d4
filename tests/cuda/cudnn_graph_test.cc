// cuDNN composite causal-attention graphs (ops/cuda/attention_cudnn.h),
// checked without a GPU (graph construction and finalize are host-only,
// CUDA_NOTES §5): the forward (14 ops) and backward (22 ops) graphs finalize
// for BHSD and BSHD strides and both I/O dtypes; a wrong shape is rejected
// with cuDNN's own error text inside the octet::Error; heuristics mode A
// offers no engine config here and the plan builder reports "no engine"
// cleanly. On a GPU the attention kernels, cuDNN and the unfused fallback
// (whose decision logic tests/cuda/attention_fallback_test.cc checks), are
// compared with the CPU kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include "absl/hash/hash.h"
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cuda/attention_cudnn.h>
#include <octet/ops/cuda/cudnn_graph.h>
#include <octet/ops/cuda/cudnn_handle.h>
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(CudnnGraph, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using namespace ::octet::cuda;  // NOLINT

TEST(CudnnGraph, ForwardGraphFinalizesWith14OpsInFrontendOrder) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    auto g = BuildSdpaForwardGraph(ContiguousSdpaConfig(2, 4, 128, 64, dt, /*backward=*/false), nullptr);
    ASSERT_TRUE(g->finalized());
    EXPECT_EQ(g->op_count(), 14);
    const std::vector<std::string> expected = {
        "bmm1", "attn_scale", "gen_row_index", "gen_col_index", "row_ge_col", "causal_select", "max",
        "sub",  "exp",        "sum",           "log",           "add",        "div",           "bmm2"};
    EXPECT_EQ(g->op_names(), expected);
    EXPECT_GT(g->EngineGlobalCount(), 0);
    // K enters transposed: dims (B,H,D,S), its last two strides swapped.
    const CudnnTensorInfo& kt = g->info(kSdpaK);
    EXPECT_EQ(kt.dims, (std::vector<int64_t>{2, 4, 64, 128}));
    EXPECT_EQ(kt.strides, (std::vector<int64_t>{4 * 128 * 64, 128 * 64, 1, 64}));
    const CudnnTensorInfo& stats = g->info(kSdpaStats);
    EXPECT_EQ(stats.type, CUDNN_DATA_FLOAT);
    EXPECT_EQ(stats.dims, (std::vector<int64_t>{2, 4, 128, 1}));
    EXPECT_TRUE(g->info(kSdpaScale).by_value);
    EXPECT_TRUE(g->info(kSdpaNegInf).by_value);
  }
}

TEST(CudnnGraph, BshdStridesFinalize) {
  SdpaConfig c = ContiguousSdpaConfig(2, 12, 64, 64, DType::kBFloat16, false);
  // Q, K, V as views of one (B,T,3,H,D) qkv buffer; O as (B,T,H,D).
  const int64_t b = 2, h = 12, s = 64, d = 64;
  c.q = c.k = c.v = {s * 3 * h * d, d, 3 * h * d, 1};
  c.o = BshdStrides(b, h, s, d);
  auto g = BuildSdpaForwardGraph(c, nullptr);
  EXPECT_EQ(g->op_count(), 14);
  EXPECT_EQ(g->info(kSdpaQ).strides, (std::vector<int64_t>{s * 3 * h * d, d, 3 * h * d, 1}));
  EXPECT_EQ(g->info(kSdpaO).strides, (std::vector<int64_t>{s * h * d, d, h * d, 1}));
}

TEST(CudnnGraph, BackwardGraphFinalizesWith22Ops) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    SdpaConfig c = ContiguousSdpaConfig(2, 4, 128, 64, dt, /*backward=*/true);
    c.dout = BshdStrides(2, 4, 128, 64);  // a strided dO
    auto g = BuildSdpaBackwardGraph(c, nullptr);
    ASSERT_TRUE(g->finalized());
    EXPECT_EQ(g->op_count(), 22);
    const std::vector<std::string>& ops = g->op_names();
    EXPECT_EQ(ops.front(), "mul_dO_O");
    EXPECT_EQ(ops[2], "scale_dropout_inv");  // the MUL by 1 FE keeps without dropout
    EXPECT_EQ(ops.back(), "identity_dQ");
    EXPECT_EQ(g->info(kSdpaDQAccum).type, CUDNN_DATA_FLOAT);
    EXPECT_FALSE(g->info(kSdpaSoftmaxSum).is_virtual);
    EXPECT_EQ(g->info(kSdpaV).dims, (std::vector<int64_t>{2, 4, 64, 128}));  // Vᵀ
    EXPECT_GT(g->EngineGlobalCount(), 0);
  }
}

TEST(CudnnGraph, WrongShapeIsRejectedWithCudnnText) {
  CudnnGraph g("bad matmul");
  const int64_t q = g.Tensor("Q", 1, CUDNN_DATA_BFLOAT16, {1, 1, 16, 64}, {1024, 1024, 64, 1});
  const int64_t kt = g.Tensor("K^T", 2, CUDNN_DATA_BFLOAT16, {1, 1, 64, 16}, {1024, 1024, 1, 64});
  const int64_t s = g.Virtual("S", CUDNN_DATA_FLOAT, {1, 1, 16, 8}, {128, 128, 8, 1});  // should be 16x16
  const std::string msg = ErrorOf([&] {
    g.Matmul("bmm1", q, kt, s);
    g.Finalize(nullptr);
  });
  ASSERT_FALSE(msg.empty()) << "cuDNN accepted a 16x64 · 64x16 matmul into 16x8";
  EXPECT_NE(msg.find("cuDNN: bad matmul graph"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("no further text from cuDNN"), std::string::npos) << "cuDNN's own text is missing: " << msg;
  // A tensor without dims.
  CudnnGraph e("empty");
  const std::string msg2 = ErrorOf([&] { e.Tensor("nodims", 1, CUDNN_DATA_FLOAT, {}, {}); });
  EXPECT_NE(msg2.find("tensor 'nodims'"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << msg2;
}

TEST(CudnnGraph, BuilderChecksItsOwnArguments) {
  CudnnGraph g("args");
  g.Tensor("X", 1, CUDNN_DATA_FLOAT, {1, 1, 4, 4}, {16, 16, 4, 1});
  EXPECT_NE(ErrorOf([&] {
              g.Tensor("Y", 1, CUDNN_DATA_FLOAT, {1, 1, 4, 4}, {16, 16, 4, 1});
            }).find("reuses UID 1 of 'X'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              g.Tensor("Z", 2, CUDNN_DATA_FLOAT, {1, 4}, {4});
            }).find("differ in rank"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { g.Finalize(nullptr); }).find("no operations"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { g.Matmul("mm", 1, 77, 1); }).find("no tensor with UID 77"), std::string::npos);
}

TEST(CudnnGraph, UnsupportedConfigsNameTheProblem) {
  std::string msg = ErrorOf([] { BuildSdpaForwardGraph(ContiguousSdpaConfig(1, 2, 16, 60, DType::kBFloat16, false), nullptr); });
  EXPECT_NE(msg.find("multiple of 8 and at most 256, got 60"), std::string::npos) << msg;
  EXPECT_NE(msg.find("B=1 H=2 T=16 D=60 bfloat16"), std::string::npos) << msg;
  msg = ErrorOf([] { BuildSdpaForwardGraph(ContiguousSdpaConfig(1, 2, 16, 64, DType::kFloat32, false), nullptr); });
  EXPECT_NE(msg.find("the cuDNN attention graphs take bfloat16 or float16"), std::string::npos) << msg;
  SdpaConfig c = ContiguousSdpaConfig(1, 2, 16, 64, DType::kBFloat16, false);
  c.q[3] = 2;
  msg = ErrorOf([&] { BuildSdpaForwardGraph(c, nullptr); });
  EXPECT_NE(msg.find("unit stride"), std::string::npos) << msg;
}

TEST(CudnnGraph, NoDeviceHeuristicsReportNoEngineCleanly) {
  if (IsAvailable()) GTEST_SKIP() << "a CUDA device is present: heuristics return real engines";
  auto fwd = BuildSdpaForwardGraph(ContiguousSdpaConfig(2, 4, 128, 64, DType::kBFloat16, false), nullptr);
  EXPECT_EQ(HeuristicConfigCount(*fwd, CUDNN_HEUR_MODE_A), 0);
  std::string msg = ErrorOf([&] { BuildPlan(*fwd, {CUDNN_HEUR_MODE_A}); });
  EXPECT_NE(msg.find("cuDNN: no engine for the causal attention forward B=2 H=4 T=128 D=64 bfloat16 graph (14 ops)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("mode A: 0 configs"), std::string::npos) << msg;
  // FALLBACK offers configs but none finalizes into a plan without a device.
  const int64_t fallback = HeuristicConfigCount(*fwd, CUDNN_HEUR_MODE_FALLBACK);
  msg = ErrorOf([&] { BuildPlan(*fwd, {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}); });
  EXPECT_NE(msg.find("mode FALLBACK: " + std::to_string(fallback) + " config"), std::string::npos) << msg;
  auto bwd = BuildSdpaBackwardGraph(ContiguousSdpaConfig(2, 4, 128, 64, DType::kBFloat16, true), nullptr);
  EXPECT_EQ(HeuristicConfigCount(*bwd, CUDNN_HEUR_MODE_A), 0);
  EXPECT_NE(ErrorOf([&] { BuildPlan(*bwd, {CUDNN_HEUR_MODE_A}); }).find("(22 ops): mode A: 0 configs"),
            std::string::npos);
}

TEST(CudnnGraph, ConfigKeyDistinguishesLayouts) {
  const SdpaConfig a = ContiguousSdpaConfig(2, 4, 128, 64, DType::kBFloat16, false);
  SdpaConfig b = a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(absl::Hash<SdpaConfig>{}(a), absl::Hash<SdpaConfig>{}(b));
  b.o = BshdStrides(2, 4, 128, 64);
  EXPECT_NE(a, b);
  SdpaConfig c = a;
  c.backward = true;
  EXPECT_NE(a, c);
  SdpaConfig d = a;
  d.device = 1;
  EXPECT_NE(a, d);
}

// ---- on a GPU: cuDNN vs the CPU kernels ----

TEST(CudnnAttentionDevice, ForwardAndBackwardMatchCpu) {
  OCTET_SKIP_WITHOUT_CUDA();
  const int64_t B = 2, H = 3, T = 64, D = 64;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Tensor q = RandomTensor({B, H, T, D}, 1, DType::kBFloat16);
  Tensor k = RandomTensor({B, H, T, D}, 2, DType::kBFloat16);
  Tensor v = RandomTensor({B, H, T, D}, 3, DType::kBFloat16);
  Tensor dout = RandomTensor({B, H, T, D}, 4, DType::kBFloat16);
  // CPU reference in float32 from the same bf16 values.
  auto f32 = [](const Tensor& t) { return t.To(DType::kFloat32); };
  Tensor out_ref = Empty({B, H, T, D}), lse_ref = Empty({B, H, T});
  causal_attention_fwd(kCPU)(f32(q), f32(k), f32(v), scale, out_ref, lse_ref);
  Tensor dq_ref = Empty({B, H, T, D}), dk_ref = Empty({B, H, T, D}), dv_ref = Empty({B, H, T, D});
  causal_attention_bwd(kCPU)(f32(q), f32(k), f32(v), out_ref, f32(dout), lse_ref, scale, dq_ref, dk_ref, dv_ref);

  const Device gpu = CUDA(0);
  Tensor qg = q.To(gpu), kg = k.To(gpu), vg = v.To(gpu), dg = dout.To(gpu);
  Tensor out = Empty({B, H, T, D}, {.dtype = DType::kBFloat16, .device = gpu});
  Tensor lse = Empty({B, H, T}, {.dtype = DType::kFloat32, .device = gpu});
  CausalAttentionFwdCuda(qg, kg, vg, scale, out, lse);
  EXPECT_TRUE(AllClose(out.To(kCPU).To(DType::kFloat32), out_ref, 2e-2, 2e-2));
  EXPECT_TRUE(AllClose(lse.To(kCPU), lse_ref, 1e-3, 1e-3));
  Tensor dq = Empty({B, H, T, D}, {.dtype = DType::kBFloat16, .device = gpu});
  Tensor dk = Empty({B, H, T, D}, {.dtype = DType::kBFloat16, .device = gpu});
  Tensor dv = Empty({B, H, T, D}, {.dtype = DType::kBFloat16, .device = gpu});
  CausalAttentionBwdCuda(qg, kg, vg, out, dg, lse, scale, dq, dk, dv);
  EXPECT_TRUE(AllClose(dq.To(kCPU).To(DType::kFloat32), dq_ref, 5e-2, 5e-2));
  EXPECT_TRUE(AllClose(dk.To(kCPU).To(DType::kFloat32), dk_ref, 5e-2, 5e-2));
  EXPECT_TRUE(AllClose(dv.To(kCPU).To(DType::kFloat32), dv_ref, 5e-2, 5e-2));
  EXPECT_EQ(SdpaPlanCacheSize(), 2u);
  // Same shapes again: plans come from the cache.
  CausalAttentionFwdCuda(qg, kg, vg, scale, out, lse);
  EXPECT_EQ(SdpaPlanCacheSize(), 2u);
}

// NOTE [cudnn graph handle]: the graphs the attention op builds carry the
// device's handle, and with it cuDNN has a native engine for bf16/f16 on
// sm_80+ (on an H100 without it every engine refused: ARCH_MISMATCH).
TEST(CudnnAttentionDevice, GraphsCarryTheDeviceHandleAndGetAnEngine) {
  OCTET_SKIP_WITHOUT_CUDA();
  const cudnnHandle_t handle = CudnnHandle(0);
  for (bool backward : {false, true}) {
    for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
      const SdpaConfig c = ContiguousSdpaConfig(2, 4, 128, 64, dt, backward);
      auto g = backward ? BuildSdpaBackwardGraph(c, handle) : BuildSdpaForwardGraph(c, handle);
      EXPECT_EQ(g->handle(), handle);
      cudnnHandle_t back = nullptr;
      int64_t n = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
      ASSERT_EQ(cudnnBackendGetAttribute(g->graph(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &n, &back),
                CUDNN_STATUS_SUCCESS);
#pragma GCC diagnostic pop
      EXPECT_EQ(n, 1);
      EXPECT_EQ(back, handle);
      if (Props(0).major >= 8) {
        EXPECT_NO_THROW(BuildPlan(*g, {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}))
            << (backward ? "backward " : "forward ") << Name(dt) << " on sm_" << Props(0).major << Props(0).minor;
      }
    }
  }
  // A graph finalized without the handle is a loud error on a machine with a
  // GPU, never a quiet "no engine" that would send every call to the fallback.
  auto bare = BuildSdpaForwardGraph(ContiguousSdpaConfig(2, 4, 128, 64, DType::kBFloat16, false), nullptr);
  const std::string msg = ErrorOf([&] { BuildPlan(*bare, {CUDNN_HEUR_MODE_A}); });
  EXPECT_NE(msg.find("graph was finalized without a cuDNN handle"), std::string::npos) << msg;
  EXPECT_FALSE(IsCudnnNoEngineError(msg)) << msg;
}

// The test that fails if a supported call takes the fallback: bf16/f16 with a
// head dim cuDNN supports on sm_80+, forward and backward through the op.
TEST(CudnnAttentionDevice, SupportedCallsNeverTakeTheFallback) {
  OCTET_SKIP_WITHOUT_CUDA();
  if (Props(0).major < 8) GTEST_SKIP() << "cuDNN's fused attention needs sm_80+, this is sm_" << Props(0).major;
  const Device gpu = CUDA(0);
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    for (int64_t d : {64, 128}) {
      const Shape shape{2, 3, 80, d};
      const TensorOptions io{.dtype = dt, .device = gpu};
      Tensor q = RandomTensor(shape, 11, dt).To(gpu), k = RandomTensor(shape, 12, dt).To(gpu);
      Tensor v = RandomTensor(shape, 13, dt).To(gpu), dout = RandomTensor(shape, 14, dt).To(gpu);
      const int64_t before = AttentionFallbackCount();
      Tensor out = Empty(shape, io), lse = Empty({2, 3, 80}, {.device = gpu});
      CausalAttentionFwdCuda(q, k, v, 0.125, out, lse);
      Tensor dq = Empty(shape, io), dk = Empty(shape, io), dv = Empty(shape, io);
      CausalAttentionBwdCuda(q, k, v, out, dout, lse, 0.125, dq, dk, dv);
      EXPECT_EQ(AttentionFallbackCount(), before) << Name(dt) << " D=" << d << " took the unfused fallback";
    }
  }
}

// float32 with a head dim above 128 (smaller ones take the flash kernels of
// ops/cuda/attention_flash_cuda.h) and bf16 with a head dim cuDNN cannot take
// run the unfused fallback on the GPU and match the CPU kernels; each call is counted.
TEST(CudnnAttentionDevice, FallbackMatchesCpuAndIsCounted) {
  OCTET_SKIP_WITHOUT_CUDA();
  const Device gpu = CUDA(0);
  struct Case {
    DType dtype;
    int64_t d;
    double tol;
  };
  for (const Case& c : {Case{DType::kFloat32, 136, 1e-4}, Case{DType::kFloat32, 129, 1e-4},
                        Case{DType::kBFloat16, 12, 3e-2}}) {
    const int64_t B = 2, H = 2, T = 37;
    const Shape shape{B, H, T, c.d};
    Tensor q = RandomTensor(shape, 5, c.dtype), k = RandomTensor(shape, 6, c.dtype), v = RandomTensor(shape, 7, c.dtype);
    Tensor dout = RandomTensor(shape, 8, c.dtype);
    auto f32 = [](const Tensor& t) { return t.To(DType::kFloat32); };
    Tensor out_ref = Empty(shape), lse_ref = Empty({B, H, T});
    causal_attention_fwd(kCPU)(f32(q), f32(k), f32(v), 0.3, out_ref, lse_ref);
    Tensor dq_ref = Empty(shape), dk_ref = Empty(shape), dv_ref = Empty(shape);
    causal_attention_bwd(kCPU)(f32(q), f32(k), f32(v), out_ref, f32(dout), lse_ref, 0.3, dq_ref, dk_ref, dv_ref);
    const int64_t before = AttentionFallbackCount();
    const TensorOptions io{.dtype = c.dtype, .device = gpu};
    Tensor out = Empty(shape, io), lse = Empty({B, H, T}, {.device = gpu});
    CausalAttentionFwdCuda(q.To(gpu), k.To(gpu), v.To(gpu), 0.3, out, lse);
    Tensor dq = Empty(shape, io), dk = Empty(shape, io), dv = Empty(shape, io);
    CausalAttentionBwdCuda(q.To(gpu), k.To(gpu), v.To(gpu), out, dout.To(gpu), lse, 0.3, dq, dk, dv);
    EXPECT_EQ(AttentionFallbackCount(), before + 2) << Name(c.dtype) << " D=" << c.d;
    EXPECT_TRUE(AllClose(out.To(kCPU).To(DType::kFloat32), out_ref, c.tol, c.tol)) << Name(c.dtype) << " D=" << c.d;
    EXPECT_TRUE(AllClose(lse.To(kCPU), lse_ref, 1e-4, 1e-4)) << Name(c.dtype) << " D=" << c.d;
    EXPECT_TRUE(AllClose(dq.To(kCPU).To(DType::kFloat32), dq_ref, 3 * c.tol, 3 * c.tol)) << Name(c.dtype);
    EXPECT_TRUE(AllClose(dk.To(kCPU).To(DType::kFloat32), dk_ref, 3 * c.tol, 3 * c.tol)) << Name(c.dtype);
    EXPECT_TRUE(AllClose(dv.To(kCPU).To(DType::kFloat32), dv_ref, 3 * c.tol, 3 * c.tol)) << Name(c.dtype);
  }
}

// The handle follows the thread's current stream (moved here from
// device_context_test: cuDNN is optional, OCTET_CUDNN).
TEST(CudnnHandle, FollowsTheCurrentStream) {
  OCTET_SKIP_WITHOUT_CUDA();
  cudnnHandle_t dnn = CudnnHandle(0);
  cudaStream_t s = nullptr;
  OCTET_CUDNN_CHECK(cudnnGetStream(dnn, &s));
  EXPECT_EQ(s, CurrentStream(0));
  cudnnHandle_t other = nullptr;
  std::thread([&] { other = CudnnHandle(0); }).join();
  EXPECT_NE(other, nullptr);
  EXPECT_NE(other, dnn);
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
