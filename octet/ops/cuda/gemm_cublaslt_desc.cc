// cuBLASLt descriptor set-up of the CUDA GEMM (ops/cuda/gemm_cublaslt.h):
// everything here is host-only cuBLASLt API, so tests/cuda/cublaslt_desc_test.cc
// runs it for real without a GPU. Execution is in gemm_cublaslt.cc.
#include <algorithm>
#include <sstream>

#include <octet/ops/cuda/cublaslt_api.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/gemm_cublaslt.h>

namespace octet::cuda {

// core/dtype.cc stores cudaDataType_t values as plain ints; they must match.
static_assert(CUDA_R_32F == 0 && CUDA_R_64F == 1 && CUDA_R_16F == 2 && CUDA_R_16BF == 14 && CUDA_R_8F_E4M3 == 28 &&
                  CUDA_R_8F_E5M2 == 29,
              "core/dtype.cc's cudaDataType_t ids are out of date");

cudaDataType_t CudaDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kFloat64:
      return CUDA_R_64F;
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::kFloat8E5M2:
      return CUDA_R_8F_E5M2;
    default:
      break;
  }
  OCTET_FAIL("cuBLASLt GEMM: dtype ", Name(dtype), " has no cuBLASLt data type");
}

uint64_t GemmWorkspaceBytes(ComputeCapability cc) {
  return cc.major >= 9 ? (uint64_t{32} << 20) + 1024 : uint64_t{4} << 20;
}

namespace {

cublasLtEpilogue_t LtEpilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::kDGeluBGrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case GemmEpilogue::kBGradB:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  OCTET_FAIL("cuBLASLt GEMM: unknown epilogue");
}

cublasLtMatmulMatrixScale_t LtScaleMode(GemmScaleMode m) {
  switch (m) {
    case GemmScaleMode::kNone:
    case GemmScaleMode::kScalar32F:
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case GemmScaleMode::kVec128_32F:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case GemmScaleMode::kBlk128x128_32F:
      return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  OCTET_FAIL("cuBLASLt GEMM: unknown scale mode");
}

}  // namespace

std::string CublasStatusText(cublasStatus_t st) {
  return std::string(Lt().GetStatusName(st)) + " (" + Lt().GetStatusString(st) + ")";
}

namespace {

// Each attribute write is checked: cuBLASLt rejects a value of the wrong size
// with CUBLAS_STATUS_INVALID_VALUE (CUDA_NOTES §5).
template <typename T>
void SetDesc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& value, const char* name) {
  const cublasStatus_t st = Lt().MatmulDescSetAttribute(op, attr, &value, sizeof(value));
  OCTET_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt: setting matmul attribute ", name,
              " failed: ", CublasStatusText(st));
}
template <typename T>
void SetLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& value, const char* name) {
  const cublasStatus_t st = Lt().MatrixLayoutSetAttribute(l, attr, &value, sizeof(value));
  OCTET_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt: setting layout attribute ", name,
              " failed: ", CublasStatusText(st));
}
template <typename T>
void SetPref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& value,
             const char* name) {
  const cublasStatus_t st = Lt().MatmulPreferenceSetAttribute(p, attr, &value, sizeof(value));
  OCTET_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt: setting preference ", name, " failed: ", CublasStatusText(st));
}

void CreateLayout(cublasLtMatrixLayout_t* l, DType dtype, int64_t rows, int64_t cols, int64_t ld, int32_t batch,
                  int64_t batch_stride, const char* which, const GemmDescKey& key) {
  // cublasLtMatrixLayoutCreate accepts ld < rows (CUDA_NOTES §5): check here.
  OCTET_CHECK(rows >= 0 && cols >= 0 && ld >= std::max<int64_t>(rows, 1), "cuBLASLt GEMM: layout of ", which, " (",
              rows, "x", cols, ", ld=", ld, ") needs ld >= rows; ", key.ToString());
  OCTET_CUBLAS_CHECK(
      Lt().MatrixLayoutCreate(l, CudaDataType(dtype), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    SetLayout(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch, "BATCH_COUNT");
    SetLayout(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride, "STRIDED_BATCH_OFFSET");
  }
}

}  // namespace

LtDescriptors::~LtDescriptors() {
  // Destroy calls cannot fail on descriptors we created; nothing to report in a destructor.
  if (pref != nullptr) Lt().MatmulPreferenceDestroy(pref);
  if (d != nullptr) Lt().MatrixLayoutDestroy(d);
  if (c != nullptr) Lt().MatrixLayoutDestroy(c);
  if (b != nullptr) Lt().MatrixLayoutDestroy(b);
  if (a != nullptr) Lt().MatrixLayoutDestroy(a);
  if (op != nullptr) Lt().MatmulDescDestroy(op);
}

std::unique_ptr<LtDescriptors> CreateLtDescriptors(const GemmDescKey& key) {
  auto desc = std::make_unique<LtDescriptors>();
  const bool fp8 = IsFp8(key.a_dtype) || IsFp8(key.b_dtype);
  const bool f64 = key.a_dtype == DType::kFloat64;
  OCTET_CHECK(!f64 || (key.b_dtype == DType::kFloat64 && key.d_dtype == DType::kFloat64),
              "cuBLASLt GEMM: float64 needs float64 operands and output; ", key.ToString());
  // FP8 needs compute and scale type 32F (CUDA_NOTES §1.1); float32 stays exact (no TF32).
  OCTET_CUBLAS_CHECK(Lt().MatmulDescCreate(&desc->op, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                           f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t transa = key.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t transb = key.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  SetDesc(desc->op, CUBLASLT_MATMUL_DESC_TRANSA, transa, "TRANSA");
  SetDesc(desc->op, CUBLASLT_MATMUL_DESC_TRANSB, transb, "TRANSB");
  if (fp8) {
    const int8_t fast_accum = key.fast_accum ? 1 : 0;  // int8_t: an int32 is rejected
    SetDesc(desc->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum, "FAST_ACCUM");
    const int32_t mode_a = LtScaleMode(key.a_scale_mode), mode_b = LtScaleMode(key.b_scale_mode);
    SetDesc(desc->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode_a, "A_SCALE_MODE");
    SetDesc(desc->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode_b, "B_SCALE_MODE");
    if (IsFp8(key.d_dtype)) {
      const int32_t mode_d = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
      SetDesc(desc->op, CUBLASLT_MATMUL_DESC_D_SCALE_MODE, mode_d, "D_SCALE_MODE");
    }
  } else {
    OCTET_CHECK(!key.fast_accum && !key.d_scale && !key.amax_d,
                "cuBLASLt GEMM: FAST_ACCUM, D scale and AMAX_D are for FP8 GEMMs only; ", key.ToString());
  }
  const uint32_t epilogue = LtEpilogue(key.epilogue);
  SetDesc(desc->op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE");
  if (EpilogueUsesBias(key.epilogue)) {
    const int32_t bias_type = CudaDataType(key.bias_dtype);
    SetDesc(desc->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, "BIAS_DATA_TYPE");
  }
  if (EpilogueUsesAux(key.epilogue)) {
    OCTET_CHECK(key.aux_ld >= key.m && key.aux_ld % 8 == 0, "cuBLASLt GEMM: EPILOGUE_AUX_LD ", key.aux_ld,
                " must be >= ", key.m, " and a multiple of 8; ", key.ToString());
    SetDesc(desc->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.aux_ld, "EPILOGUE_AUX_LD");
  }
  if (key.alpha_device) {
    const int32_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    SetDesc(desc->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, mode, "POINTER_MODE");
  }
  if (key.sm_count_target > 0) {
    SetDesc(desc->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, key.sm_count_target, "SM_COUNT_TARGET");
  }

  // Layouts as stored, column-major (NOTE [row-major GEMM on cuBLASLt]).
  const int64_t a_rows = key.transa ? key.k : key.m, a_cols = key.transa ? key.m : key.k;
  const int64_t b_rows = key.transb ? key.n : key.k, b_cols = key.transb ? key.k : key.n;
  CreateLayout(&desc->a, key.a_dtype, a_rows, a_cols, key.lda, key.batch, key.stride_a, "A", key);
  CreateLayout(&desc->b, key.b_dtype, b_rows, b_cols, key.ldb, key.batch, key.stride_b, "B", key);
  CreateLayout(&desc->c, key.c_dtype, key.m, key.n, key.ldc, key.batch, key.stride_d, "C", key);
  CreateLayout(&desc->d, key.d_dtype, key.m, key.n, key.ldd, key.batch, key.stride_d, "D", key);

  OCTET_CUBLAS_CHECK(Lt().MatmulPreferenceCreate(&desc->pref));
  SetPref(desc->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, key.workspace_bytes, "MAX_WORKSPACE_BYTES");
  SetPref(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a, "MIN_ALIGNMENT_A_BYTES");
  SetPref(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b, "MIN_ALIGNMENT_B_BYTES");
  SetPref(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c, "MIN_ALIGNMENT_C_BYTES");
  SetPref(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d, "MIN_ALIGNMENT_D_BYTES");
  return desc;
}

void SetLtPointers(cublasLtMatmulDesc_t op, const GemmDescKey& key, const LtPointers& p) {
  if (IsFp8(key.a_dtype)) {
    OCTET_CHECK(p.a_scale != nullptr && p.b_scale != nullptr, "cuBLASLt GEMM: FP8 operands need scale_inv pointers; ",
                key.ToString());
    SetDesc(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.a_scale, "A_SCALE_POINTER");
    SetDesc(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.b_scale, "B_SCALE_POINTER");
  }
  if (key.d_scale) {
    OCTET_CHECK(p.d_scale != nullptr, "cuBLASLt GEMM: an FP8 output needs a scale pointer; ", key.ToString());
    SetDesc(op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, p.d_scale, "D_SCALE_POINTER");
  }
  if (key.amax_d) SetDesc(op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, p.amax_d, "AMAX_D_POINTER");
  if (EpilogueUsesBias(key.epilogue)) {
    OCTET_CHECK(p.bias != nullptr, "cuBLASLt GEMM: epilogue ", Name(key.epilogue), " needs a bias pointer; ",
                key.ToString());
    SetDesc(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, "BIAS_POINTER");
  }
  if (EpilogueUsesAux(key.epilogue)) {
    OCTET_CHECK(p.aux != nullptr, "cuBLASLt GEMM: epilogue ", Name(key.epilogue), " needs an aux pointer; ",
                key.ToString());
    SetDesc(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, "EPILOGUE_AUX_POINTER");
  }
}

std::string UnsupportedGemmMessage(const GemmDescKey& key, cublasStatus_t status, int returned) {
  std::ostringstream os;
  os << "cuBLASLt has no algorithm for this GEMM (cublasLtMatmulAlgoGetHeuristic returned "
     << Lt().GetStatusName(status) << " with " << returned << " result" << (returned == 1 ? "" : "s")
     << "): " << key.ToString();
  return os.str();
}

}  // namespace octet::cuda
