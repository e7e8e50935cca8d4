// Execution of the CUDA GEMM: plan (ops/gemm_layout.h) -> cuBLASLt calls,
// repacking and fallback paths, and the thread-local descriptor cache (NOTE
// [cuBLASLt descriptor cache] in gemm_cublaslt.h). Descriptor set-up is in
// gemm_cublaslt_desc.cc, the Tensor form (CublasLtMatmul) in
// gemm_cublaslt_tensor.cc.
#include <octet/ops/cuda/gemm_cublaslt.h>

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <sstream>

#include <octet/core/scaling.h>
#include <octet/ops/cuda/cublaslt_api.h>
#include <octet/ops/cuda/cast_cuda.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>

namespace octet::cuda {

// ---- the descriptor cache and one cuBLASLt call ----
namespace {

struct CachedGemm {
  std::unique_ptr<LtDescriptors> desc;
  bool heuristic_done = false;
  bool supported = false;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  std::string unsupported;
};

constexpr size_t kMaxCachedGemms = 4096;

absl::flat_hash_map<GemmDescKey, std::unique_ptr<CachedGemm>>& Cache() {
  thread_local absl::flat_hash_map<GemmDescKey, std::unique_ptr<CachedGemm>> cache;
  return cache;
}

// Everything one cublasLtMatmul needs besides the key.
struct LtCall {
  LtPointers ptrs;
  const void* alpha = nullptr;  // host or device (key.alpha_device)
  const void* beta = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
};

// Runs one cuBLASLt matmul. Returns false (and, in *why, the reason) when the
// heuristic finds no algorithm for the key.
bool RunLt(const GemmDescKey& key, const LtCall& call, cudaStream_t stream, std::string* why) {
  auto& cache = Cache();
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxCachedGemms) cache.clear();
    auto entry = std::make_unique<CachedGemm>();
    entry->desc = CreateLtDescriptors(key);
    it = cache.emplace(key, std::move(entry)).first;
  }
  CachedGemm& e = *it->second;
  // The heuristic reads the pointer values (bias/aux alignment): set them first.
  SetLtPointers(e.desc->op, key, call.ptrs);
  cublasLtHandle_t handle = CublasLtHandle(key.device);
  if (!e.heuristic_done) {
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t st = Lt().MatmulAlgoGetHeuristic(handle, e.desc->op, e.desc->a, e.desc->b, e.desc->c,
                                                          e.desc->d, e.desc->pref, 1, &result, &returned);
    if (st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
      e.supported = true;
      e.algo = result.algo;
      e.workspace = result.workspaceSize;
      OCTET_CHECK(e.workspace <= key.workspace_bytes, "cuBLASLt GEMM: the heuristic asks for ", e.workspace,
                  " workspace bytes, more than the ", key.workspace_bytes, " offered; ", key.ToString());
    } else if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_SUCCESS ||
               // cuBLASLt reports unsupported FP8 scale/type combinations as
               // INVALID_VALUE: for FP8 keys that means "take the fallback".
               (st == CUBLAS_STATUS_INVALID_VALUE && (IsFp8(key.a_dtype) || IsFp8(key.b_dtype)))) {
      e.supported = false;
      e.unsupported = UnsupportedGemmMessage(key, st, returned);
    } else {
      OCTET_FAIL("cuBLASLt call cublasLtMatmulAlgoGetHeuristic failed: ", CublasStatusText(st), "; ", key.ToString());
    }
    e.heuristic_done = true;
  }
  if (!e.supported) {
    if (why != nullptr) *why = e.unsupported;
    return false;
  }
  void* workspace = e.workspace > 0 ? Workspace(key.device, e.workspace) : nullptr;
  const cublasStatus_t st =
      Lt().Matmul(handle, e.desc->op, call.alpha, call.a, e.desc->a, call.b, e.desc->b, call.beta, call.c, e.desc->c,
                  call.d, e.desc->d, &e.algo, workspace, e.workspace, stream);
  OCTET_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt call cublasLtMatmul failed: ", CublasStatusText(st), "; ",
              key.ToString());
  OCTET_CUDA_SYNC_CHECK_AFTER("cublasLtMatmul");
  return true;
}

uint32_t AlignOf(const void* p, int64_t batch_stride_bytes = 0) {
  return PointerAlignment(reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(batch_stride_bytes));
}

const char* ByteOffset(const void* p, int64_t elements, DType dtype) {
  return static_cast<const char*>(p) + elements * SizeOf(dtype);
}

// ---- argument checks ----

std::string DescribeArgs(const GemmArgs& g) {
  std::ostringstream os;
  os << Name(g.role) << " GEMM on cuda:" << g.device << " M=" << g.m << " N=" << g.n << " K=" << g.k
     << (g.trans_a ? " A[K,M]ᵀ " : " A[M,K] ") << Name(g.a.dtype) << (g.trans_b ? " B[N,K]ᵀ " : " B[K,N] ")
     << Name(g.b.dtype) << " D " << Name(g.d_dtype);
  if (g.batch > 1) os << " batch=" << g.batch;
  if (g.epilogue != GemmEpilogue::kNone) os << " epilogue=" << Name(g.epilogue);
  return os.str();
}

void ValidateArgs(const GemmArgs& g) {
  const std::string what = DescribeArgs(g);
  OCTET_CHECK(g.batch >= 1, "cuBLASLt GEMM: batch must be >= 1: ", what);
  const bool work = g.m > 0 && g.n > 0;
  if (work) OCTET_CHECK(g.d != nullptr, "cuBLASLt GEMM: D pointer is null: ", what);
  if (work && g.k > 0) {
    OCTET_CHECK(g.a.data != nullptr && g.b.data != nullptr, "cuBLASLt GEMM: operand pointer is null: ", what);
  }
  const bool fp8 = IsFp8(g.a.dtype) || IsFp8(g.b.dtype);
  if (fp8) {
    OCTET_CHECK(g.a.scale_inv != nullptr && g.b.scale_inv != nullptr,
                "cuBLASLt GEMM: FP8 operands need their scale_inv (device fp32) pointers: ", what);
  }
  if (IsFp8(g.d_dtype)) {
    OCTET_CHECK(g.d_scale != nullptr, "cuBLASLt GEMM: an FP8 output needs its scale (device fp32) pointer: ", what);
    OCTET_CHECK(g.beta == 0.0f, "cuBLASLt GEMM: an FP8 output cannot accumulate (beta must be 0): ", what);
    // AMAX_D is written per cuBLASLt call, and batches may run as separate calls.
    OCTET_CHECK(g.batch == 1 || g.d_amax == nullptr,
                "cuBLASLt GEMM: the amax of a batched FP8 output is not supported (run the batches one by one): ",
                what);
  }
  // Transposed copies of a batch are read at offsets of whole contiguous matrices.
  for (const GemmOperand* op : {&g.a, &g.b}) {
    if (op->transposed == nullptr || g.batch == 1 || op->transposed_ld == 0) continue;
    const int64_t width = op == &g.a ? (g.trans_a ? g.k : g.m) : (g.trans_b ? g.n : g.k);
    OCTET_CHECK(op->transposed_ld == width, "cuBLASLt GEMM: a batched transposed copy must be contiguous (row stride ",
                width, "), got ", op->transposed_ld, ": ", what);
  }
  if (EpilogueUsesBias(g.epilogue)) {
    OCTET_CHECK(g.bias != nullptr, "cuBLASLt GEMM: epilogue ", Name(g.epilogue), " needs a bias pointer: ", what);
    if (fp8) {
      const bool ok = g.d_dtype == DType::kFloat16 ? g.bias_dtype == DType::kFloat16
                      : IsFp8(g.d_dtype) ? (g.bias_dtype == DType::kBFloat16 || g.bias_dtype == DType::kFloat16)
                                         : g.bias_dtype == DType::kBFloat16;
      OCTET_CHECK(ok, "cuBLASLt GEMM: bias dtype ", Name(g.bias_dtype), " is not supported with FP8 operands and a ",
                  Name(g.d_dtype), " output (bfloat16; float16 for a float16 output): ", what);
    } else {
      OCTET_CHECK(g.bias_dtype == g.d_dtype, "cuBLASLt GEMM: bias dtype ", Name(g.bias_dtype),
                  " must be the output dtype ", Name(g.d_dtype), ": ", what);
    }
  }
  if (EpilogueUsesAux(g.epilogue)) {
    OCTET_CHECK(g.aux != nullptr, "cuBLASLt GEMM: epilogue ", Name(g.epilogue), " needs an aux pointer: ", what);
    OCTET_CHECK(g.aux_ld >= g.n && g.aux_ld % 8 == 0, "cuBLASLt GEMM: aux row stride ", g.aux_ld,
                " must be >= N and a multiple of 8: ", what);
    OCTET_CHECK(g.batch == 1, "cuBLASLt GEMM: GELU aux epilogues are not supported with batch > 1: ", what);
  }
  OCTET_CHECK(g.batch == 1 || g.epilogue == GemmEpilogue::kNone,
              "cuBLASLt GEMM: epilogues are not supported with batch > 1: ", what);
}

GemmRequest ToRequest(const GemmArgs& g, ComputeCapability cc) {
  GemmRequest r;
  r.role = g.role;
  r.m = g.m;
  r.n = g.n;
  r.k = g.k;
  r.trans_a = g.trans_a;
  r.trans_b = g.trans_b;
  r.lda = g.a.ld;
  r.ldb = g.b.ld;
  r.ldd = g.ldd;
  r.a_dtype = g.a.dtype;
  r.b_dtype = g.b.dtype;
  r.d_dtype = g.d_dtype;
  r.a_has_transpose = g.a.transposed != nullptr;
  r.b_has_transpose = g.b.transposed != nullptr;
  r.a_transpose_ld = g.a.transposed_ld;
  r.b_transpose_ld = g.b.transposed_ld;
  // Every matrix of a strided batch must meet the alignment, not just the first.
  const int64_t bs = g.batch > 1 ? 1 : 0;
  r.align_a = AlignOf(g.a.data, bs * g.batch_stride_a * SizeOf(g.a.dtype));
  r.align_b = AlignOf(g.b.data, bs * g.batch_stride_b * SizeOf(g.b.dtype));
  r.align_d = AlignOf(g.d, bs * g.batch_stride_d * SizeOf(g.d_dtype));
  r.align_a_transpose = AlignOf(g.a.transposed);
  r.align_b_transpose = AlignOf(g.b.transposed);
  r.epilogue = g.epilogue;
  r.cc = cc;
  r.allow_padding = g.allow_padding;
  return r;
}

// The state shared by the paths of one CublasLtGemm call.
struct Ctx {
  const GemmArgs& g;
  ComputeCapability cc;
  cudaStream_t stream;
  Device device;
  std::string what;
};

GemmDescKey BaseKey(const Ctx& x) {
  GemmDescKey k;
  k.device = x.g.device;
  k.cc = x.cc.value();
  k.workspace_bytes = GemmWorkspaceBytes(x.cc);
  k.sm_count_target = x.g.sm_count_target;
  k.epilogue = x.g.epilogue;
  k.bias_dtype = x.g.bias_dtype;
  k.aux_ld = x.g.aux_ld;
  k.align_bias = EpilogueUsesBias(x.g.epilogue) ? AlignOf(x.g.bias) : 256;
  k.align_aux = EpilogueUsesAux(x.g.epilogue) ? AlignOf(x.g.aux) : 256;
  return k;
}

// C/D description of an FP8-operand or plain GEMM writing dtype `d_dtype` at `d`.
void FillOutput(GemmDescKey& k, LtCall& call, DType d_dtype, void* d, int64_t ldd, const GemmArgs& g) {
  k.d_dtype = d_dtype;
  k.ldd = ldd;
  k.ldc = ldd;
  k.align_d = AlignOf(d, k.stride_d * SizeOf(d_dtype));
  call.d = d;
  if (IsFp8(d_dtype)) {
    // cuBLASLt: C must be BF16/FP16 (the bias type) for an FP8 D; no accumulation (C = null, beta = 0).
    k.c_dtype = EpilogueUsesBias(g.epilogue) ? g.bias_dtype : DType::kBFloat16;
    k.align_c = 256;
    k.d_scale = true;
    k.amax_d = g.d_amax != nullptr;
    call.c = nullptr;
    call.ptrs.d_scale = g.d_scale;
    call.ptrs.amax_d = g.d_amax;
  } else {
    k.c_dtype = d_dtype;
    k.align_c = k.align_d;
    call.c = d;
  }
}

void RunBf16Fallback(const Ctx& x, const GemmPlan& plan, const GemmRequest& req, int64_t batch_index);

// kDirect (FP8 or not). Returns false when cuBLASLt has no algorithm.
bool RunDirect(const Ctx& x, const GemmPlan& plan, std::string* why) {
  const GemmArgs& g = x.g;
  const bool fp8 = plan.fp8;
  // FP8 GEMMs run one matrix at a time (transposed copies are per matrix).
  const int32_t batch = fp8 ? 1 : g.batch;
  const int32_t loops = fp8 ? g.batch : 1;
  for (int32_t bi = 0; bi < loops; ++bi) {
    const void* a_data = ByteOffset(g.a.data, bi * g.batch_stride_a, g.a.dtype);
    const void* b_data = ByteOffset(g.b.data, bi * g.batch_stride_b, g.b.dtype);
    void* d_data = const_cast<char*>(ByteOffset(g.d, bi * g.batch_stride_d, g.d_dtype));
    const int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;  // our A as stored
    const int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
    const int64_t lda = g.a.ld > 0 ? g.a.ld : std::max<int64_t>(a_cols, 1);
    const int64_t ldb = g.b.ld > 0 ? g.b.ld : std::max<int64_t>(b_cols, 1);
    // Transposed FP8 copies: the caller's, or built here (NOTE [FP8 TN rule]).
    Tensor a_t, b_t;
    if (plan.use_transpose_a) {
      if (plan.make_transpose_a) {
        a_t = Empty({a_cols, a_rows}, {.dtype = g.a.dtype, .device = x.device});
        PackMatrixCuda(x.stream, a_data, g.a.dtype, a_cols, a_rows, 1, lda, a_t.raw_data(), g.a.dtype, a_cols, a_rows);
        RecordGemmTransposeCopy("A of " + x.what);
        a_data = a_t.raw_data();
      } else {
        a_data = ByteOffset(g.a.transposed, bi * a_rows * a_cols, g.a.dtype);
      }
    }
    if (plan.use_transpose_b) {
      if (plan.make_transpose_b) {
        b_t = Empty({b_cols, b_rows}, {.dtype = g.b.dtype, .device = x.device});
        PackMatrixCuda(x.stream, b_data, g.b.dtype, b_cols, b_rows, 1, ldb, b_t.raw_data(), g.b.dtype, b_cols, b_rows);
        RecordGemmTransposeCopy("B of " + x.what);
        b_data = b_t.raw_data();
      } else {
        b_data = ByteOffset(g.b.transposed, bi * b_rows * b_cols, g.b.dtype);
      }
    }
    GemmDescKey k = BaseKey(x);
    k.m = plan.m;
    k.n = plan.n;
    k.k = plan.k;
    k.transa = plan.transa;
    k.transb = plan.transb;
    k.lda = plan.a.ld;
    k.ldb = plan.b.ld;
    k.a_dtype = plan.lt_a_dtype;
    k.b_dtype = plan.lt_b_dtype;
    k.batch = batch;
    if (batch > 1) {
      k.stride_a = g.batch_stride_b;  // cuBLASLt's A is our B
      k.stride_b = g.batch_stride_a;
      k.stride_d = g.batch_stride_d;
    }
    k.align_a = AlignOf(b_data, k.stride_a * SizeOf(k.a_dtype));
    k.align_b = AlignOf(a_data, k.stride_b * SizeOf(k.b_dtype));
    k.fast_accum = plan.fast_accum;
    if (fp8) k.a_scale_mode = k.b_scale_mode = GemmScaleMode::kScalar32F;
    LtCall call;
    FillOutput(k, call, g.d_dtype, d_data, plan.d.ld, g);
    call.a = b_data;
    call.b = a_data;
    call.ptrs.a_scale = g.b.scale_inv;
    call.ptrs.b_scale = g.a.scale_inv;
    call.ptrs.bias = g.bias;
    call.ptrs.aux = g.aux;
    const double alpha64 = g.alpha, beta64 = g.beta;
    const bool f64 = k.a_dtype == DType::kFloat64;
    call.alpha = f64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&g.alpha);
    call.beta = f64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&g.beta);
    if (!RunLt(k, call, x.stream, why)) {
      OCTET_CHECK(bi == 0, "cuBLASLt GEMM: algorithm support changed inside a batch: ", x.what);
      return false;
    }
  }
  return true;
}

// kPadded: FP8 operands repacked TN with K (and N) padded (NOTE [FP8
// alignment and fallback]). Returns false when cuBLASLt has no algorithm.
bool RunPadded(const Ctx& x, const GemmPlan& plan, int64_t bi, std::string* why) {
  const GemmArgs& g = x.g;
  const int64_t M = g.m, N = g.n, K = g.k, kp = plan.k_padded, np = plan.n_padded;
  const void* a_data = ByteOffset(g.a.data, bi * g.batch_stride_a, g.a.dtype);
  const void* b_data = ByteOffset(g.b.data, bi * g.batch_stride_b, g.b.dtype);
  void* d_data = const_cast<char*>(ByteOffset(g.d, bi * g.batch_stride_d, g.d_dtype));
  const int64_t lda = g.a.ld > 0 ? g.a.ld : (g.trans_a ? M : K);
  const int64_t ldb = g.b.ld > 0 ? g.b.ld : (g.trans_b ? K : N);
  const int64_t ldd = g.ldd > 0 ? g.ldd : N;
  // A' [M,Kp] = op(A); B' [Np,Kp] = op(B)ᵀ.
  Tensor ap = Empty({M, kp}, {.dtype = g.a.dtype, .device = x.device});
  Tensor bp = Empty({np, kp}, {.dtype = g.b.dtype, .device = x.device});
  PackMatrixCuda(x.stream, a_data, g.a.dtype, M, K, g.trans_a ? 1 : lda, g.trans_a ? lda : 1, ap.raw_data(), g.a.dtype,
                 M, kp);
  PackMatrixCuda(x.stream, b_data, g.b.dtype, N, K, g.trans_b ? ldb : 1, g.trans_b ? 1 : ldb, bp.raw_data(), g.b.dtype,
                 np, kp);
  const int64_t dsize = SizeOf(g.d_dtype);
  Tensor dp;
  void* out = d_data;
  int64_t out_ld = ldd;
  if (plan.pad_output) {
    dp = Empty({M, np}, {.dtype = g.d_dtype, .device = x.device});
    out = dp.raw_data();
    out_ld = np;
    if (g.beta != 0.0f) {
      OCTET_CUDA_CHECK(
          cudaMemcpy2DAsync(out, np * dsize, d_data, ldd * dsize, N * dsize, M, cudaMemcpyDeviceToDevice, x.stream));
    }
  }
  const void* bias = g.bias;
  Tensor biasp;
  if ((g.epilogue == GemmEpilogue::kBias || g.epilogue == GemmEpilogue::kGeluAuxBias) && np != N) {
    const int64_t bsize = SizeOf(g.bias_dtype);
    biasp = Empty({np}, {.dtype = g.bias_dtype, .device = x.device});
    OCTET_CUDA_CHECK(cudaMemsetAsync(biasp.raw_data(), 0, np * bsize, x.stream));
    OCTET_CUDA_CHECK(cudaMemcpyAsync(biasp.raw_data(), g.bias, N * bsize, cudaMemcpyDeviceToDevice, x.stream));
    bias = biasp.raw_data();
  }
  // The GELU pre-activation (aux) is padded like D.
  void* aux = g.aux;
  const int64_t aux_size = SizeOf(g.d_dtype);
  Tensor auxp;
  if (EpilogueUsesAux(g.epilogue) && plan.pad_output) {
    auxp = Empty({M, np}, {.dtype = g.d_dtype, .device = x.device});
    aux = auxp.raw_data();
  }
  GemmDescKey k = BaseKey(x);
  if (bias != g.bias) k.align_bias = AlignOf(bias);
  if (EpilogueUsesAux(g.epilogue)) {
    k.aux_ld = auxp.defined() ? np : g.aux_ld;
    k.align_aux = AlignOf(aux);
  }
  k.m = np;
  k.n = M;
  k.k = kp;
  k.transa = true;
  k.transb = false;
  k.lda = kp;
  k.ldb = kp;
  k.a_dtype = g.b.dtype;
  k.b_dtype = g.a.dtype;
  k.align_a = AlignOf(bp.raw_data());
  k.align_b = AlignOf(ap.raw_data());
  k.fast_accum = plan.fast_accum;
  k.a_scale_mode = k.b_scale_mode = GemmScaleMode::kScalar32F;
  LtCall call;
  FillOutput(k, call, g.d_dtype, out, out_ld, g);
  call.a = bp.raw_data();
  call.b = ap.raw_data();
  call.ptrs.a_scale = g.b.scale_inv;
  call.ptrs.b_scale = g.a.scale_inv;
  call.ptrs.bias = bias;
  call.ptrs.aux = aux;
  call.alpha = &g.alpha;
  call.beta = &g.beta;
  if (!RunLt(k, call, x.stream, why)) return false;
  if (plan.pad_output) {
    OCTET_CUDA_CHECK(
        cudaMemcpy2DAsync(d_data, ldd * dsize, out, np * dsize, N * dsize, M, cudaMemcpyDeviceToDevice, x.stream));
  }
  if (auxp.defined()) {
    OCTET_CUDA_CHECK(cudaMemcpy2DAsync(g.aux, g.aux_ld * aux_size, aux, np * aux_size, N * aux_size, M,
                                       cudaMemcpyDeviceToDevice, x.stream));
  }
  return true;
}

// kBf16Fallback: FP8 operands converted exactly to BF16, scale_invs folded
// into a device alpha, the result converted (and, for an FP8 D, quantized
// with its amax) when D is not bfloat16/float32.
void RunBf16Fallback(const Ctx& x, const GemmPlan& plan, const GemmRequest& req, int64_t bi) {
  const GemmArgs& g = x.g;
  const int64_t M = g.m, N = g.n, K = g.k;
  const void* a_data = ByteOffset(g.a.data, bi * g.batch_stride_a, g.a.dtype);
  const void* b_data = ByteOffset(g.b.data, bi * g.batch_stride_b, g.b.dtype);
  void* d_data = const_cast<char*>(ByteOffset(g.d, bi * g.batch_stride_d, g.d_dtype));
  const int64_t a_rows = g.trans_a ? K : M, a_cols = g.trans_a ? M : K;
  const int64_t b_rows = g.trans_b ? N : K, b_cols = g.trans_b ? K : N;
  const int64_t lda = g.a.ld > 0 ? g.a.ld : a_cols, ldb = g.b.ld > 0 ? g.b.ld : b_cols;
  const int64_t ldd = g.ldd > 0 ? g.ldd : N;
  Tensor abf = Empty({a_rows, a_cols}, {.dtype = DType::kBFloat16, .device = x.device});
  Tensor bbf = Empty({b_rows, b_cols}, {.dtype = DType::kBFloat16, .device = x.device});
  PackMatrixCuda(x.stream, a_data, g.a.dtype, a_rows, a_cols, lda, 1, abf.raw_data(), DType::kBFloat16, a_rows, a_cols);
  PackMatrixCuda(x.stream, b_data, g.b.dtype, b_rows, b_cols, ldb, 1, bbf.raw_data(), DType::kBFloat16, b_rows, b_cols);
  Tensor alpha_beta = Empty({2}, {.dtype = DType::kFloat32, .device = x.device});
  float* ab = alpha_beta.data<float>();
  ScaledAlphaBetaCuda(x.stream, g.alpha, g.a.scale_inv, g.b.scale_inv, g.beta, ab);

  const bool scratch = !(g.d_dtype == DType::kBFloat16 || g.d_dtype == DType::kFloat32);
  const DType lt_d = scratch ? DType::kFloat32 : g.d_dtype;
  OCTET_CHECK(!scratch || !EpilogueUsesAux(g.epilogue), "cuBLASLt GEMM: the ", Name(g.epilogue),
              " epilogue is not supported in the BF16 fallback with a ", Name(g.d_dtype), " output: ", x.what);
  Tensor dscratch;
  void* out = d_data;
  int64_t out_ld = ldd;
  if (scratch) {
    dscratch = Empty({M, N}, {.dtype = DType::kFloat32, .device = x.device});
    out = dscratch.raw_data();
    out_ld = N;
    if (g.beta != 0.0f) {  // float16 D accumulates: start from D
      PackMatrixCuda(x.stream, d_data, g.d_dtype, M, N, ldd, 1, out, DType::kFloat32, M, N);
    }
  }
  // Bias in the output's dtype (cuBLASLt: bias type = D type for non-FP8 GEMMs).
  const bool bias_input = g.epilogue == GemmEpilogue::kBias || g.epilogue == GemmEpilogue::kGeluAuxBias;
  const bool bias_output = g.epilogue == GemmEpilogue::kDGeluBGrad || g.epilogue == GemmEpilogue::kBGradB;
  const int64_t bias_len = g.epilogue == GemmEpilogue::kBGradB ? M : N;
  void* bias = const_cast<void*>(g.bias);
  Tensor bias_conv;
  if ((bias_input || bias_output) && g.bias_dtype != lt_d) {
    bias_conv = Empty({bias_len}, {.dtype = lt_d, .device = x.device});
    if (bias_input)
      PackMatrixCuda(x.stream, g.bias, g.bias_dtype, 1, bias_len, bias_len, 1, bias_conv.raw_data(), lt_d, 1, bias_len);
    bias = bias_conv.raw_data();
  }
  GemmDescKey k = BaseKey(x);
  k.m = plan.m;
  k.n = plan.n;
  k.k = plan.k;
  k.transa = plan.transa;
  k.transb = plan.transb;
  k.lda = plan.a.ld;
  k.ldb = plan.b.ld;
  k.a_dtype = k.b_dtype = DType::kBFloat16;
  k.bias_dtype = lt_d;
  k.align_a = AlignOf(bbf.raw_data());
  k.align_b = AlignOf(abf.raw_data());
  k.alpha_device = true;
  if (EpilogueUsesBias(g.epilogue)) k.align_bias = AlignOf(bias);
  if (EpilogueUsesAux(g.epilogue)) k.align_aux = AlignOf(g.aux);
  LtCall call;
  GemmArgs plain = g;  // FillOutput must not see the FP8 D
  plain.d_dtype = lt_d;
  FillOutput(k, call, lt_d, out, out_ld, plain);
  call.a = bbf.raw_data();
  call.b = abf.raw_data();
  call.ptrs.bias = bias;
  call.ptrs.aux = g.aux;
  call.alpha = ab;
  call.beta = ab + 1;
  std::string why;
  OCTET_CHECK(RunLt(k, call, x.stream, &why), "cuBLASLt GEMM: the BF16 fallback cannot run either: ", why, "; for ",
              x.what);
  if (bias_output && bias != g.bias) {
    PackMatrixCuda(x.stream, bias, lt_d, 1, bias_len, bias_len, 1, const_cast<void*>(g.bias), g.bias_dtype, 1,
                   bias_len);
  }
  if (scratch) {
    const bool fp8_out = IsFp8(g.d_dtype);
    ConvertOutputCuda(x.stream, static_cast<const float*>(out), M, N, N, d_data, g.d_dtype, ldd,
                      fp8_out ? g.d_scale : nullptr, fp8_out ? g.d_amax : nullptr);
  }
  (void)req;
}

}  // namespace

void CublasLtGemm(const GemmArgs& g) {
  ValidateArgs(g);
  DeviceGuard guard(g.device);
  const DeviceProps& props = Props(g.device);
  Ctx x{g, ComputeCapability{props.major, props.minor}, CurrentStream(g.device), Device(DeviceType::kCUDA, g.device),
        DescribeArgs(g)};
  const GemmRequest req = ToRequest(g, x.cc);
  const GemmPlan plan = PlanGemm(req);
  // The caller can apply the epilogue itself (GemmArgs::epilogue_unsupported):
  // an FP8 GEMM that could not run its epilogue directly declines it rather
  // than dropping the whole GEMM to BF16.
  const bool may_decline = g.epilogue != GemmEpilogue::kNone && g.epilogue_unsupported != nullptr;
  if (may_decline && plan.fp8 && (plan.path == GemmPath::kBf16Fallback || plan.path == GemmPath::kPadded) &&
      EpilogueUsesAux(g.epilogue)) {
    *g.epilogue_unsupported = true;
    return;
  }
  switch (plan.path) {
    case GemmPath::kEmpty:
      return;
    case GemmPath::kZeroK: {
      OCTET_CHECK(g.epilogue == GemmEpilogue::kNone, "cuBLASLt GEMM: K = 0 with the ", Name(g.epilogue),
                  " epilogue is not supported: ", x.what);
      OCTET_CHECK(g.beta == 0.0f || g.beta == 1.0f, "cuBLASLt GEMM: K = 0 supports beta 0 or 1, got ", g.beta, ": ",
                  x.what);
      if (IsFp8(g.d_dtype) && g.d_amax != nullptr)
        OCTET_CUDA_CHECK(cudaMemsetAsync(g.d_amax, 0, sizeof(float), x.stream));
      if (g.beta == 0.0f) {
        const int64_t ldd = g.ldd > 0 ? g.ldd : g.n, size = SizeOf(g.d_dtype);
        for (int32_t bi = 0; bi < g.batch; ++bi) {
          void* d = const_cast<char*>(ByteOffset(g.d, bi * g.batch_stride_d, g.d_dtype));
          OCTET_CUDA_CHECK(cudaMemset2DAsync(d, ldd * size, 0, g.n * size, g.m, x.stream));
        }
      }
      return;
    }
    case GemmPath::kDirect: {
      std::string why;
      if (RunDirect(x, plan, &why)) return;
      if (may_decline) {
        *g.epilogue_unsupported = true;
        return;
      }
      OCTET_CHECK(plan.fp8, why, "; for ", x.what);
      const GemmPlan fb = PlanBf16Fallback(req, why);
      RecordGemmFallback(why);
      for (int32_t bi = 0; bi < g.batch; ++bi) RunBf16Fallback(x, fb, req, bi);
      return;
    }
    case GemmPath::kPadded: {
      RecordGemmPadded(plan.reason + "[" + x.what + "]");
      for (int32_t bi = 0; bi < g.batch; ++bi) {
        std::string why;
        if (RunPadded(x, plan, bi, &why)) continue;
        OCTET_CHECK(bi == 0, "cuBLASLt GEMM: algorithm support changed inside a batch: ", x.what);
        const GemmPlan fb = PlanBf16Fallback(req, why);
        RecordGemmFallback(why);
        for (int32_t bj = 0; bj < g.batch; ++bj) RunBf16Fallback(x, fb, req, bj);
        return;
      }
      return;
    }
    case GemmPath::kBf16Fallback:
      RecordGemmFallback(plan.reason + " [" + x.what + "]");
      for (int32_t bi = 0; bi < g.batch; ++bi) RunBf16Fallback(x, plan, req, bi);
      return;
  }
}

size_t GemmDescriptorCacheSize() { return Cache().size(); }

}  // namespace octet::cuda
