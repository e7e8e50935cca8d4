// GEMM layout logic shared by every backend (host C++, compiled in every
// build; the CUDA GEMM in ops/cuda/gemm_cublaslt.cc executes its decisions and
// tests/ops/gemm_layout_test.cc checks them without a GPU).
//
// A GEMM here is row-major: D[M,N] = op(A)·op(B) with op(A): [M,K] and
// op(B): [K,N]. A is stored [M,K] (trans_a = false) or [K,M] (trans_a = true),
// B is stored [K,N] (trans_b = false) or [N,K] (trans_b = true); every stored
// matrix has unit column stride and a row stride `ld` >= its column count.
//
// NOTE [row-major GEMM on cuBLASLt]: cuBLASLt is column-major. A row-major
// [R,C] buffer with row stride ld is the same bytes as a column-major C×R
// matrix with leading dimension ld, so instead of D = op(A)·op(B) we ask
// cuBLASLt for Dᵀ = op(B)ᵀ·op(A)ᵀ, which it writes column-major — i.e. D
// row-major, for free. cuBLASLt's A is our B and its B is our A:
//   m = N, n = M, k = K
//   transa = trans_b ? T : N,   Adesc = (transa == N ? m×k : k×m), lda = ld_b
//   transb = trans_a ? T : N,   Bdesc = (transb == N ? k×n : n×k), ldb = ld_a
//   Ddesc = m×n, ldd = ld_d.
// For the three GEMMs of a Linear (X[T,Kin], W[Nout,Kin], Y/dY[T,Nout]) this
// gives exactly Transformer Engine's calls (CUDA_NOTES §1.4):
//   fprop  Y  = X·Wᵀ   (TN: transa=T, transb=N; m=Nout, n=T,   k=Kin)
//   dgrad  dX = dY·W   (NN: m=Kin,  n=T,    k=Nout)
//   wgrad  dW = dYᵀ·X  (NT: m=Kin,  n=Nout, k=T)
//
// NOTE [FP8 TN rule]: on sm_89, sm_90 and sm_12x cuBLASLt runs FP8 GEMMs only
// as "TN" (transa=T, transb=N): in row-major terms both operands must be
// stored with K contiguous, A as [M,K] and B as [N,K]. When the requested
// layout is not TN, the operand in the wrong orientation is replaced by its
// transposed FP8 copy (the "column-wise" data the cast-transpose kernel
// emits; same scale_inv for per-tensor scaling). Without such a copy the
// executor builds one (an FP8 transpose, counted by GemmTransposeCopyCount).
// dgrad therefore reads Wᵀ [Kin,Nout] and wgrad reads dYᵀ [Nout,T] and
// Xᵀ [Kin,T], which is why the token count T must be a multiple of 16 too.
//
// NOTE [FP8 alignment and fallback]: cuBLASLt FP8 needs lda % 16 == 0,
// ldb % 16 == 0 (in elements = bytes), an output whose rows are 16-byte
// multiples (m·sizeof(D) % 16, i.e. m % 8 for BF16) and 16-byte aligned
// pointers. A GEMM that misses one of these is repacked ("padded"): both
// operands are copied TN with K rounded up to 16 (zeros add nothing) and the
// output computed with m rounded up, then the valid columns are copied out —
// when the padding adds at most 50% work. Otherwise, and on GPUs without FP8
// tensor cores (< sm_89), it falls back to a BF16 GEMM of the exactly
// converted operands (every FP8 value is a BF16 value) with the product of
// the scale_invs folded into alpha. Both are counted and reported once per
// distinct reason on stderr: never a crash, never silent. E5M2×E5M2 has no
// cuBLASLt kernel and is rejected with an error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <octet/core/dtype.h>
#include <octet/ops/gemm_role.h>

namespace octet {


struct ComputeCapability {
  int major = 0;
  int minor = 0;
  int value() const { return major * 10 + minor; }  // 90 for sm_90
};

// FP8 tensor-core GEMMs exist from sm_89 (Ada) on.
bool Fp8GemmSupported(ComputeCapability cc);
// True where cuBLASLt FP8 GEMMs must be TN: every FP8-capable device except
// 10.0 <= cc < 12.0 and cc >= 13.0 (Transformer Engine's
// nvte_is_non_tn_fp8_gemm_supported, inverted).
bool Fp8GemmRequiresTN(ComputeCapability cc);

// Epilogues fused into the GEMM (CUDA_NOTES §1.5). In row-major terms the
// bias of kBias/kGeluAuxBias and the bias gradient of kDGeluBGrad have length
// N (one per output column); kBGradB reduces our A over K into a vector of
// length M (wgrad: A = dY, so that is dbias[Nout]).
enum class GemmEpilogue : uint8_t { kNone = 0, kBias, kGeluAuxBias, kDGelu, kDGeluBGrad, kBGradB };
const char* Name(GemmEpilogue e);
// Epilogues that read or write the bias pointer / the aux (pre-GELU) matrix.
inline bool EpilogueUsesBias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || e == GemmEpilogue::kGeluAuxBias || e == GemmEpilogue::kDGeluBGrad ||
         e == GemmEpilogue::kBGradB;
}
inline bool EpilogueUsesAux(GemmEpilogue e) {
  return e == GemmEpilogue::kGeluAuxBias || e == GemmEpilogue::kDGelu || e == GemmEpilogue::kDGeluBGrad;
}

// How A/B scale pointers are interpreted (cuBLASLt *_SCALE_MODE).
enum class GemmScaleMode : uint8_t {
  kNone = 0,        // unscaled operand (not FP8)
  kScalar32F,       // one fp32 scale_inv per tensor
  kVec128_32F,      // 1x128 blocks along K (reserved)
  kBlk128x128_32F,  // 128x128 blocks (reserved)
};
const char* Name(GemmScaleMode m);

// Largest power of two dividing `address`, capped at 256 (0 -> 256).
uint32_t PointerAlignment(uintptr_t address);

// What a caller asks for. Strides are in elements.
struct GemmRequest {
  GemmRole role = GemmRole::kGeneral;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;  // A stored [K,M] instead of [M,K]
  bool trans_b = false;  // B stored [N,K] instead of [K,N]
  int64_t lda = 0;       // row stride of A as stored; 0: contiguous
  int64_t ldb = 0;
  int64_t ldd = 0;  // row stride of D [M,N]; 0: contiguous (N)
  DType a_dtype = DType::kFloat32;
  DType b_dtype = DType::kFloat32;
  DType d_dtype = DType::kFloat32;
  // FP8 operands: a contiguous row-major copy of the stored matrix's
  // transpose is available (column-wise data), with this row stride (0: contiguous).
  bool a_has_transpose = false;
  bool b_has_transpose = false;
  int64_t a_transpose_ld = 0;
  int64_t b_transpose_ld = 0;
  // Byte alignment of the pointers (PointerAlignment); 256 when unknown.
  uint32_t align_a = 256, align_b = 256, align_d = 256;
  uint32_t align_a_transpose = 256, align_b_transpose = 256;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  ComputeCapability cc{9, 0};
  bool allow_padding = true;
};

// The three GEMMs of a Linear layer, X[T,Kin], W[Nout,Kin], Y/dY[T,Nout],
// all contiguous row-major. The FP8 transposed copies are declared available
// for the operands whose cached copy a Linear keeps (W for dgrad, X and dY for
// wgrad); the caller can clear the flags.
GemmRequest LinearFprop(int64_t tokens, int64_t in_features, int64_t out_features, DType x_dtype, DType w_dtype,
                        DType y_dtype, ComputeCapability cc);
GemmRequest LinearDgrad(int64_t tokens, int64_t in_features, int64_t out_features, DType dy_dtype, DType w_dtype,
                        DType dx_dtype, ComputeCapability cc);
GemmRequest LinearWgrad(int64_t tokens, int64_t in_features, int64_t out_features, DType dy_dtype, DType x_dtype,
                        DType dw_dtype, ComputeCapability cc);

// One matrix as cuBLASLt sees it (column-major, as stored).
struct LtMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
};

enum class GemmPath : uint8_t {
  kEmpty = 0,     // M == 0 or N == 0: nothing to do
  kZeroK,         // K == 0: D = beta·C (zeros); no GEMM
  kDirect,        // one cuBLASLt call on the operands as given (or their transposed copies)
  kPadded,        // FP8 operands repacked TN with K (and m) padded; see NOTE [FP8 alignment and fallback]
  kBf16Fallback,  // FP8 operands converted to BF16; counted
};
const char* Name(GemmPath p);

// The decision for one GEMM. Operand names in `use_*`/`make_*` are ours
// (row-major A, B); everything in `lt` is cuBLASLt's (A = our B).
struct GemmPlan {
  GemmPath path = GemmPath::kDirect;
  // cuBLASLt call (for kPadded: on the padded buffers).
  bool transa = false;  // CUBLAS_OP_T when true
  bool transb = false;
  int64_t m = 0, n = 0, k = 0;
  LtMatrix a, b, d;                    // a: our B (or its copy); b: our A (or its copy)
  DType lt_a_dtype = DType::kFloat32;  // operand dtypes actually fed to cuBLASLt
  DType lt_b_dtype = DType::kFloat32;
  // Our operands replaced by their transposed copies (FP8 TN rule).
  bool use_transpose_a = false;
  bool use_transpose_b = false;
  // ... of which the copy does not exist yet and must be built.
  bool make_transpose_a = false;
  bool make_transpose_b = false;
  // kPadded: K and N rounded up (padded buffers are contiguous TN:
  // A' [M, k_padded], B' [n_padded, k_padded], D' [M, n_padded]).
  int64_t k_padded = 0;
  int64_t n_padded = 0;
  bool pad_output = false;  // D' is a separate buffer (n_padded != N or D misaligned)
  bool fast_accum = false;  // CUBLASLT_MATMUL_DESC_FAST_ACCUM (FP8 fprop only)
  bool fp8 = false;         // an FP8 GEMM (before any fallback)
  std::string reason;       // why kPadded / kBf16Fallback / a transposed copy
  std::string ToString() const;
};

// Decides how to run `r`. Throws octet::Error (naming shapes and dtypes) for
// E5M2×E5M2, mixed FP8/non-FP8 operands, an FP8 D without FP8 operands,
// negative sizes and ld smaller than the stored row length.
GemmPlan PlanGemm(const GemmRequest& r);

// The BF16 fallback plan of `r` (FP8 operands), as PlanGemm makes it; the
// executor uses it when cuBLASLt finds no FP8 algorithm at run time.
GemmPlan PlanBf16Fallback(const GemmRequest& r, const std::string& reason);

// Round x up to a multiple of m (m > 0).
inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Fallback and transposed-copy counters (process-wide, thread-safe). The
// executor calls Record*; the first occurrence of each distinct reason is
// printed to stderr.
int64_t GemmFallbackCount();
int64_t GemmPaddedCount();
int64_t GemmTransposeCopyCount();
void RecordGemmFallback(const std::string& reason);
void RecordGemmPadded(const std::string& reason);
void RecordGemmTransposeCopy(const std::string& reason);
void ResetGemmCountersForTesting();

// The key of the cuBLASLt descriptor + heuristic cache: everything that
// changes which algorithm cuBLASLt may pick. Pointers themselves are not part
// of it (they are re-set on every call), their alignments are.
struct GemmDescKey {
  int device = 0;
  int cc = 0;  // ComputeCapability::value()
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  bool transa = false, transb = false;
  DType a_dtype = DType::kFloat32, b_dtype = DType::kFloat32, c_dtype = DType::kFloat32, d_dtype = DType::kFloat32,
        bias_dtype = DType::kFloat32;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  GemmScaleMode a_scale_mode = GemmScaleMode::kNone, b_scale_mode = GemmScaleMode::kNone;
  bool fast_accum = false;
  bool d_scale = false;       // D_SCALE_POINTER set (FP8 D)
  bool amax_d = false;        // AMAX_D_POINTER set
  bool alpha_device = false;  // alpha/beta read from device memory (BF16 fallback)
  int64_t aux_ld = 0;
  int32_t batch = 1;  // strided batch (BATCH_COUNT); strides in elements
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  uint32_t align_a = 256, align_b = 256, align_c = 256, align_d = 256;
  // Alignments of the bias and aux pointers, each on its own: the heuristic
  // reads both pointer values.
  uint32_t align_bias = 256, align_aux = 256;
  uint64_t workspace_bytes = 0;
  int32_t sm_count_target = 0;

  friend bool operator==(const GemmDescKey& x, const GemmDescKey& y);
  friend bool operator!=(const GemmDescKey& x, const GemmDescKey& y) { return !(x == y); }
  template <typename H>
  friend H AbslHashValue(H h, const GemmDescKey& key) {
    return H::combine(std::move(h), key.device, key.cc, key.m, key.n, key.k, key.lda, key.ldb, key.ldc, key.ldd,
                      key.transa, key.transb, key.a_dtype, key.b_dtype, key.c_dtype, key.d_dtype, key.bias_dtype,
                      key.epilogue, key.a_scale_mode, key.b_scale_mode, key.fast_accum, key.d_scale, key.amax_d,
                      key.alpha_device, key.aux_ld, key.batch, key.stride_a, key.stride_b, key.stride_d, key.align_a,
                      key.align_b, key.align_c, key.align_d, key.align_bias, key.align_aux, key.workspace_bytes, key.sm_count_target);
  }
  std::string ToString() const;
};

// absl::Hash of the key (for tests and for non-absl maps).
size_t HashOf(const GemmDescKey& key);

}  // namespace octet
