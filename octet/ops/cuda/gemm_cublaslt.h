// The one GEMM entry point of the CUDA backend: cuBLASLt for float32,
// float64, bfloat16, float16 and FP8 (E4M3/E5M2 with per-tensor scales).
// Layout, alignment, padding and fallback decisions are ops/gemm_layout.h's
// (NOTE [row-major GEMM on cuBLASLt], NOTE [FP8 TN rule], NOTE [FP8 alignment
// and fallback]); this file turns them into cuBLASLt descriptors and calls
// (CUDA_NOTES §1.1), caching descriptors and the heuristic's algorithm per
// GemmDescKey (thread-local, like the cuBLASLt handle).
//
// NOTE [cuBLASLt descriptor cache]: a cache entry holds the matmul
// descriptor, the four matrix layouts, the preference and the algorithm the
// heuristic chose for its key. Everything in the key is written once, at
// creation; the pointer attributes (A/B/D scale, AMAX_D, bias, aux) are
// re-set on every call. Pointer *alignments* are in the key, because the
// heuristic reads the bias/aux pointer values and the MIN_ALIGNMENT
// preferences to choose kernels. A heuristic that returns no algorithm (or
// CUBLAS_STATUS_NOT_SUPPORTED) is cached too: an FP8 GEMM then takes the
// counted BF16 fallback, any other GEMM throws an error naming the key.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include <octet/core/tensor.h>
#include <octet/ops/gemm_layout.h>

namespace octet::cuda {

// One row-major operand as stored (see GemmRequest for the orientation).
struct GemmOperand {
  const void* data = nullptr;
  int64_t ld = 0;  // row stride in elements; 0: contiguous
  DType dtype = DType::kFloat32;
  const float* scale_inv = nullptr;  // FP8: device fp32 [1], the dequantization factor
  // FP8: a contiguous row-major copy of the stored matrix's transpose
  // (column-wise data, same scale_inv), or null. Used on TN-only GPUs.
  const void* transposed = nullptr;
  int64_t transposed_ld = 0;  // 0: contiguous
};

// D[M,N] = alpha · op(A)·op(B) (+ beta · D) (+ epilogue), row-major.
struct GemmArgs {
  int device = 0;
  GemmRole role = GemmRole::kGeneral;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;  // A stored [K,M]
  bool trans_b = false;  // B stored [N,K]
  GemmOperand a, b;
  void* d = nullptr;
  DType d_dtype = DType::kFloat32;
  int64_t ldd = 0;                 // 0: contiguous
  const float* d_scale = nullptr;  // FP8 D: device fp32 [1] quantization scale (required)
  float* d_amax = nullptr;         // FP8 D: device fp32 [1], max |D| before scaling (optional)
  float alpha = 1.0f;
  float beta = 0.0f;  // != 0: accumulate into D (C aliases D); not for an FP8 D
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  // kBias/kGeluAuxBias: bias [N] (input). kDGeluBGrad: dbias [N] (output).
  // kBGradB: dbias [M] (output). Dtype: D's for non-FP8 GEMMs; for FP8
  // operands bfloat16 (float16 when D is float16; either for an FP8 D).
  const void* bias = nullptr;
  DType bias_dtype = DType::kBFloat16;
  // kGeluAuxBias: pre-GELU output [M, aux_ld] (written); kDGelu/kDGeluBGrad:
  // the saved pre-GELU input. D's dtype (float16/bfloat16/float32), aux_ld
  // a multiple of 8 and >= N.
  void* aux = nullptr;
  int64_t aux_ld = 0;
  // Strided batch: `batch` GEMMs with operand/output offsets (elements).
  int32_t batch = 1;
  int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_d = 0;
  bool allow_padding = true;
  // When set and cuBLASLt has no algorithm for this GEMM with its epilogue
  // (or, for FP8 with a GELU aux epilogue, the GEMM would need padding or the
  // BF16 fallback), sets *epilogue_unsupported = true and returns without
  // writing anything: the caller then runs it without the epilogue and
  // applies that itself, instead of an error (non-FP8) or the BF16 fallback
  // of the whole GEMM (FP8).
  bool* epilogue_unsupported = nullptr;
  int32_t sm_count_target = 0;  // CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET when > 0
};

// Runs args on CurrentStream(args.device). Throws octet::Error (naming the
// shape, dtypes and the cuBLASLt status) for invalid arguments and for a
// non-FP8 GEMM cuBLASLt cannot run; FP8 GEMMs that cannot run as FP8 take the
// counted BF16 fallback (GemmFallbackCount()).
void CublasLtGemm(const GemmArgs& args);

// Tensor form for 2-D tensors on one CUDA device: d = op(a)·op(b) with
// op = transpose when trans_*; transposed views (unit row stride) are
// recognised and read without a copy. FP8 operands use their ScaleMeta's
// scale_inv; an FP8 d uses d's ScaleMeta scale (and writes its amax).
void CublasLtMatmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& d,
                    GemmRole role = GemmRole::kGeneral, float alpha = 1.0f, float beta = 0.0f);

// ---- internals exposed for tests (all of them work without a GPU) ----

// cudaDataType_t of an octet dtype; throws for dtypes cuBLASLt has no type for.
cudaDataType_t CudaDataType(DType dtype);
// "CUBLAS_STATUS_NOT_SUPPORTED (the operation or data type ...)".
std::string CublasStatusText(cublasStatus_t status);

// The cuBLASLt-side pointers of one call (cuBLASLt's A is our B: a_scale is
// our B's scale_inv).
struct LtPointers {
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  const void* d_scale = nullptr;
  void* amax_d = nullptr;
  const void* bias = nullptr;
  void* aux = nullptr;
};

// Owns the descriptors of one GEMM configuration.
class LtDescriptors {
 public:
  LtDescriptors() = default;
  ~LtDescriptors();
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;

  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
};

// Creates and configures every descriptor of `key` (CUDA_NOTES §1.1 steps
// 2-4): compute/scale type, TRANSA/B, FAST_ACCUM, A/B(/D)_SCALE_MODE,
// EPILOGUE (+ BIAS_DATA_TYPE, EPILOGUE_AUX_LD), POINTER_MODE, SM_COUNT_TARGET,
// the four layouts (C is BF16, or the bias type, for an FP8 D) with batch
// attributes, and the preference (MAX_WORKSPACE_BYTES, MIN_ALIGNMENT_*).
// Every cuBLASLt status is checked. Host-only calls: works without a GPU.
std::unique_ptr<LtDescriptors> CreateLtDescriptors(const GemmDescKey& key);

// Writes the per-call pointer attributes of `key`'s configuration into op.
void SetLtPointers(cublasLtMatmulDesc_t op, const GemmDescKey& key, const LtPointers& ptrs);

// The error text for a heuristic that found nothing (status NOT_SUPPORTED or
// zero results): names the key (shape, dtypes, layout, epilogue) and status.
std::string UnsupportedGemmMessage(const GemmDescKey& key, cublasStatus_t status, int returned);

// The GEMM workspace size for a device of compute capability cc: 32 MiB +
// 1 KiB on sm_90 and newer, 4 MiB before (Transformer Engine's sizes).
uint64_t GemmWorkspaceBytes(ComputeCapability cc);

// Entries in this thread's descriptor cache (for tests).
size_t GemmDescriptorCacheSize();

}  // namespace octet::cuda
