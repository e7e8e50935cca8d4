// The CUDA entries of the causal-attention kernel tables
// (ops/attention_kernels.h): cuDNN's fused attention where this build has
// cuDNN (OCTET_CUDNN) and cuDNN takes the call, else the flash kernels
// (ops/cuda/attention_flash_cuda.h), else the counted, reported unfused
// fallback (NOTE [attention fallback] in ops/cuda/attention_cudnn.h). In a
// build without cuDNN every bfloat16/float16 call takes the fallback, each
// distinct reason reported once.
#pragma once

#include <cstdint>
#include <string_view>

#include <octet/core/tensor.h>

namespace octet::cuda {

void CausalAttentionFwdCuda(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                            const Tensor& lse);
void CausalAttentionBwdCuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                            const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv);

// Whether this build has the cuDNN attention path.
bool BuiltWithCudnn();

// Why the cuDNN graphs cannot take this dtype / head dim (a sentence; in a
// build without cuDNN, that), or nullptr when cuDNN should be tried. Host
// logic, tested without a GPU.
const char* CudnnAttentionUnsupportedReason(DType dtype, int64_t head_dim);

// Whether an octet::Error message is BuildPlan's "no engine for this graph"
// (ops/cuda/cudnn_graph.h: it starts with "cuDNN: no engine for"), the one
// plan failure that sends a call to the fallback. Host logic.
bool IsCudnnNoEngineError(std::string_view message);

// Calls that took the unfused fallback in this process (NOTE [attention fallback]).
int64_t AttentionFallbackCount();

}  // namespace octet::cuda
