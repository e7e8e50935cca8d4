#include <octet/ops/gemm_layout.h>

#include <absl/hash/hash.h>

#include <algorithm>
#include <atomic>
#include <sstream>

#include <octet/core/error.h>
#include <octet/core/log.h>

namespace octet {

const char* Name(GemmRole role) {
  switch (role) {
    case GemmRole::kGeneral:
      return "general";
    case GemmRole::kFprop:
      return "fprop";
    case GemmRole::kDgrad:
      return "dgrad";
    case GemmRole::kWgrad:
      return "wgrad";
  }
  return "?";
}

const char* Name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone:
      return "none";
    case GemmEpilogue::kBias:
      return "bias";
    case GemmEpilogue::kGeluAuxBias:
      return "gelu_aux_bias";
    case GemmEpilogue::kDGelu:
      return "dgelu";
    case GemmEpilogue::kDGeluBGrad:
      return "dgelu_bgrad";
    case GemmEpilogue::kBGradB:
      return "bgradb";
  }
  return "?";
}

const char* Name(GemmScaleMode m) {
  switch (m) {
    case GemmScaleMode::kNone:
      return "none";
    case GemmScaleMode::kScalar32F:
      return "scalar_32f";
    case GemmScaleMode::kVec128_32F:
      return "vec128_32f";
    case GemmScaleMode::kBlk128x128_32F:
      return "blk128x128_32f";
  }
  return "?";
}

const char* Name(GemmPath p) {
  switch (p) {
    case GemmPath::kEmpty:
      return "empty";
    case GemmPath::kZeroK:
      return "zero_k";
    case GemmPath::kDirect:
      return "direct";
    case GemmPath::kPadded:
      return "padded";
    case GemmPath::kBf16Fallback:
      return "bf16_fallback";
  }
  return "?";
}

bool Fp8GemmSupported(ComputeCapability cc) { return cc.value() >= 89; }

bool Fp8GemmRequiresTN(ComputeCapability cc) {
  const int v = cc.value();
  const bool non_tn_ok = (v >= 100 && v < 120) || v >= 130;
  return !non_tn_ok;
}

uint32_t PointerAlignment(uintptr_t address) {
  if (address == 0) return 256;
  uint32_t a = 1;
  while (a < 256 && (address & a) == 0) a <<= 1;
  return a;
}

GemmRequest LinearFprop(int64_t tokens, int64_t in_features, int64_t out_features, DType x_dtype, DType w_dtype,
                        DType y_dtype, ComputeCapability cc) {
  // Y[T,Nout] = X[T,Kin] · W[Nout,Kin]ᵀ: already TN.
  GemmRequest r;
  r.role = GemmRole::kFprop;
  r.m = tokens;
  r.n = out_features;
  r.k = in_features;
  r.trans_a = false;
  r.trans_b = true;
  r.a_dtype = x_dtype;
  r.b_dtype = w_dtype;
  r.d_dtype = y_dtype;
  r.cc = cc;
  return r;
}

GemmRequest LinearDgrad(int64_t tokens, int64_t in_features, int64_t out_features, DType dy_dtype, DType w_dtype,
                        DType dx_dtype, ComputeCapability cc) {
  // dX[T,Kin] = dY[T,Nout] · W[Nout,Kin]; FP8 TN reads Wᵀ [Kin,Nout].
  GemmRequest r;
  r.role = GemmRole::kDgrad;
  r.m = tokens;
  r.n = in_features;
  r.k = out_features;
  r.trans_a = false;
  r.trans_b = false;
  r.a_dtype = dy_dtype;
  r.b_dtype = w_dtype;
  r.d_dtype = dx_dtype;
  r.b_has_transpose = IsFp8(w_dtype);
  r.cc = cc;
  return r;
}

GemmRequest LinearWgrad(int64_t tokens, int64_t in_features, int64_t out_features, DType dy_dtype, DType x_dtype,
                        DType dw_dtype, ComputeCapability cc) {
  // dW[Nout,Kin] = dY[T,Nout]ᵀ · X[T,Kin]; FP8 TN reads dYᵀ [Nout,T] and Xᵀ [Kin,T].
  GemmRequest r;
  r.role = GemmRole::kWgrad;
  r.m = out_features;
  r.n = in_features;
  r.k = tokens;
  r.trans_a = true;
  r.trans_b = false;
  r.a_dtype = dy_dtype;
  r.b_dtype = x_dtype;
  r.d_dtype = dw_dtype;
  r.a_has_transpose = IsFp8(dy_dtype);
  r.b_has_transpose = IsFp8(x_dtype);
  r.cc = cc;
  return r;
}

namespace {

std::string Describe(const GemmRequest& r) {
  std::ostringstream os;
  os << Name(r.role) << " GEMM D[" << r.m << "," << r.n << "] = " << (r.trans_a ? "A[K,M]ᵀ" : "A[M,K]") << "·"
     << (r.trans_b ? "B[N,K]ᵀ" : "B[K,N]") << " with M=" << r.m << " N=" << r.n << " K=" << r.k << ", A "
     << Name(r.a_dtype) << ", B " << Name(r.b_dtype) << ", D " << Name(r.d_dtype) << ", sm_" << r.cc.value();
  return os.str();
}

bool IsGemmFloat(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16 || d == DType::kFloat64;
}

// The direct (no repacking) cuBLASLt layout of NOTE [row-major GEMM on cuBLASLt].
// lda/ldb are the row strides of our A and B as they are fed (after any swap
// to a transposed copy); trans flags likewise.
void FillLtLayout(GemmPlan& p, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                  int64_t ldd) {
  p.m = N;
  p.n = M;
  p.k = K;
  p.transa = trans_b;
  p.transb = trans_a;
  p.a = p.transa ? LtMatrix{p.k, p.m, ldb} : LtMatrix{p.m, p.k, ldb};
  p.b = p.transb ? LtMatrix{p.n, p.k, lda} : LtMatrix{p.k, p.n, lda};
  p.d = LtMatrix{p.m, p.n, ldd};
}

}  // namespace

GemmPlan PlanGemm(const GemmRequest& r) {
  const std::string what = Describe(r);
  OCTET_CHECK(r.m >= 0 && r.n >= 0 && r.k >= 0, "gemm: negative size in ", what);
  const int64_t a_cols = r.trans_a ? r.m : r.k;  // stored row length
  const int64_t b_cols = r.trans_b ? r.k : r.n;
  const int64_t lda = r.lda > 0 ? r.lda : std::max<int64_t>(a_cols, 1);
  const int64_t ldb = r.ldb > 0 ? r.ldb : std::max<int64_t>(b_cols, 1);
  const int64_t ldd = r.ldd > 0 ? r.ldd : std::max<int64_t>(r.n, 1);
  OCTET_CHECK(lda >= a_cols, "gemm: row stride of A (", lda, ") is smaller than its stored row length ", a_cols, " in ",
              what);
  OCTET_CHECK(ldb >= b_cols, "gemm: row stride of B (", ldb, ") is smaller than its stored row length ", b_cols, " in ",
              what);
  OCTET_CHECK(ldd >= r.n, "gemm: row stride of D (", ldd, ") is smaller than N = ", r.n, " in ", what);

  const bool fp8_a = IsFp8(r.a_dtype), fp8_b = IsFp8(r.b_dtype);
  OCTET_CHECK(fp8_a == fp8_b,
              "gemm: FP8 and non-FP8 operands cannot be mixed (dequantize one or quantize the other): ", what);
  GemmPlan p;
  p.fp8 = fp8_a;
  p.lt_a_dtype = r.b_dtype;
  p.lt_b_dtype = r.a_dtype;
  if (!p.fp8) {
    OCTET_CHECK(!IsFp8(r.d_dtype), "gemm: an FP8 output needs FP8 operands: ", what);
  }
  if (!p.fp8) {
    OCTET_CHECK(r.a_dtype == r.b_dtype, "gemm: operands must have the same dtype: ", what);
    OCTET_CHECK(IsGemmFloat(r.a_dtype),
                "gemm: unsupported operand dtype (expected float32, float64, bfloat16, "
                "float16 or FP8): ",
                what);
    const bool d_ok = r.d_dtype == r.a_dtype ||
                      (r.d_dtype == DType::kFloat32 && (r.a_dtype == DType::kBFloat16 || r.a_dtype == DType::kFloat16));
    OCTET_CHECK(d_ok, "gemm: output dtype ", Name(r.d_dtype), " is not supported for ", Name(r.a_dtype),
                " operands (expected the operand dtype",
                (r.a_dtype == DType::kBFloat16 || r.a_dtype == DType::kFloat16) ? " or float32" : "", "): ", what);
  } else {
    OCTET_CHECK(!(r.a_dtype == DType::kFloat8E5M2 && r.b_dtype == DType::kFloat8E5M2),
                "gemm: fp8_e5m2 x fp8_e5m2 is not supported by cuBLASLt (use E4M3 for one operand): ", what);
    OCTET_CHECK(r.d_dtype == DType::kFloat32 || r.d_dtype == DType::kBFloat16 || r.d_dtype == DType::kFloat16 ||
                    IsFp8(r.d_dtype),
                "gemm: output dtype ", Name(r.d_dtype), " is not supported for FP8 operands: ", what);
    OCTET_CHECK(r.epilogue != GemmEpilogue::kGeluAuxBias || !IsFp8(r.d_dtype),
                "gemm: an FP8 output with the GELU aux epilogue is not supported: ", what);
  }
  p.fast_accum = p.fp8 && r.role == GemmRole::kFprop;

  if (r.m == 0 || r.n == 0) {
    p.path = GemmPath::kEmpty;
    FillLtLayout(p, r.m, r.n, r.k, r.trans_a, r.trans_b, lda, ldb, ldd);
    return p;
  }
  if (r.k == 0) {
    p.path = GemmPath::kZeroK;
    FillLtLayout(p, r.m, r.n, r.k, r.trans_a, r.trans_b, lda, ldb, ldd);
    return p;
  }
  if (!p.fp8) {
    p.path = GemmPath::kDirect;
    FillLtLayout(p, r.m, r.n, r.k, r.trans_a, r.trans_b, lda, ldb, ldd);
    return p;
  }

  // ---- FP8 ----
  auto fallback = [&](const std::string& reason) { return PlanBf16Fallback(r, reason); };
  if (!Fp8GemmSupported(r.cc)) {
    return fallback("sm_" + std::to_string(r.cc.value()) + " has no FP8 tensor cores (needs sm_89 or newer)");
  }
  // cuBLASLt's FP8 table has an E5M2 output only when an input is E5M2.
  if (r.d_dtype == DType::kFloat8E5M2 && r.a_dtype == DType::kFloat8E4M3 && r.b_dtype == DType::kFloat8E4M3)
    return fallback("cuBLASLt has no fp8_e4m3 x fp8_e4m3 -> fp8_e5m2 kernel");

  // Orientation (NOTE [FP8 TN rule]): A as [M,K], B as [N,K].
  bool trans_a = r.trans_a, trans_b = r.trans_b;
  int64_t lda_eff = lda, ldb_eff = ldb;
  uint32_t align_a = r.align_a, align_b = r.align_b;
  std::string transpose_reason;
  if (Fp8GemmRequiresTN(r.cc)) {
    if (trans_a) {
      p.use_transpose_a = true;
      p.make_transpose_a = !r.a_has_transpose;
      trans_a = false;
      lda_eff = (r.a_has_transpose && r.a_transpose_ld > 0) ? r.a_transpose_ld : r.k;
      align_a = r.a_has_transpose ? r.align_a_transpose : 256;
      if (p.make_transpose_a) transpose_reason += "A has no transposed FP8 copy; ";
    }
    if (!trans_b) {
      p.use_transpose_b = true;
      p.make_transpose_b = !r.b_has_transpose;
      trans_b = true;
      ldb_eff = (r.b_has_transpose && r.b_transpose_ld > 0) ? r.b_transpose_ld : r.k;
      align_b = r.b_has_transpose ? r.align_b_transpose : 256;
      if (p.make_transpose_b) transpose_reason += "B has no transposed FP8 copy; ";
    }
  }
  const int64_t d_size = SizeOf(r.d_dtype);
  const int64_t out_multiple = 16 / d_size;
  std::string misaligned;
  if (r.k % 16 != 0) misaligned += "K " + std::to_string(r.k) + " % 16 != 0; ";
  if (lda_eff % 16 != 0) misaligned += "row stride of A " + std::to_string(lda_eff) + " % 16 != 0; ";
  if (ldb_eff % 16 != 0) misaligned += "row stride of B " + std::to_string(ldb_eff) + " % 16 != 0; ";
  if (r.n % out_multiple != 0) {
    misaligned += "N " + std::to_string(r.n) + " % " + std::to_string(out_multiple) + " != 0 for a " + Name(r.d_dtype) +
                  " output; ";
  }
  if (ldd % out_multiple != 0) misaligned += "row stride of D " + std::to_string(ldd) + " is not a 16-byte multiple; ";
  if (align_a < 16) misaligned += "A pointer is not 16-byte aligned; ";
  if (align_b < 16) misaligned += "B pointer is not 16-byte aligned; ";
  if (r.align_d < 16) misaligned += "D pointer is not 16-byte aligned; ";

  if (misaligned.empty()) {
    p.path = GemmPath::kDirect;
    p.reason = transpose_reason;
    FillLtLayout(p, r.m, r.n, r.k, trans_a, trans_b, lda_eff, ldb_eff, ldd);
    return p;
  }

  // Repack TN with K (and N) padded, when that adds at most 50% work.
  const int64_t kp = RoundUp(r.k, 16);
  const int64_t np = RoundUp(r.n, out_multiple);
  const bool cheap =
      static_cast<double>(kp) * static_cast<double>(np) <= 1.5 * static_cast<double>(r.k) * static_cast<double>(r.n);
  const bool epilogue_ok = r.epilogue == GemmEpilogue::kNone || r.epilogue == GemmEpilogue::kBias;
  if (!r.allow_padding || !cheap || !epilogue_ok) {
    std::string why = misaligned;
    if (!r.allow_padding)
      why += "padding not allowed";
    else if (!cheap)
      why += "padding K to " + std::to_string(kp) + " and N to " + std::to_string(np) + " would add over 50% work";
    else
      why += std::string("padding is not supported with the ") + Name(r.epilogue) + " epilogue";
    return fallback(why);
  }
  p.path = GemmPath::kPadded;
  p.reason = misaligned;
  p.use_transpose_a = p.use_transpose_b = p.make_transpose_a = p.make_transpose_b = false;
  p.k_padded = kp;
  p.n_padded = np;
  p.pad_output = np != r.n || ldd % out_multiple != 0 || r.align_d < 16;
  p.transa = true;
  p.transb = false;
  p.m = np;
  p.n = r.m;
  p.k = kp;
  p.a = LtMatrix{kp, np, kp};
  p.b = LtMatrix{kp, r.m, kp};
  p.d = LtMatrix{np, r.m, p.pad_output ? np : ldd};
  return p;
}

GemmPlan PlanBf16Fallback(const GemmRequest& r, const std::string& reason) {
  // Both operands converted to contiguous BF16 in their stored orientation.
  GemmPlan p;
  p.path = GemmPath::kBf16Fallback;
  p.reason = reason;
  p.fp8 = IsFp8(r.a_dtype);
  p.lt_a_dtype = p.lt_b_dtype = DType::kBFloat16;
  const int64_t a_cols = r.trans_a ? r.m : r.k, b_cols = r.trans_b ? r.k : r.n;
  const int64_t ldd = r.ldd > 0 ? r.ldd : std::max<int64_t>(r.n, 1);
  // FP8 and float16 D: a float32 scratch [M,N], converted afterwards.
  const bool scratch = IsFp8(r.d_dtype) || r.d_dtype == DType::kFloat16;
  FillLtLayout(p, r.m, r.n, r.k, r.trans_a, r.trans_b, std::max<int64_t>(a_cols, 1), std::max<int64_t>(b_cols, 1),
               scratch ? std::max<int64_t>(r.n, 1) : ldd);
  return p;
}

std::string GemmPlan::ToString() const {
  std::ostringstream os;
  os << "GemmPlan{path=" << Name(path) << " transa=" << (transa ? 'T' : 'N') << " transb=" << (transb ? 'T' : 'N')
     << " m=" << m << " n=" << n << " k=" << k << " A(" << a.rows << "x" << a.cols << ",ld=" << a.ld << ") B(" << b.rows
     << "x" << b.cols << ",ld=" << b.ld << ") D(" << d.rows << "x" << d.cols << ",ld=" << d.ld << ")"
     << (use_transpose_a ? " A^T-copy" : "") << (use_transpose_b ? " B^T-copy" : "")
     << (make_transpose_a || make_transpose_b ? " (built)" : "") << (fast_accum ? " fast_accum" : "");
  if (path == GemmPath::kPadded) os << " k_padded=" << k_padded << " n_padded=" << n_padded;
  if (!reason.empty()) os << " reason: " << reason;
  os << "}";
  return os.str();
}

// ---- counters ----
namespace {

std::atomic<int64_t> g_fallbacks{0};
std::atomic<int64_t> g_padded{0};
std::atomic<int64_t> g_transposes{0};

// Each distinct (kind, reason) is reported once per process (core/log.h).
void Report(LogLevel level, const char* kind, const std::string& reason) {
  if (LogEnabled(level)) Log(level, std::string("FP8 GEMM ") + kind + ": " + reason);
}

}  // namespace

int64_t GemmFallbackCount() { return g_fallbacks.load(); }
int64_t GemmPaddedCount() { return g_padded.load(); }
int64_t GemmTransposeCopyCount() { return g_transposes.load(); }

void RecordGemmFallback(const std::string& reason) {
  g_fallbacks.fetch_add(1);
  Report(LogLevel::kWarning, "falls back to BF16", reason);
}
void RecordGemmPadded(const std::string& reason) {
  g_padded.fetch_add(1);
  Report(LogLevel::kInfo, "padded", reason);
}
void RecordGemmTransposeCopy(const std::string& reason) {
  g_transposes.fetch_add(1);
  Report(LogLevel::kInfo, "builds a transposed copy", reason);
}
void ResetGemmCountersForTesting() {
  g_fallbacks = 0;
  g_padded = 0;
  g_transposes = 0;
}

// ---- cache key ----
bool operator==(const GemmDescKey& x, const GemmDescKey& y) {
  return x.device == y.device && x.cc == y.cc && x.m == y.m && x.n == y.n && x.k == y.k && x.lda == y.lda &&
         x.ldb == y.ldb && x.ldc == y.ldc && x.ldd == y.ldd && x.transa == y.transa && x.transb == y.transb &&
         x.a_dtype == y.a_dtype && x.b_dtype == y.b_dtype && x.c_dtype == y.c_dtype && x.d_dtype == y.d_dtype &&
         x.bias_dtype == y.bias_dtype && x.epilogue == y.epilogue && x.a_scale_mode == y.a_scale_mode &&
         x.b_scale_mode == y.b_scale_mode && x.fast_accum == y.fast_accum && x.d_scale == y.d_scale &&
         x.amax_d == y.amax_d && x.alpha_device == y.alpha_device && x.aux_ld == y.aux_ld && x.batch == y.batch &&
         x.stride_a == y.stride_a && x.stride_b == y.stride_b && x.stride_d == y.stride_d &&
         x.align_bias == y.align_bias && x.align_aux == y.align_aux && x.align_a == y.align_a && x.align_b == y.align_b && x.align_c == y.align_c &&
         x.align_d == y.align_d && x.workspace_bytes == y.workspace_bytes && x.sm_count_target == y.sm_count_target;
}

std::string GemmDescKey::ToString() const {
  std::ostringstream os;
  os << "cuda:" << device << " sm_" << cc << " m=" << m << " n=" << n << " k=" << k << " trans=" << (transa ? 'T' : 'N')
     << (transb ? 'T' : 'N') << " ld=" << lda << "/" << ldb << "/" << ldc << "/" << ldd << " A=" << Name(a_dtype)
     << " B=" << Name(b_dtype) << " C=" << Name(c_dtype) << " D=" << Name(d_dtype) << " epilogue=" << Name(epilogue);
  if (epilogue != GemmEpilogue::kNone) os << " bias=" << Name(bias_dtype);
  if (a_scale_mode != GemmScaleMode::kNone) os << " scale_modes=" << Name(a_scale_mode) << "/" << Name(b_scale_mode);
  if (fast_accum) os << " fast_accum";
  if (batch != 1) os << " batch=" << batch << " strides=" << stride_a << "/" << stride_b << "/" << stride_d;
  os << " align=" << align_a << "/" << align_b << "/" << align_c << "/" << align_d;
  return os.str();
}

size_t HashOf(const GemmDescKey& key) { return absl::Hash<GemmDescKey>{}(key); }

}  // namespace octet
