// The CUDA attention fallback (NOTE [attention fallback] in
// ops/cuda/attention_cudnn.h). Without a GPU: the decision which calls go to
// cuDNN (CudnnAttentionUnsupportedReason) over every dtype and head dims
// 1..320, checked against what the cuDNN graph builder itself accepts
// (graph construction and finalize are host-only); which plan failures count
// as "no engine" (IsCudnnNoEngineError), checked against the error BuildPlan
// really raises here. On a GPU: the public CausalAttention op (forward and
// autograd backward) on float32/float64 with head dims above 128 (smaller
// ones take the flash kernels), whose every call takes the fallback, against
// the same op on the CPU, with the q/k/v slices of a fused projection.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/attention.h>
#include <octet/ops/cuda/attention_cudnn.h>
#include <octet/ops/cuda/cudnn_graph.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/cuda/parity_util.h"
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(AttentionFallback, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using namespace ::octet::cuda;  // NOLINT

const std::vector<DType>& AllDtypes() {
  static const std::vector<DType> all = {DType::kFloat64,    DType::kFloat32,    DType::kFloat16, DType::kBFloat16,
                                         DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt32,   DType::kInt64,
                                         DType::kUInt8,      DType::kBool};
  return all;
}

TEST(AttentionFallback, ReasonIsNullExactlyForWhatTheCudnnGraphsTake) {
  int tried = 0;
  for (DType dtype : AllDtypes()) {
    const bool io_ok = dtype == DType::kBFloat16 || dtype == DType::kFloat16;
    for (int64_t d = 1; d <= 320; ++d) {
      const bool want_cudnn = io_ok && d % 8 == 0 && d <= 256;
      const char* reason = CudnnAttentionUnsupportedReason(dtype, d);
      ASSERT_EQ(reason == nullptr, want_cudnn) << Name(dtype) << " D=" << d;
      if (reason == nullptr) {
        ++tried;
        continue;
      }
      // The reason names the constraint that failed, dtype first.
      const std::string r = reason;
      if (!io_ok) {
        EXPECT_NE(r.find("bfloat16 or float16"), std::string::npos) << Name(dtype) << ": " << r;
      } else {
        EXPECT_NE(r.find("multiple of 8, <= 256"), std::string::npos) << Name(dtype) << " D=" << d << ": " << r;
      }
    }
  }
  EXPECT_EQ(tried, 2 * 32);  // bf16 and f16, D = 8, 16, ..., 256
}

// The decision agrees with the graph builder: every (dtype, D) sent to cuDNN
// builds and finalizes both graphs (an error there would not fall back, it
// would be raised), and every other one is rejected by the builder too.
TEST(AttentionFallback, DecisionAgreesWithTheGraphBuilder) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32, DType::kFloat64}) {
    for (int64_t d : {1, 4, 8, 12, 16, 24, 60, 64, 72, 128, 136, 248, 256, 257, 264, 512}) {
      const bool cudnn = CudnnAttentionUnsupportedReason(dtype, d) == nullptr;
      for (bool backward : {false, true}) {
        const SdpaConfig c = ContiguousSdpaConfig(2, 3, 37, d, dtype, backward);
        const std::string msg = ErrorOf([&] { backward ? BuildSdpaBackwardGraph(c, nullptr) : BuildSdpaForwardGraph(c, nullptr); });
        const std::string what =
            std::string(Name(dtype)) + " D=" + std::to_string(d) + (backward ? " backward" : " forward");
        if (cudnn) {
          EXPECT_EQ(msg, "") << what;
        } else {
          EXPECT_NE(msg, "") << what << ": the builder accepts a config the fallback decision rejects";
        }
      }
    }
  }
}

TEST(AttentionFallback, OnlyNoEngineErrorsCountAsNoEngine) {
  EXPECT_TRUE(
      IsCudnnNoEngineError("cuDNN: no engine for the causal attention forward B=1 H=2 T=16 D=64 bfloat16 graph (14 "
                           "ops): mode A: 0 configs;"));
  // Other plan-lookup failures and execution failures are real errors.
  EXPECT_FALSE(IsCudnnNoEngineError(
      "cuDNN: causal attention forward B=1 H=2 T=16 D=64 bfloat16 graph, heuristics mode A: cudnnBackendFinalize "
      "failed: CUDNN_STATUS_BAD_PARAM"));
  EXPECT_FALSE(
      IsCudnnNoEngineError("cuDNN: causal attention forward: cudnnBackendExecute failed: "
                           "CUDNN_STATUS_EXECUTION_FAILED"));
  EXPECT_FALSE(IsCudnnNoEngineError("CUDA error: out of memory (cuDNN: no engine for ...)"));
  EXPECT_FALSE(IsCudnnNoEngineError(""));
}

// The predicate matches what BuildPlan raises: without a device the
// heuristics offer no engine (tests/cuda/cudnn_graph_test.cc).
TEST(AttentionFallback, NoEnginePredicateMatchesBuildPlansError) {
  if (IsAvailable()) GTEST_SKIP() << "a CUDA device is present: heuristics return real engines";
  for (bool backward : {false, true}) {
    const SdpaConfig c = ContiguousSdpaConfig(1, 2, 37, 64, DType::kBFloat16, backward);
    auto g = backward ? BuildSdpaBackwardGraph(c, nullptr) : BuildSdpaForwardGraph(c, nullptr);
    const std::string msg = ErrorOf([&] { BuildPlan(*g, {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}); });
    ASSERT_NE(msg, "");
    EXPECT_TRUE(IsCudnnNoEngineError(msg)) << msg;
  }
}

// ---- on a GPU ----

// CausalAttention on CUDA (every call falls back: float32/float64 with head
// dims above what the flash kernels take, ops/cuda/attention_flash_cuda.h)
// against CausalAttention on the CPU (the fused kernels), forward and gradients
// through autograd, q/k/v as slices of one (B,T,3,H,D) projection.
TEST(AttentionFallbackDevice, Float32AndFloat64MatchCpuThroughTheOp) {
  OCTET_SKIP_WITHOUT_CUDA() << " (the CPU side of the fallback runs in tests/ops/attention_unfused_test.cc)";
  const Device gpu = ::octet::testing::Gpu();
  struct Case {
    DType dtype;
    int64_t d;
    double tol;
  };
  for (const Case& c : {Case{DType::kFloat32, 136, 1e-4}, Case{DType::kFloat32, 129, 1e-4},
                        Case{DType::kFloat64, 130, 1e-10}}) {
    const int64_t b = 2, t = 37, h = 3;
    const Tensor qkv = RandomTensor({b, t, 3, h, c.d}, 71, c.dtype);  // (B,T,3,H,D)
    const Tensor w = RandomTensor({b, h, t, c.d}, 72, c.dtype);       // the loss weights
    auto run = [&](const Device& dev, std::vector<Tensor>* grads) {
      Tensor all = qkv.detach().To(dev);  // To(kCPU) returns qkv itself: keep requires_grad off it
      all.requires_grad_();
      const Tensor view = all.Permute({2, 0, 3, 1, 4});  // (3,B,H,T,D)
      const Tensor out = CausalAttention(view.Select(0, 0), view.Select(0, 1), view.Select(0, 2), 0.3);
      Sum(Mul(out, w.To(dev))).Backward();
      grads->push_back(all.grad().To(kCPU));
      return out.To(kCPU);
    };
    const int64_t before = AttentionFallbackCount();
    std::vector<Tensor> cpu_grad, gpu_grad;
    const Tensor cpu_out = run(kCPU, &cpu_grad);
    const Tensor gpu_out = run(gpu, &gpu_grad);
    const std::string what = std::string(Name(c.dtype)) + " D=" + std::to_string(c.d);
    EXPECT_EQ(AttentionFallbackCount(), before + 2) << what << ": forward and backward each fall back once";
    EXPECT_TRUE(AllClose(gpu_out, cpu_out, c.tol, c.tol)) << what;
    EXPECT_TRUE(AllClose(gpu_grad[0], cpu_grad[0], 3 * c.tol, 3 * c.tol)) << what << " d(qkv)";
  }
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
