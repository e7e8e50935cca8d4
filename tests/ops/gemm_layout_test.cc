// GEMM layout decisions (ops/gemm_layout.h), checked without a GPU:
//  - the Linear fprop/dgrad/wgrad mappings reproduce CUDA_NOTES §1.4 exactly
//    (Transformer Engine's cuBLASLt calls), for BF16 and FP8, on each GPU
//    generation's TN rule;
//  - every plan, executed by a naive column-major GEMM written here with
//    cuBLAS semantics, gives the row-major product of a float64 reference
//    (over a grid of transposes, shapes and row strides, plus the transposed
//    FP8 copies and the padded repack);
//  - alignment -> padding / BF16 fallback decisions, FAST_ACCUM, rejected
//    dtype combinations with their messages, the cache key and counters.
#include <octet/ops/gemm_layout.h>

#include <absl/container/flat_hash_set.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;

constexpr DType kE4M3 = DType::kFloat8E4M3;
constexpr DType kE5M2 = DType::kFloat8E5M2;
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kF32 = DType::kFloat32;
constexpr ComputeCapability kAda{8, 9}, kHopper{9, 0}, kBlackwell{10, 0}, kGeForce50{12, 0}, kAmpere{8, 6},
    kFuture{13, 0};

void ExpectMatrix(const LtMatrix& m, int64_t rows, int64_t cols, int64_t ld, const char* what) {
  EXPECT_EQ(m.rows, rows) << what;
  EXPECT_EQ(m.cols, cols) << what;
  EXPECT_EQ(m.ld, ld) << what;
}

// ---- CUDA_NOTES §1.4, literally ----
constexpr int64_t T = 64, Kin = 32, Nout = 48;

TEST(GemmLayout, FpropIsTNLikeTransformerEngine) {
  for (DType dt : {kBF16, kE4M3}) {
    const GemmPlan p = PlanGemm(LinearFprop(T, Kin, Nout, dt, dt, kBF16, kHopper));
    EXPECT_EQ(p.path, GemmPath::kDirect);
    EXPECT_TRUE(p.transa);
    EXPECT_FALSE(p.transb);
    EXPECT_EQ(p.m, Nout);
    EXPECT_EQ(p.n, T);
    EXPECT_EQ(p.k, Kin);
    ExpectMatrix(p.a, Kin, Nout, Kin, "A=W");
    ExpectMatrix(p.b, Kin, T, Kin, "B=X");
    ExpectMatrix(p.d, Nout, T, Nout, "D=Y");
    EXPECT_FALSE(p.use_transpose_a || p.use_transpose_b);
    EXPECT_EQ(p.fast_accum, IsFp8(dt)) << "FAST_ACCUM is for FP8 fprop only";
  }
}

TEST(GemmLayout, DgradIsNNAndFp8SwapsInWTransposeOnHopper) {
  const GemmPlan bf = PlanGemm(LinearDgrad(T, Kin, Nout, kBF16, kBF16, kBF16, kHopper));
  EXPECT_FALSE(bf.transa);
  EXPECT_FALSE(bf.transb);
  EXPECT_EQ(bf.m, Kin);
  EXPECT_EQ(bf.n, T);
  EXPECT_EQ(bf.k, Nout);
  ExpectMatrix(bf.a, Kin, Nout, Kin, "A=W");
  ExpectMatrix(bf.b, Nout, T, Nout, "B=dY");
  ExpectMatrix(bf.d, Kin, T, Kin, "D=dX");

  // FP8 (dY E5M2, W E4M3): A becomes Wᵀ stored [Kin,Nout], transa=T.
  const GemmPlan f8 = PlanGemm(LinearDgrad(T, Kin, Nout, kE5M2, kE4M3, kBF16, kHopper));
  EXPECT_EQ(f8.path, GemmPath::kDirect);
  EXPECT_TRUE(f8.transa);
  EXPECT_FALSE(f8.transb);
  EXPECT_EQ(f8.m, Kin);
  EXPECT_EQ(f8.n, T);
  EXPECT_EQ(f8.k, Nout);
  ExpectMatrix(f8.a, Nout, Kin, Nout, "A=Wᵀ copy");
  ExpectMatrix(f8.b, Nout, T, Nout, "B=dY");
  ExpectMatrix(f8.d, Kin, T, Kin, "D=dX");
  EXPECT_TRUE(f8.use_transpose_b);    // our B is W
  EXPECT_FALSE(f8.make_transpose_b);  // the Linear keeps the copy
  EXPECT_FALSE(f8.use_transpose_a);
  EXPECT_FALSE(f8.fast_accum);
  EXPECT_EQ(f8.lt_a_dtype, kE4M3);
  EXPECT_EQ(f8.lt_b_dtype, kE5M2);
}

TEST(GemmLayout, WgradIsNTAndFp8UsesXTransposeAndDyTransposeOnHopper) {
  const GemmPlan bf = PlanGemm(LinearWgrad(T, Kin, Nout, kBF16, kBF16, kF32, kHopper));
  EXPECT_FALSE(bf.transa);
  EXPECT_TRUE(bf.transb);
  EXPECT_EQ(bf.m, Kin);
  EXPECT_EQ(bf.n, Nout);
  EXPECT_EQ(bf.k, T);
  ExpectMatrix(bf.a, Kin, T, Kin, "A=X");
  ExpectMatrix(bf.b, Nout, T, Nout, "B=dY");
  ExpectMatrix(bf.d, Kin, Nout, Kin, "D=dW");

  const GemmPlan f8 = PlanGemm(LinearWgrad(T, Kin, Nout, kE5M2, kE4M3, kF32, kHopper));
  EXPECT_EQ(f8.path, GemmPath::kDirect);
  EXPECT_TRUE(f8.transa);
  EXPECT_FALSE(f8.transb);
  ExpectMatrix(f8.a, T, Kin, T, "A=Xᵀ copy");
  ExpectMatrix(f8.b, T, Nout, T, "B=dYᵀ copy");
  ExpectMatrix(f8.d, Kin, Nout, Kin, "D=dW");
  EXPECT_TRUE(f8.use_transpose_a && f8.use_transpose_b);
  EXPECT_FALSE(f8.make_transpose_a || f8.make_transpose_b);
  EXPECT_FALSE(f8.fast_accum);
}

TEST(GemmLayout, TnRuleFollowsComputeCapability) {
  EXPECT_FALSE(Fp8GemmSupported(kAmpere));
  for (ComputeCapability cc : {kAda, kHopper, kGeForce50}) EXPECT_TRUE(Fp8GemmRequiresTN(cc)) << cc.value();
  for (ComputeCapability cc : {kBlackwell, ComputeCapability{10, 3}, ComputeCapability{11, 0}, kFuture}) {
    EXPECT_FALSE(Fp8GemmRequiresTN(cc)) << cc.value();
  }
  // sm_100: dgrad stays NN, no transposed copy needed.
  const GemmPlan p = PlanGemm(LinearDgrad(T, Kin, Nout, kE5M2, kE4M3, kBF16, kBlackwell));
  EXPECT_EQ(p.path, GemmPath::kDirect);
  EXPECT_FALSE(p.transa || p.transb);
  EXPECT_FALSE(p.use_transpose_b);
  // sm_89 and sm_120 need TN like Hopper.
  for (ComputeCapability cc : {kAda, kGeForce50}) {
    const GemmPlan w = PlanGemm(LinearWgrad(T, Kin, Nout, kE5M2, kE4M3, kF32, cc));
    EXPECT_TRUE(w.transa && !w.transb) << cc.value();
  }
}

TEST(GemmLayout, MissingTransposedCopyIsBuilt) {
  GemmRequest r = LinearDgrad(T, Kin, Nout, kE5M2, kE4M3, kBF16, kHopper);
  r.b_has_transpose = false;
  const GemmPlan p = PlanGemm(r);
  EXPECT_EQ(p.path, GemmPath::kDirect);
  EXPECT_TRUE(p.use_transpose_b && p.make_transpose_b);
  EXPECT_NE(p.reason.find("B has no transposed FP8 copy"), std::string::npos) << p.reason;
}

// ---- alignment, padding, fallback ----
TEST(GemmLayout, TokenCountNotMultipleOf16PadsWgrad) {
  // T = 100 is wgrad's K: both transposed copies have row stride 100.
  GemmRequest r = LinearWgrad(100, Kin, Nout, kE5M2, kE4M3, kF32, kHopper);
  r.a_transpose_ld = r.b_transpose_ld = 100;
  const GemmPlan p = PlanGemm(r);
  EXPECT_EQ(p.path, GemmPath::kPadded) << p.ToString();
  EXPECT_EQ(p.k_padded, 112);
  EXPECT_EQ(p.n_padded, Kin);
  EXPECT_FALSE(p.pad_output);
  EXPECT_TRUE(p.transa && !p.transb);
  ExpectMatrix(p.a, 112, Kin, 112, "A'");
  ExpectMatrix(p.b, 112, Nout, 112, "B'");
  EXPECT_NE(p.reason.find("row stride of A 100 % 16 != 0"), std::string::npos) << p.reason;
  // The same tokens in fprop are the M dimension: no constraint.
  EXPECT_EQ(PlanGemm(LinearFprop(100, Kin, Nout, kE4M3, kE4M3, kBF16, kHopper)).path, GemmPath::kDirect);
}

// A K that is not a multiple of 16 pads even when the row strides are
// aligned (a K-slice of a wider matrix), and E4M3 x E4M3 cannot produce E5M2.
TEST(GemmLayout, Fp8KNotMultipleOf16PadsAndE5M2OutputFromE4M3FallsBack) {
  GemmRequest r = LinearFprop(64, 40, 64, kE4M3, kE4M3, kBF16, kHopper);  // K = Kin = 40
  r.lda = r.ldb = 64;
  GemmPlan p = PlanGemm(r);
  EXPECT_EQ(p.path, GemmPath::kPadded) << p.ToString();
  EXPECT_EQ(p.k_padded, 48);
  EXPECT_NE(p.reason.find("K 40 % 16 != 0"), std::string::npos) << p.reason;
  r = LinearFprop(64, 64, 64, kE4M3, kE4M3, DType::kFloat8E5M2, kHopper);
  p = PlanGemm(r);
  EXPECT_EQ(p.path, GemmPath::kBf16Fallback) << p.ToString();
  EXPECT_NE(p.reason.find("no fp8_e4m3 x fp8_e4m3 -> fp8_e5m2 kernel"), std::string::npos) << p.reason;
  r = LinearFprop(64, 64, 64, kE4M3, kE5M2, DType::kFloat8E5M2, kHopper);
  EXPECT_EQ(PlanGemm(r).path, GemmPath::kDirect);
}

TEST(GemmLayout, ExpensivePaddingFallsBackToBf16) {
  GemmRequest r = LinearWgrad(8, Kin, Nout, kE5M2, kE4M3, kF32, kHopper);  // K=8 -> 16 doubles the work
  r.a_transpose_ld = r.b_transpose_ld = 8;
  const GemmPlan p = PlanGemm(r);
  EXPECT_EQ(p.path, GemmPath::kBf16Fallback);
  EXPECT_EQ(p.lt_a_dtype, kBF16);
  EXPECT_EQ(p.lt_b_dtype, kBF16);
  EXPECT_FALSE(p.fast_accum || p.use_transpose_a || p.use_transpose_b);
  EXPECT_NE(p.reason.find("over 50% work"), std::string::npos) << p.reason;
  // The fallback keeps the stored orientation (wgrad: NT) on contiguous BF16 copies.
  EXPECT_FALSE(p.transa);
  EXPECT_TRUE(p.transb);
  ExpectMatrix(p.a, Kin, 8, Kin, "A=X bf16");
  ExpectMatrix(p.b, Nout, 8, Nout, "B=dY bf16");
}

TEST(GemmLayout, OutputWidthPadsForBf16AndFp8Outputs) {
  // N = Nout = 20: 20*2 bytes is not a 16-byte multiple; 24 is.
  const GemmPlan bf = PlanGemm(LinearFprop(T, Kin, 20, kE4M3, kE4M3, kBF16, kHopper));
  EXPECT_EQ(bf.path, GemmPath::kPadded);
  EXPECT_EQ(bf.n_padded, 24);
  EXPECT_TRUE(bf.pad_output);
  ExpectMatrix(bf.d, 24, T, 24, "D'");
  EXPECT_TRUE(bf.fast_accum);  // still fprop
  // FP8 output needs N % 16.
  EXPECT_EQ(PlanGemm(LinearFprop(T, Kin, 24, kE4M3, kE4M3, kE4M3, kHopper)).n_padded, 32);
  EXPECT_EQ(PlanGemm(LinearFprop(T, Kin, 24, kE4M3, kE4M3, kBF16, kHopper)).path, GemmPath::kDirect);
  // f32 output: N % 4.
  EXPECT_EQ(PlanGemm(LinearFprop(T, Kin, 20, kE4M3, kE4M3, kF32, kHopper)).path, GemmPath::kDirect);
}

TEST(GemmLayout, MisalignedPointersAreRepacked) {
  GemmRequest r = LinearFprop(T, Kin, Nout, kE4M3, kE4M3, kBF16, kHopper);
  r.align_a = 8;
  GemmPlan p = PlanGemm(r);
  EXPECT_EQ(p.path, GemmPath::kPadded);
  EXPECT_EQ(p.k_padded, Kin);
  EXPECT_FALSE(p.pad_output);
  EXPECT_NE(p.reason.find("A pointer is not 16-byte aligned"), std::string::npos);
  r.align_a = 256;
  r.align_d = 4;
  p = PlanGemm(r);
  EXPECT_EQ(p.path, GemmPath::kPadded);
  EXPECT_TRUE(p.pad_output);
}

TEST(GemmLayout, NoFp8TensorCoresOrNoPaddingFallsBack) {
  const GemmPlan old = PlanGemm(LinearFprop(T, Kin, Nout, kE4M3, kE4M3, kBF16, kAmpere));
  EXPECT_EQ(old.path, GemmPath::kBf16Fallback);
  EXPECT_NE(old.reason.find("sm_86 has no FP8 tensor cores"), std::string::npos) << old.reason;
  GemmRequest r = LinearFprop(T, 40, Nout, kE4M3, kE4M3, kBF16, kHopper);
  r.allow_padding = false;
  EXPECT_EQ(PlanGemm(r).path, GemmPath::kBf16Fallback);
  r.allow_padding = true;
  EXPECT_EQ(PlanGemm(r).path, GemmPath::kPadded);
  r.epilogue = GemmEpilogue::kGeluAuxBias;
  EXPECT_EQ(PlanGemm(r).path, GemmPath::kBf16Fallback);
  // An FP8 output in the fallback goes through an f32 scratch [M,N].
  GemmRequest q = LinearFprop(T, Kin, Nout, kE4M3, kE4M3, kE4M3, kAmpere);
  q.ldd = 64;
  ExpectMatrix(PlanGemm(q).d, Nout, T, Nout, "f32 scratch");
}

TEST(GemmLayout, BadCombinationsAreRejectedWithShapesAndDtypes) {
  std::string msg = ErrorOf([] { PlanGemm(LinearWgrad(T, Kin, Nout, kE5M2, kE5M2, kF32, kHopper)); });
  EXPECT_NE(msg.find("fp8_e5m2 x fp8_e5m2 is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wgrad GEMM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("M=48 N=32 K=64"), std::string::npos) << msg;
  msg = ErrorOf([] { PlanGemm(LinearFprop(T, Kin, Nout, kE4M3, kBF16, kBF16, kHopper)); });
  EXPECT_NE(msg.find("FP8 and non-FP8 operands cannot be mixed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("A fp8_e4m3, B bfloat16"), std::string::npos) << msg;
  msg = ErrorOf([] { PlanGemm(LinearFprop(T, Kin, Nout, kBF16, kBF16, kE4M3, kHopper)); });
  EXPECT_NE(msg.find("FP8 output needs FP8 operands"), std::string::npos) << msg;
  msg = ErrorOf([] { PlanGemm(LinearFprop(T, Kin, Nout, kF32, kF32, kBF16, kHopper)); });
  EXPECT_NE(msg.find("output dtype bfloat16 is not supported for float32"), std::string::npos) << msg;
  msg = ErrorOf([] { PlanGemm(LinearFprop(T, Kin, Nout, DType::kInt32, DType::kInt32, kF32, kHopper)); });
  EXPECT_NE(msg.find("unsupported operand dtype"), std::string::npos) << msg;
  GemmRequest r = LinearFprop(T, Kin, Nout, kF32, kF32, kF32, kHopper);
  r.lda = Kin - 1;
  msg = ErrorOf([&] { PlanGemm(r); });
  EXPECT_NE(msg.find("row stride of A (31) is smaller than its stored row length 32"), std::string::npos) << msg;
  // E4M3 x E5M2 in either order is fine.
  EXPECT_NO_THROW(PlanGemm(LinearDgrad(T, Kin, Nout, kE5M2, kE4M3, kBF16, kHopper)));
  EXPECT_NO_THROW(PlanGemm(LinearFprop(T, Kin, Nout, kE5M2, kE4M3, kBF16, kHopper)));
}

TEST(GemmLayout, EmptyAndZeroK) {
  EXPECT_EQ(PlanGemm(LinearFprop(0, Kin, Nout, kE4M3, kE4M3, kBF16, kHopper)).path, GemmPath::kEmpty);
  EXPECT_EQ(PlanGemm(LinearFprop(T, 0, Nout, kBF16, kBF16, kBF16, kHopper)).path, GemmPath::kZeroK);
  EXPECT_EQ(PlanGemm(LinearWgrad(0, Kin, Nout, kE5M2, kE4M3, kF32, kHopper)).path, GemmPath::kZeroK);
}

// ---- execute the plans with a column-major reference GEMM ----

// cuBLAS semantics, column-major, double: D(m×n) = op(A)·op(B).
void ColMajorGemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, const std::vector<double>& a, int64_t lda,
                  const std::vector<double>& b, int64_t ldb, std::vector<double>& d, int64_t ldd) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = transa ? a[p + i * lda] : a[i + p * lda];
        const double bv = transb ? b[j + p * ldb] : b[p + j * ldb];
        s += av * bv;
      }
      d[i + j * ldd] = s;
    }
  }
}

// A row-major stored matrix with row stride ld, random values.
struct Stored {
  int64_t rows, cols, ld;
  std::vector<double> v;
  double at(int64_t r, int64_t c) const { return v[r * ld + c]; }
};
Stored MakeStored(int64_t rows, int64_t cols, int64_t ld, std::mt19937& rng) {
  Stored s{rows, cols, ld, std::vector<double>(std::max<int64_t>(rows * ld, 1), 0.0)};
  std::uniform_int_distribution<int> u(-4, 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s.v[r * ld + c] = u(rng);
  return s;
}
Stored TransposedCopy(const Stored& s) {
  Stored t{s.cols, s.rows, s.rows, std::vector<double>(std::max<int64_t>(s.rows * s.cols, 1))};
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) t.v[c * t.ld + r] = s.at(r, c);
  return t;
}
Stored Contiguous(const Stored& s) {
  Stored c{s.rows, s.cols, std::max<int64_t>(s.cols, 1), std::vector<double>(std::max<int64_t>(s.rows * s.cols, 1))};
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t col = 0; col < s.cols; ++col) c.v[r * c.ld + col] = s.at(r, col);
  return c;
}
// Contiguous [rows_p, cols_p] copy of the logical matrix `logical(r, c)`, zero padded.
template <typename F>
std::vector<double> PackPadded(int64_t rows, int64_t cols, int64_t rows_p, int64_t cols_p, F logical) {
  std::vector<double> out(rows_p * cols_p, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols_p + c] = logical(r, c);
  return out;
}

// Runs `p` for request `r` on random operands and compares with the row-major reference.
void CheckPlanComputesProduct(const GemmRequest& r, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = r.m, N = r.n, K = r.k;
  const int64_t a_rows = r.trans_a ? K : M, a_cols = r.trans_a ? M : K;
  const int64_t b_rows = r.trans_b ? N : K, b_cols = r.trans_b ? K : N;
  const Stored A = MakeStored(a_rows, a_cols, r.lda > 0 ? r.lda : a_cols, rng);
  const Stored B = MakeStored(b_rows, b_cols, r.ldb > 0 ? r.ldb : b_cols, rng);
  auto opA = [&](int64_t i, int64_t p) { return r.trans_a ? A.at(p, i) : A.at(i, p); };
  auto opB = [&](int64_t p, int64_t j) { return r.trans_b ? B.at(j, p) : B.at(p, j); };
  const int64_t ldd = r.ldd > 0 ? r.ldd : N;

  const GemmPlan p = PlanGemm(r);
  SCOPED_TRACE(p.ToString());
  std::vector<double> out(M * ldd, -777.0);  // row-major D [M,N] with row stride ldd
  if (p.path == GemmPath::kPadded) {
    // A' [M, Kp] = op(A), B' [Np, Kp] = op(B)ᵀ, both contiguous TN.
    const auto ap = PackPadded(M, K, M, p.k_padded, opA);
    const auto bp = PackPadded(N, K, p.n_padded, p.k_padded, [&](int64_t j, int64_t q) { return opB(q, j); });
    std::vector<double> dp(p.d.ld * p.d.cols, 0.0);
    ColMajorGemm(p.transa, p.transb, p.m, p.n, p.k, bp, p.a.ld, ap, p.b.ld, dp, p.d.ld);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) out[i * ldd + j] = dp[i * p.d.ld + j];
  } else {
    ASSERT_TRUE(p.path == GemmPath::kDirect || p.path == GemmPath::kBf16Fallback);
    // cuBLAS A is our B (or its transposed copy), cuBLAS B is our A.
    // The BF16 fallback feeds contiguous converted copies in the stored orientation.
    const bool fallback = p.path == GemmPath::kBf16Fallback;
    const Stored a_fed = p.use_transpose_a ? TransposedCopy(A) : fallback ? Contiguous(A) : A;
    const Stored b_fed = p.use_transpose_b ? TransposedCopy(B) : fallback ? Contiguous(B) : B;
    // The transposed copies are contiguous; the plan must use their ld.
    EXPECT_EQ(p.a.ld, b_fed.ld);
    EXPECT_EQ(p.b.ld, a_fed.ld);
    ColMajorGemm(p.transa, p.transb, p.m, p.n, p.k, b_fed.v, p.a.ld, a_fed.v, p.b.ld, out, p.d.ld);
    EXPECT_EQ(p.d.ld, ldd);
    // Layout rows/cols must describe the buffers as stored.
    EXPECT_EQ(p.a.rows * p.a.cols, b_fed.rows * b_fed.cols);
    EXPECT_EQ(p.a.rows, b_fed.cols);
    EXPECT_EQ(p.b.rows, a_fed.cols);
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t q = 0; q < K; ++q) ref += opA(i, q) * opB(q, j);
      ASSERT_EQ(out[i * ldd + j], ref) << "D[" << i << "," << j << "]";
    }
  }
}

struct GridCase {
  DType a, b, d;
  ComputeCapability cc;
};

class GemmLayoutGrid : public ::testing::TestWithParam<GridCase> {};

TEST_P(GemmLayoutGrid, EveryPlanComputesTheRowMajorProduct) {
  const GridCase g = GetParam();
  uint32_t seed = 1;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [m, n, k] :
           {std::tuple<int64_t, int64_t, int64_t>{16, 32, 48}, {5, 7, 3}, {32, 24, 100}, {17, 16, 32}, {1, 8, 16}}) {
        for (int64_t extra_ld : {0, 16}) {
          GemmRequest r;
          r.m = m;
          r.n = n;
          r.k = k;
          r.trans_a = ta;
          r.trans_b = tb;
          r.a_dtype = g.a;
          r.b_dtype = g.b;
          r.d_dtype = g.d;
          r.cc = g.cc;
          if (extra_ld) {
            r.lda = (ta ? m : k) + extra_ld;
            r.ldb = (tb ? k : n) + extra_ld;
          }
          r.a_has_transpose = r.b_has_transpose = IsFp8(g.a);
          SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                                            << " extra_ld=" << extra_ld);
          CheckPlanComputesProduct(r, seed++);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndGpus, GemmLayoutGrid,
                         ::testing::Values(GridCase{kF32, kF32, kF32, kHopper}, GridCase{kBF16, kBF16, kBF16, kHopper},
                                           GridCase{kBF16, kBF16, kF32, kAmpere},
                                           GridCase{kE4M3, kE4M3, kBF16, kHopper},
                                           GridCase{kE5M2, kE4M3, kF32, kHopper}, GridCase{kE4M3, kE5M2, kE4M3, kAda},
                                           GridCase{kE4M3, kE4M3, kBF16, kBlackwell},
                                           GridCase{kE4M3, kE4M3, kBF16, kGeForce50},
                                           GridCase{kE4M3, kE4M3, kBF16, kAmpere}));

TEST(GemmLayout, Fp8PlansOnTnGpusAreAlwaysTN) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int64_t k : {32, 40, 8}) {
        GemmRequest r;
        r.m = 32;
        r.n = 32;
        r.k = k;
        r.trans_a = ta;
        r.trans_b = tb;
        r.a_dtype = r.b_dtype = kE4M3;
        r.d_dtype = kBF16;
        r.cc = kHopper;
        const GemmPlan p = PlanGemm(r);
        if (p.path == GemmPath::kBf16Fallback) continue;
        EXPECT_TRUE(p.transa && !p.transb) << p.ToString();
        EXPECT_EQ(p.a.ld % 16, 0);
        EXPECT_EQ(p.b.ld % 16, 0);
      }
    }
  }
}

// ---- cache key, counters ----
TEST(GemmDescKey, EqualKeysHashEqualAndEveryFieldMatters) {
  GemmDescKey base;
  base.m = 48;
  base.n = 64;
  base.k = 32;
  base.lda = base.ldb = 32;
  base.ldc = base.ldd = 48;
  base.transa = true;
  base.a_dtype = base.b_dtype = kE4M3;
  base.c_dtype = base.d_dtype = kBF16;
  base.a_scale_mode = base.b_scale_mode = GemmScaleMode::kScalar32F;
  GemmDescKey same = base;
  EXPECT_EQ(base, same);
  EXPECT_EQ(HashOf(base), HashOf(same));

  std::vector<GemmDescKey> variants;
  auto vary = [&](auto mutate) {
    GemmDescKey k = base;
    mutate(k);
    EXPECT_NE(k, base);
    variants.push_back(k);
  };
  vary([](GemmDescKey& k) { k.device = 1; });
  vary([](GemmDescKey& k) { k.cc = 100; });
  vary([](GemmDescKey& k) { k.m = 49; });
  vary([](GemmDescKey& k) { k.n = 65; });
  vary([](GemmDescKey& k) { k.k = 33; });
  vary([](GemmDescKey& k) { k.lda = 48; });
  vary([](GemmDescKey& k) { k.ldb = 48; });
  vary([](GemmDescKey& k) { k.ldc = 64; });
  vary([](GemmDescKey& k) { k.ldd = 64; });
  vary([](GemmDescKey& k) { k.transa = false; });
  vary([](GemmDescKey& k) { k.transb = true; });
  vary([](GemmDescKey& k) { k.a_dtype = kE5M2; });
  vary([](GemmDescKey& k) { k.b_dtype = kE5M2; });
  vary([](GemmDescKey& k) { k.c_dtype = kF32; });
  vary([](GemmDescKey& k) { k.d_dtype = kE4M3; });
  vary([](GemmDescKey& k) { k.bias_dtype = kBF16; });
  vary([](GemmDescKey& k) { k.epilogue = GemmEpilogue::kBias; });
  vary([](GemmDescKey& k) { k.a_scale_mode = GemmScaleMode::kVec128_32F; });
  vary([](GemmDescKey& k) { k.b_scale_mode = GemmScaleMode::kBlk128x128_32F; });
  vary([](GemmDescKey& k) { k.fast_accum = true; });
  vary([](GemmDescKey& k) { k.d_scale = true; });
  vary([](GemmDescKey& k) { k.amax_d = true; });
  vary([](GemmDescKey& k) { k.alpha_device = true; });
  vary([](GemmDescKey& k) { k.aux_ld = 48; });
  vary([](GemmDescKey& k) { k.batch = 4; });
  vary([](GemmDescKey& k) { k.stride_a = 1536; });
  vary([](GemmDescKey& k) { k.stride_b = 2048; });
  vary([](GemmDescKey& k) { k.stride_d = 3072; });
  vary([](GemmDescKey& k) { k.align_aux = 16; });
  vary([](GemmDescKey& k) { k.align_bias = 16; });
  vary([](GemmDescKey& k) { k.align_a = 16; });
  vary([](GemmDescKey& k) { k.align_b = 16; });
  vary([](GemmDescKey& k) { k.align_c = 16; });
  vary([](GemmDescKey& k) { k.align_d = 16; });
  vary([](GemmDescKey& k) { k.workspace_bytes = 1 << 20; });
  vary([](GemmDescKey& k) { k.sm_count_target = 100; });
  absl::flat_hash_set<GemmDescKey> set(variants.begin(), variants.end());
  set.insert(base);
  EXPECT_EQ(set.size(), variants.size() + 1);
  EXPECT_NE(base.ToString().find("m=48 n=64 k=32 trans=TN"), std::string::npos) << base.ToString();
}

TEST(GemmLayout, PointerAlignment) {
  EXPECT_EQ(PointerAlignment(0), 256u);
  EXPECT_EQ(PointerAlignment(0x1000), 256u);
  EXPECT_EQ(PointerAlignment(0x1010), 16u);
  EXPECT_EQ(PointerAlignment(0x1001), 1u);
  EXPECT_EQ(PointerAlignment(0x1080), 128u);
}

TEST(GemmLayout, CountersCountEveryRecord) {
  ResetGemmCountersForTesting();
  RecordGemmFallback("test reason");
  RecordGemmFallback("test reason");
  RecordGemmPadded("test");
  RecordGemmTransposeCopy("test");
  EXPECT_EQ(GemmFallbackCount(), 2);
  EXPECT_EQ(GemmPaddedCount(), 1);
  EXPECT_EQ(GemmTransposeCopyCount(), 1);
  ResetGemmCountersForTesting();
  EXPECT_EQ(GemmFallbackCount(), 0);
}

}  // namespace
}  // namespace octet
