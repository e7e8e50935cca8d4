// cuBLASLt GEMM set-up, checked without a GPU (descriptor creation and
// attribute read-back are host-only in cuBLASLt, CUDA_NOTES §5): every
// attribute CreateLtDescriptors / SetLtPointers write is read back; cuBLASLt
// rejects wrong-size attribute writes; the layouts of the Linear fprop/dgrad/
// wgrad GEMMs (from ops/gemm_layout.h plans) are those of CUDA_NOTES §1.4;
// bad keys and unsupported heuristics give messages naming the GEMM.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/cuda/cublaslt_api.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/cuda/gemm_cublaslt.h>
#include <octet/ops/gemm_layout.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(CublasLtDesc, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using ::octet::testing::ErrorOf;
using namespace ::octet::cuda;  // NOLINT

template <typename T>
T GetDesc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(Lt().MatmulDescGetAttribute(op, attr, &value, sizeof(value), &written), CUBLAS_STATUS_SUCCESS)
      << "attribute " << attr;
  EXPECT_EQ(written, sizeof(T)) << "attribute " << attr;
  return value;
}
template <typename T>
T GetLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(Lt().MatrixLayoutGetAttribute(l, attr, &value, sizeof(value), &written), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(T));
  return value;
}
template <typename T>
T GetPref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(Lt().MatmulPreferenceGetAttribute(p, attr, &value, sizeof(value), &written), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(T));
  return value;
}

struct LayoutDims {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
LayoutDims ReadLayout(cublasLtMatrixLayout_t l) {
  return {static_cast<cudaDataType_t>(GetLayout<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_TYPE)),
          GetLayout<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_ROWS), GetLayout<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_COLS),
          GetLayout<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_LD)};
}
void ExpectLayout(cublasLtMatrixLayout_t l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                  const char* what) {
  const LayoutDims d = ReadLayout(l);
  EXPECT_EQ(d.type, type) << what;
  EXPECT_EQ(d.rows, rows) << what;
  EXPECT_EQ(d.cols, cols) << what;
  EXPECT_EQ(d.ld, ld) << what;
}

// The key CublasLtGemm builds for a direct plan (mirrors gemm_cublaslt.cc).
GemmDescKey KeyForPlan(const GemmPlan& p, DType d_dtype, ComputeCapability cc) {
  GemmDescKey k;
  k.cc = cc.value();
  k.m = p.m;
  k.n = p.n;
  k.k = p.k;
  k.transa = p.transa;
  k.transb = p.transb;
  k.lda = p.a.ld;
  k.ldb = p.b.ld;
  k.ldc = k.ldd = p.d.ld;
  k.a_dtype = p.lt_a_dtype;
  k.b_dtype = p.lt_b_dtype;
  k.d_dtype = d_dtype;
  k.c_dtype = IsFp8(d_dtype) ? DType::kBFloat16 : d_dtype;
  k.fast_accum = p.fast_accum;
  if (p.fp8) k.a_scale_mode = k.b_scale_mode = GemmScaleMode::kScalar32F;
  k.d_scale = k.amax_d = IsFp8(d_dtype);
  k.workspace_bytes = GemmWorkspaceBytes(cc);
  return k;
}

constexpr ComputeCapability kH100{9, 0};
constexpr int64_t T = 256, Kin = 768, Nout = 3072;

TEST(CublasLtDesc, Fp8FpropEveryAttributeReadsBack) {
  const GemmPlan plan =
      PlanGemm(LinearFprop(T, Kin, Nout, DType::kFloat8E4M3, DType::kFloat8E4M3, DType::kFloat8E4M3, kH100));
  GemmDescKey key = KeyForPlan(plan, DType::kFloat8E4M3, kH100);
  key.epilogue = GemmEpilogue::kBias;
  key.bias_dtype = DType::kBFloat16;
  key.c_dtype = DType::kBFloat16;
  key.sm_count_target = 120;
  key.align_a = 64;
  key.align_b = 128;
  key.align_c = 32;
  key.align_d = 16;
  auto desc = CreateLtDescriptors(key);
  ASSERT_NE(desc->op, nullptr);

  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE), CUBLAS_COMPUTE_32F);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_SCALE_TYPE), CUDA_R_32F);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_TRANSA), CUBLAS_OP_T);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_TRANSB), CUBLAS_OP_N);
  EXPECT_EQ(GetDesc<int8_t>(desc->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM), 1);  // fprop
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE), CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE), CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_D_SCALE_MODE), CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
  EXPECT_EQ(GetDesc<uint32_t>(desc->op, CUBLASLT_MATMUL_DESC_EPILOGUE), CUBLASLT_EPILOGUE_BIAS);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), CUDA_R_16BF);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), 120);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_POINTER_MODE), CUBLASLT_POINTER_MODE_HOST);

  // Layouts: A = W (Kin x Nout), B = X (Kin x T), C = BF16 (FP8 D), D = Y (Nout x T).
  ExpectLayout(desc->a, CUDA_R_8F_E4M3, Kin, Nout, Kin, "A=W");
  ExpectLayout(desc->b, CUDA_R_8F_E4M3, Kin, T, Kin, "B=X");
  ExpectLayout(desc->c, CUDA_R_16BF, Nout, T, Nout, "C");
  ExpectLayout(desc->d, CUDA_R_8F_E4M3, Nout, T, Nout, "D=Y");

  EXPECT_EQ(GetPref<uint64_t>(desc->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES), (32u << 20) + 1024u);
  EXPECT_EQ(GetPref<uint32_t>(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES), 64u);
  EXPECT_EQ(GetPref<uint32_t>(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES), 128u);
  EXPECT_EQ(GetPref<uint32_t>(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES), 32u);
  EXPECT_EQ(GetPref<uint32_t>(desc->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES), 16u);

  // Per-call pointers (fake device addresses: never dereferenced here).
  LtPointers ptrs;
  ptrs.a_scale = reinterpret_cast<const void*>(0x1000);
  ptrs.b_scale = reinterpret_cast<const void*>(0x2000);
  ptrs.d_scale = reinterpret_cast<const void*>(0x3000);
  ptrs.amax_d = reinterpret_cast<void*>(0x4000);
  ptrs.bias = reinterpret_cast<const void*>(0x5000);
  SetLtPointers(desc->op, key, ptrs);
  EXPECT_EQ(GetDesc<const void*>(desc->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER), ptrs.a_scale);
  EXPECT_EQ(GetDesc<const void*>(desc->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER), ptrs.b_scale);
  EXPECT_EQ(GetDesc<const void*>(desc->op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER), ptrs.d_scale);
  EXPECT_EQ(GetDesc<void*>(desc->op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER), ptrs.amax_d);
  EXPECT_EQ(GetDesc<const void*>(desc->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER), ptrs.bias);
  // A second call re-sets them (the cache reuses descriptors).
  ptrs.a_scale = reinterpret_cast<const void*>(0x1100);
  SetLtPointers(desc->op, key, ptrs);
  EXPECT_EQ(GetDesc<const void*>(desc->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER), ptrs.a_scale);
}

TEST(CublasLtDesc, GeluAuxAndDgeluAttributes) {
  GemmPlan plan = PlanGemm(LinearFprop(T, Kin, Nout, DType::kBFloat16, DType::kBFloat16, DType::kBFloat16, kH100));
  GemmDescKey key = KeyForPlan(plan, DType::kBFloat16, kH100);
  key.epilogue = GemmEpilogue::kGeluAuxBias;
  key.bias_dtype = DType::kBFloat16;
  key.aux_ld = Nout;
  auto desc = CreateLtDescriptors(key);
  EXPECT_EQ(GetDesc<uint32_t>(desc->op, CUBLASLT_MATMUL_DESC_EPILOGUE), CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  EXPECT_EQ(GetDesc<int64_t>(desc->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), Nout);
  LtPointers ptrs;
  ptrs.bias = reinterpret_cast<const void*>(0x5000);
  ptrs.aux = reinterpret_cast<void*>(0x6000);
  SetLtPointers(desc->op, key, ptrs);
  EXPECT_EQ(GetDesc<void*>(desc->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), ptrs.aux);
  // A non-FP8 GEMM has no FAST_ACCUM/scale modes set: defaults read back.
  EXPECT_EQ(GetDesc<int8_t>(desc->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM), 0);
  EXPECT_EQ(GetDesc<const void*>(desc->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER), nullptr);

  key.epilogue = GemmEpilogue::kDGeluBGrad;
  auto d2 = CreateLtDescriptors(key);
  EXPECT_EQ(GetDesc<uint32_t>(d2->op, CUBLASLT_MATMUL_DESC_EPILOGUE), CUBLASLT_EPILOGUE_DGELU_BGRAD);
  key.epilogue = GemmEpilogue::kBGradB;
  auto d3 = CreateLtDescriptors(key);
  EXPECT_EQ(GetDesc<uint32_t>(d3->op, CUBLASLT_MATMUL_DESC_EPILOGUE), CUBLASLT_EPILOGUE_BGRADB);
  // Missing epilogue pointers are an error before any device call.
  std::string msg = ErrorOf([&] { SetLtPointers(d3->op, key, LtPointers{}); });
  EXPECT_NE(msg.find("epilogue bgradb needs a bias pointer"), std::string::npos) << msg;
  // Aux ld must be >= m and a multiple of 8.
  key.epilogue = GemmEpilogue::kGeluAuxBias;
  key.aux_ld = Nout + 4;
  msg = ErrorOf([&] { CreateLtDescriptors(key); });
  EXPECT_NE(msg.find("EPILOGUE_AUX_LD 3076 must be >= 3072 and a multiple of 8"), std::string::npos) << msg;
}

TEST(CublasLtDesc, DeviceAlphaFloat64AndBatchAttributes) {
  GemmDescKey key;
  key.m = 32;
  key.n = 16;
  key.k = 8;
  key.lda = 32;
  key.ldb = 8;
  key.ldc = key.ldd = 32;
  key.a_dtype = key.b_dtype = key.c_dtype = key.d_dtype = DType::kBFloat16;
  key.alpha_device = true;
  key.batch = 12;
  key.stride_a = 256;
  key.stride_b = 128;
  key.stride_d = 512;
  auto desc = CreateLtDescriptors(key);
  EXPECT_EQ(GetDesc<int32_t>(desc->op, CUBLASLT_MATMUL_DESC_POINTER_MODE), CUBLASLT_POINTER_MODE_DEVICE);
  EXPECT_EQ(GetLayout<int32_t>(desc->a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT), 12);
  EXPECT_EQ(GetLayout<int64_t>(desc->a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), 256);
  EXPECT_EQ(GetLayout<int64_t>(desc->b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), 128);
  EXPECT_EQ(GetLayout<int64_t>(desc->c, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), 512);
  EXPECT_EQ(GetLayout<int64_t>(desc->d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), 512);

  GemmDescKey f64 = key;
  f64.alpha_device = false;
  f64.batch = 1;
  f64.a_dtype = f64.b_dtype = f64.c_dtype = f64.d_dtype = DType::kFloat64;
  auto d64 = CreateLtDescriptors(f64);
  EXPECT_EQ(GetDesc<int32_t>(d64->op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE), CUBLAS_COMPUTE_64F);
  EXPECT_EQ(GetDesc<int32_t>(d64->op, CUBLASLT_MATMUL_DESC_SCALE_TYPE), CUDA_R_64F);
  ExpectLayout(d64->a, CUDA_R_64F, 32, 8, 32, "A f64");
}

TEST(CublasLtDesc, WrongSizeAttributeWritesAreRejected) {
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(Lt().MatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int64_t trans64 = CUBLAS_OP_T;
  EXPECT_EQ(Lt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans64, sizeof(trans64)),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t fast32 = 1;
  EXPECT_EQ(Lt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast32, sizeof(fast32)),
            CUBLAS_STATUS_INVALID_VALUE);
  const uint64_t epi64 = CUBLASLT_EPILOGUE_BIAS;
  EXPECT_EQ(Lt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi64, sizeof(epi64)),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t ld32 = 64;
  EXPECT_EQ(Lt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld32, sizeof(ld32)),
            CUBLAS_STATUS_INVALID_VALUE);
  // The right sizes are accepted.
  const int8_t fast8 = 1;
  EXPECT_EQ(Lt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast8, sizeof(fast8)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Lt().MatmulDescDestroy(op), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(Lt().MatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint32_t ws32 = 1024;
  EXPECT_EQ(Lt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws32, sizeof(ws32)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(Lt().MatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

TEST(CublasLtDesc, LinearLayoutsMatchTransformerEngine) {
  // dgrad FP8 on Hopper: A = Wᵀ copy (Nout x Kin, ld Nout), B = dY (Nout x T).
  const GemmPlan dgrad =
      PlanGemm(LinearDgrad(T, Kin, Nout, DType::kFloat8E5M2, DType::kFloat8E4M3, DType::kBFloat16, kH100));
  auto dd = CreateLtDescriptors(KeyForPlan(dgrad, DType::kBFloat16, kH100));
  EXPECT_EQ(GetDesc<int32_t>(dd->op, CUBLASLT_MATMUL_DESC_TRANSA), CUBLAS_OP_T);
  EXPECT_EQ(GetDesc<int32_t>(dd->op, CUBLASLT_MATMUL_DESC_TRANSB), CUBLAS_OP_N);
  EXPECT_EQ(GetDesc<int8_t>(dd->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM), 0);
  ExpectLayout(dd->a, CUDA_R_8F_E4M3, Nout, Kin, Nout, "A=Wᵀ");
  ExpectLayout(dd->b, CUDA_R_8F_E5M2, Nout, T, Nout, "B=dY");
  ExpectLayout(dd->d, CUDA_R_16BF, Kin, T, Kin, "D=dX");
  // wgrad FP8 on Hopper: A = Xᵀ (T x Kin, ld T), B = dYᵀ (T x Nout, ld T), D = dW f32.
  const GemmPlan wgrad =
      PlanGemm(LinearWgrad(T, Kin, Nout, DType::kFloat8E5M2, DType::kFloat8E4M3, DType::kFloat32, kH100));
  auto wd = CreateLtDescriptors(KeyForPlan(wgrad, DType::kFloat32, kH100));
  EXPECT_EQ(GetDesc<int32_t>(wd->op, CUBLASLT_MATMUL_DESC_TRANSA), CUBLAS_OP_T);
  EXPECT_EQ(GetDesc<int32_t>(wd->op, CUBLASLT_MATMUL_DESC_TRANSB), CUBLAS_OP_N);
  ExpectLayout(wd->a, CUDA_R_8F_E4M3, T, Kin, T, "A=Xᵀ");
  ExpectLayout(wd->b, CUDA_R_8F_E5M2, T, Nout, T, "B=dYᵀ");
  ExpectLayout(wd->c, CUDA_R_32F, Kin, Nout, Kin, "C=dW");
  ExpectLayout(wd->d, CUDA_R_32F, Kin, Nout, Kin, "D=dW");
  // BF16 wgrad: NT, A = X (Kin x T), B = dY (Nout x T, transb).
  const GemmPlan bw = PlanGemm(LinearWgrad(T, Kin, Nout, DType::kBFloat16, DType::kBFloat16, DType::kFloat32, kH100));
  auto bd = CreateLtDescriptors(KeyForPlan(bw, DType::kFloat32, kH100));
  EXPECT_EQ(GetDesc<int32_t>(bd->op, CUBLASLT_MATMUL_DESC_TRANSA), CUBLAS_OP_N);
  EXPECT_EQ(GetDesc<int32_t>(bd->op, CUBLASLT_MATMUL_DESC_TRANSB), CUBLAS_OP_T);
  ExpectLayout(bd->a, CUDA_R_16BF, Kin, T, Kin, "A=X");
  ExpectLayout(bd->b, CUDA_R_16BF, Nout, T, Nout, "B=dY");
}

TEST(CublasLtDesc, BadKeysAreRejectedWithTheGemm) {
  GemmDescKey key;
  key.m = 64;
  key.n = 32;
  key.k = 16;
  key.lda = 32;  // A is m x k = 64 x 16: ld 32 < 64
  key.ldb = 16;
  key.ldc = key.ldd = 64;
  std::string msg = ErrorOf([&] { CreateLtDescriptors(key); });
  EXPECT_NE(msg.find("layout of A (64x16, ld=32) needs ld >= rows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m=64 n=32 k=16"), std::string::npos) << msg;
  key.lda = 64;
  key.fast_accum = true;  // float32 GEMM
  msg = ErrorOf([&] { CreateLtDescriptors(key); });
  EXPECT_NE(msg.find("FAST_ACCUM, D scale and AMAX_D are for FP8 GEMMs only"), std::string::npos) << msg;
  key.fast_accum = false;
  key.a_dtype = DType::kInt32;
  msg = ErrorOf([&] { CreateLtDescriptors(key); });
  EXPECT_NE(msg.find("dtype int32 has no cuBLASLt data type"), std::string::npos) << msg;
  // FP8 without scale pointers.
  GemmDescKey f8 =
      KeyForPlan(PlanGemm(LinearFprop(T, Kin, Nout, DType::kFloat8E4M3, DType::kFloat8E4M3, DType::kBFloat16, kH100)),
                 DType::kBFloat16, kH100);
  auto desc = CreateLtDescriptors(f8);
  msg = ErrorOf([&] { SetLtPointers(desc->op, f8, LtPointers{}); });
  EXPECT_NE(msg.find("FP8 operands need scale_inv pointers"), std::string::npos) << msg;
}

TEST(CublasLtDesc, UnsupportedHeuristicMessageNamesTheGemm) {
  GemmDescKey key =
      KeyForPlan(PlanGemm(LinearWgrad(T, Kin, Nout, DType::kFloat8E5M2, DType::kFloat8E4M3, DType::kFloat32, kH100)),
                 DType::kFloat32, kH100);
  const std::string msg = UnsupportedGemmMessage(key, CUBLAS_STATUS_NOT_SUPPORTED, 0);
  EXPECT_NE(msg.find("CUBLAS_STATUS_NOT_SUPPORTED with 0 results"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m=768 n=3072 k=256 trans=TN"), std::string::npos) << msg;
  EXPECT_NE(msg.find("A=fp8_e4m3 B=fp8_e5m2 C=float32 D=float32"), std::string::npos) << msg;
  EXPECT_NE(UnsupportedGemmMessage(key, CUBLAS_STATUS_SUCCESS, 0).find("CUBLAS_STATUS_SUCCESS with 0 results"),
            std::string::npos);
}

TEST(CublasLtDesc, DtypeTableMatchesCudaDataTypes) {
  for (DType d :
       {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    EXPECT_EQ(static_cast<int>(CudaDataType(d)), Info(d).cuda_type) << Name(d);
  }
  EXPECT_EQ(GemmWorkspaceBytes({9, 0}), (32u << 20) + 1024u);
  EXPECT_EQ(GemmWorkspaceBytes({8, 9}), 4u << 20);
}

TEST(CublasLtDesc, NoDeviceMeansGemmFailsCleanly) {
  if (cuda::IsAvailable()) GTEST_SKIP() << "a CUDA device is present";
  GemmArgs g;
  g.m = g.n = g.k = 16;
  g.a.data = g.b.data = reinterpret_cast<const void*>(0x1000);
  g.d = reinterpret_cast<void*>(0x2000);
  const std::string msg = ErrorOf([&] { CublasLtGemm(g); });
  EXPECT_FALSE(msg.empty());
  // Argument errors come before any device call.
  g.a.dtype = g.b.dtype = DType::kFloat8E4M3;
  const std::string fp8 = ErrorOf([&] { CublasLtGemm(g); });
  EXPECT_NE(fp8.find("FP8 operands need their scale_inv"), std::string::npos) << fp8;
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
