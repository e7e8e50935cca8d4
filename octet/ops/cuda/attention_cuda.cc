// The CUDA causal-attention kernels: cuDNN, flash or the unfused fallback
// (ops/cuda/attention_cuda.h). OCTET_WITH_CUDNN (0 or 1) is set for this file
// alone by CMakeLists.txt.
#include <octet/ops/cuda/attention_cuda.h>

#include <atomic>
#include <string>

#include <octet/core/log.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/attention_unfused.h>
#include <octet/ops/cuda/attention_flash_cuda.h>
#include <octet/ops/registry.h>
#if OCTET_WITH_CUDNN
#include <octet/ops/cuda/attention_cudnn.h>
#endif

namespace octet::cuda {
namespace {

std::atomic<int64_t> g_attention_fallbacks{0};

// Counts a fallback and reports each distinct reason once (core/log.h).
void RecordAttentionFallback(const std::string& reason) {
  g_attention_fallbacks.fetch_add(1);
  OCTET_LOG(kWarning, "causal attention falls back to unfused ops (cuBLASLt + CUDA kernels): ", reason);
}

}  // namespace

bool BuiltWithCudnn() { return OCTET_WITH_CUDNN != 0; }

const char* CudnnAttentionUnsupportedReason(DType dtype, int64_t head_dim) {
  if (!BuiltWithCudnn()) return "this octet was built without cuDNN (OCTET_CUDNN)";
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat16)
    return "cuDNN fused attention takes bfloat16 or float16 inputs";
  if (head_dim % 8 != 0 || head_dim > 256) return "cuDNN fused attention needs a head dim that is a multiple of 8, <= 256";
  return nullptr;
}

bool IsCudnnNoEngineError(std::string_view message) { return message.starts_with("cuDNN: no engine for"); }

int64_t AttentionFallbackCount() { return g_attention_fallbacks.load(); }

namespace {

// NOTE [strided attention outputs on CUDA]: the kernel contract lets out,
// dq, dk and dv have any strides (ops/attention_kernels.h; the CPU kernel
// writes them in place). The CUDA kernels below write contiguous outputs, so
// a strided one is computed into a contiguous temporary and copied: the same
// copies the heads' split and merge made before the contract changed (cuDNN
// takes output strides too; letting it write in place waits for a GPU to
// test it on).
Tensor ContiguousOut(const Tensor& t) {
  return !t.defined() || t.is_contiguous() ? t : Empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
void CopyBack(Tensor dst, const Tensor& computed) {  // a handle: the copy writes dst's storage
  if (dst.defined() && !dst.is_contiguous()) dst.CopyFrom_(computed);
}

void CausalAttentionFwdContiguous(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                                  const Tensor& lse) {
  if (const char* reason = CudnnAttentionUnsupportedReason(q.dtype(), q.size(3))) {
    const char* flash = FlashAttentionUnsupportedReason(q.dtype(), q.size(3), q.device());
    if (flash == nullptr) return CausalAttentionFwdFlash(q, k, v, scale, out, lse);
    RecordAttentionFallback(std::string(reason) + "; " + flash + " (forward, " + Describe(q) + ")");
    return CausalAttentionFwdUnfused(q, k, v, scale, out, lse);
  }
#if OCTET_WITH_CUDNN
  std::string why;
  if (RunCausalAttentionFwdCudnn(q, k, v, scale, out, lse, &why)) return;
  RecordAttentionFallback(why);
#endif
  CausalAttentionFwdUnfused(q, k, v, scale, out, lse);
}

void CausalAttentionBwdContiguous(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& dout, const Tensor& lse, double scale, const Tensor& dq,
                                  const Tensor& dk, const Tensor& dv) {
  if (const char* reason = CudnnAttentionUnsupportedReason(q.dtype(), q.size(3))) {
    const char* flash = FlashAttentionUnsupportedReason(q.dtype(), q.size(3), q.device());
    if (flash == nullptr) return CausalAttentionBwdFlash(q, k, v, out, dout, lse, scale, dq, dk, dv);
    RecordAttentionFallback(std::string(reason) + "; " + flash + " (backward, " + Describe(q) + ")");
    return CausalAttentionBwdUnfused(q, k, v, out, dout, lse, scale, dq, dk, dv);
  }
#if OCTET_WITH_CUDNN
  std::string why;
  if (RunCausalAttentionBwdCudnn(q, k, v, out, dout, lse, scale, dq, dk, dv, &why)) return;
  RecordAttentionFallback(why);
#endif
  CausalAttentionBwdUnfused(q, k, v, out, dout, lse, scale, dq, dk, dv);
}

}  // namespace

void CausalAttentionFwdCuda(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                            const Tensor& lse) {
  const Tensor o = ContiguousOut(out);  // NOTE [strided attention outputs on CUDA]
  CausalAttentionFwdContiguous(q, k, v, scale, o, lse);
  CopyBack(out, o);
}

void CausalAttentionBwdCuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                            const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Tensor cq = ContiguousOut(dq), ck = ContiguousOut(dk), cv = ContiguousOut(dv);
  CausalAttentionBwdContiguous(q, k, v, out, dout, lse, scale, cq, ck, cv);
  CopyBack(dq, cq);
  CopyBack(dk, ck);
  CopyBack(dv, cv);
}

OCTET_REGISTER_KERNEL(causal_attention_fwd, DeviceType::kCUDA, &CausalAttentionFwdCuda);
OCTET_REGISTER_KERNEL(causal_attention_bwd, DeviceType::kCUDA, &CausalAttentionBwdCuda);
// FP8 q, k, v are dequantized by the op first (cuDNN's FP8 attention is not used).
OCTET_REGISTER_KERNEL(attention_reads_fp8, DeviceType::kCUDA, +[](Device) { return false; });

}  // namespace octet::cuda
