// Causal self-attention on CUDA through cuDNN's fused flash-attention engines
// (builds with cuDNN only; the dispatch is ops/cuda/attention_cuda.h).
//
// NOTE [cuDNN composite SDPA]: cuDNN 9.19's SDPA operation descriptors have no
// causal attribute (CUDA_NOTES §2.1), so the forward and backward passes are
// the composite graphs cudnn-frontend builds (CompositeSDPANode /
// CompositeSDPABackwardNode), op for op, which cuDNN recognises as fused
// attention patterns (CUDA_NOTES §2.3-2.4):
//   forward  (14 ops): S = Q·Kᵀ, ·scale, causal mask (row index >= column
//            index, else -inf: GEN_INDEX x2, CMP_GE, BINARY_SELECT), softmax
//            (max, sub, exp, sum, log, stats = max + log(sum), div: P in the
//            I/O dtype), O = P·V.
//   backward (22 ops): softmax_sum = sum_d(dO∘O)·1, P = exp(S·scale - stats)
//            with the causal mask, dV = Pᵀ·dO, dS = (dO·Vᵀ - softmax_sum)∘P·
//            scale, dK = dSᵀ·Q, dQ_accum = dS·K (float32), dQ = identity.
// Layout: logical BHSD; any strides with a unit last stride (BSHD is
// expressed through strides); K (and V in the backward) are given to cuDNN
// transposed by swapping their last two strides. Stats is the float32
// log-sum-exp (B,H,S) the CPU kernel writes too (ops/attention_kernels.h).
// Plans are cached per (device, shape, strides, dtype, direction) in a
// thread-local map, as Transformer Engine does.
//
// Supported by the cuDNN graphs: bfloat16 and float16, head dim a multiple of
// 8 and <= 256.
//
// NOTE [attention fallback]: calls whose dtype or head dim cuDNN does not
// take (CudnnAttentionUnsupportedReason) go to the flash kernels of
// ops/cuda/attention_flash_cuda.h when those take them (float32 and float64,
// head dim <= 128: FlashAttentionUnsupportedReason), which are not a
// fallback and are not counted. The CUDA kernels run a call through the
// unfused ops of ops/attention_unfused.h (cuBLASLt GEMMs, the softmax pieces
// as CUDA kernels) when neither takes it (e.g. float32 with head dim > 128,
// bfloat16 with a head dim that is not a multiple of 8) or when cuDNN has no
// engine for the shape: BuildPlan's "no engine" error (IsCudnnNoEngineError), which the
// plan cache remembers. Any other failure of the plan lookup (a heuristics
// query, a descriptor cuDNN rejects) is raised, not cached. Each fallback is
// counted (AttentionFallbackCount) and reported on stderr once per distinct
// reason (the reason names the call's shape and dtype, like the GEMM
// fallback's reports). Slower and O(T²) in memory, but never a crash and
// never silent. Errors that are not "cuDNN cannot do this" (execution
// failures, bad arguments) are raised, not hidden behind the fallback.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <octet/core/tensor.h>
#include <octet/ops/cuda/attention_cuda.h>
#include <octet/ops/cuda/cudnn_graph.h>

namespace octet::cuda {

// UIDs of the graphs' device and by-value tensors (the variant pack keys).
enum SdpaUid : int64_t {
  kSdpaQ = 1,
  kSdpaK = 2,  // given as Kᵀ
  kSdpaV = 3,  // Vᵀ in the backward graph
  kSdpaO = 4,
  kSdpaStats = 5,
  kSdpaScale = 6,   // by value
  kSdpaNegInf = 7,  // by value
  kSdpaDO = 8,
  kSdpaDQ = 9,
  kSdpaDK = 10,
  kSdpaDV = 11,
  kSdpaSoftmaxSum = 12,  // backward scratch (B,H,S,1) float32
  kSdpaDQAccum = 13,     // backward scratch (B,H,S,D) float32
  kSdpaOne = 14,         // by value
};

using Strides4 = std::array<int64_t, 4>;

// Element strides of a contiguous (B,H,S,D) tensor, and of a (B,S,H,D)
// buffer viewed as BHSD.
Strides4 BhsdStrides(int64_t b, int64_t h, int64_t s, int64_t d);
Strides4 BshdStrides(int64_t b, int64_t h, int64_t s, int64_t d);

// One attention problem: everything its graph and plan depend on.
struct SdpaConfig {
  int device = 0;
  int64_t b = 0, h = 0, s = 0, d = 0;
  DType dtype = DType::kBFloat16;
  bool backward = false;
  // Element strides in (B,H,S,D) order; the last must be 1.
  Strides4 q{}, k{}, v{}, o{};
  Strides4 dout{}, dq{}, dk{}, dv{};  // backward only

  friend bool operator==(const SdpaConfig&, const SdpaConfig&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const SdpaConfig& c) {
    return H::combine(std::move(h), c.device, c.b, c.h, c.s, c.d, c.dtype, c.backward, c.q, c.k, c.v, c.o, c.dout, c.dq,
                      c.dk, c.dv);
  }
};

// A config with contiguous BHSD strides for every tensor.
SdpaConfig ContiguousSdpaConfig(int64_t b, int64_t h, int64_t s, int64_t d, DType dtype, bool backward);

// Builds and finalizes the composite graphs for the GPU of `handle`
// (CudnnHandle(c.device); nullptr only to check the construction on a
// machine without a GPU, NOTE [cudnn graph handle]). Throws octet::Error
// naming the config for unsupported dtypes / head dims and, for anything
// cuDNN rejects, the op and cuDNN's error text.
std::unique_ptr<CudnnGraph> BuildSdpaForwardGraph(const SdpaConfig& c, cudnnHandle_t handle);
std::unique_ptr<CudnnGraph> BuildSdpaBackwardGraph(const SdpaConfig& c, cudnnHandle_t handle);

// Runs one call through cuDNN's fused attention (signatures of
// ops/attention_kernels.h; scale multiplies the scores). The caller (the
// CUDA kernels of ops/cuda/attention_cuda.h) has checked
// CudnnAttentionUnsupportedReason. Returns false, with *why naming the call,
// when cuDNN has no engine for it (the caller falls back); throws for any
// other failure.
bool RunCausalAttentionFwdCudnn(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                                const Tensor& lse, std::string* why);
bool RunCausalAttentionBwdCudnn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& dout, const Tensor& lse, double scale, const Tensor& dq,
                                const Tensor& dk, const Tensor& dv, std::string* why);

// Cached plans on this thread (for tests).
size_t SdpaPlanCacheSize();

}  // namespace octet::cuda
