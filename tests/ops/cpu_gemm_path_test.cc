// The two CPU GEMM paths for BF16 and FP8 operands (NOTE [CPU GEMM path] in
// ops/cpu_gemm_path.h): each against a float64 reference, the
// OCTET_CPU_GEMM override, its error, and the GEMM timing counters.
//
// Tolerance per output element, with S = sum_k |a_mk| |b_kn| over the values
// the GEMM sees (bf16 inputs, dequantized FP8): products are exact in f32 on
// both paths, so only the f32 accumulation counts, (K + 2) * 2^-24 * S, plus
// 2^-8 |ref| for one rounding to a bf16 output and 2^-24 |bias| for the bias
// added in f32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include <octet/core/convert_testing.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>
#include <octet/ops/matmul.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/reduce.h>
#include "tests/gemm_path_fixture.h"
#include "tests/scoped_env.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

// Sets OCTET_CPU_GEMM (unset for nullptr) and forgets the cached decision;
// restores both on destruction.
class ScopedGemmEnv {
 public:
  explicit ScopedGemmEnv(const char* value) : env_(std::in_place, "OCTET_CPU_GEMM", value) {
    internal::SetCpuGemmPathForTesting(std::nullopt);
  }
  ~ScopedGemmEnv() {
    env_.reset();  // the old value first, then forget the decision made under ours
    internal::SetCpuGemmPathForTesting(std::nullopt);
  }

 private:
  std::optional<::octet::testing::ScopedEnv> env_;
};

// Forces one path for the test's lifetime.
class GemmPathTest : public ::octet::testing::ForcedGemmPathTest {};

// |got - a·b (+ bias)| within the tolerance above, elementwise; a (Ba, M, K)
// or (M, K), b (K, N) (shared) or (Ba, K, N); any layouts (read through
// ToDoubles of contiguous copies).
::testing::AssertionResult MatchesReference(const Tensor& got, const Tensor& a, const Tensor& b, const Tensor& bias,
                                            bool bf16_out) {
  const Tensor ac = a.dim() == 2 ? a.Unsqueeze(0).Contiguous() : a.Contiguous();
  const Tensor bc = b.Contiguous();
  const std::vector<double> av = ac.ToDoubles(), bv = bc.ToDoubles(), g = got.ToDoubles();
  const std::vector<double> biasv = bias.defined() ? bias.ToDoubles() : std::vector<double>();
  const int64_t batch = ac.size(0), M = ac.size(1), K = ac.size(2), N = bc.size(-1);
  const bool b_batched = bc.dim() == 3;
  if (static_cast<int64_t>(g.size()) != batch * M * N)
    return ::testing::AssertionFailure() << "output has " << g.size() << " elements";
  const double acc = (K + 2) * std::ldexp(1.0, -24);
  int bad = 0;
  std::string msg;
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, bound = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = av[(bi * M + m) * K + k] * bv[(b_batched ? bi * K * N : 0) + k * N + n];
          s += p;
          bound += std::abs(p);
        }
        double tol = acc * bound;
        if (!biasv.empty()) {
          s += biasv[n];
          tol += std::ldexp(std::abs(biasv[n]), -24);
        }
        if (bf16_out) tol += std::ldexp(std::abs(s), -8);
        const double got_v = g[(bi * M + m) * N + n];
        if (!(std::abs(got_v - s) <= tol + 1e-300) && bad++ < 5)
          msg += "\n  (" + std::to_string(bi) + "," + std::to_string(m) + "," + std::to_string(n) + ") got " +
                 std::to_string(got_v) + " want " + std::to_string(s) + " tol " + std::to_string(tol);
      }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " elements off:" << msg;
}

// The real values of t (FP8: times scale_inv, in f64) as a contiguous f64 tensor.
Tensor AsF64(const Tensor& t) { return FromVector(t.ToDoubles(), t.shape(), {.dtype = DType::kFloat64}); }

Tensor QuantizeCurrent(const Tensor& x, DType fp8) {
  const float amax = static_cast<float>(Amax(x).Item());
  return Quantize(x, fp8, ComputeScale(amax, static_cast<float>(Info(fp8).max_finite), 0, 1.0f, false));
}

struct GemmCase {
  Shape a, b;
  bool b_transposed;  // b given as a (N, K) tensor's transpose (a Linear weight)
};

// Small, odd, batched, and >= 256 rows (B packed into oneDNN's layout).
const std::vector<GemmCase>& Cases() {
  static const std::vector<GemmCase> kCases = {
      {{1, 1}, {1, 1}, false},      {{7, 33}, {33, 5}, false},    {{33, 129}, {129, 7}, true},
      {{3, 7, 33}, {33, 17}, true}, {{2, 5, 16}, {2, 16, 9}, false}, {{300, 70}, {70, 90}, false},
      {{300, 70}, {70, 90}, true},  {{2, 150, 40}, {40, 48}, true},
  };
  return kCases;
}

Tensor MakeB(const GemmCase& c, uint64_t seed, DType dtype, double lo, double hi) {
  if (!c.b_transposed) return RandomTensor(c.b, seed, dtype, lo, hi);
  return RandomTensor({c.b[1], c.b[0]}, seed, dtype, lo, hi).T();
}

TEST_P(GemmPathTest, Bf16MatmulAndLinearMatchFloat64) {
  uint64_t seed = 10;
  for (const GemmCase& c : Cases()) {
    const Tensor a = RandomTensor(c.a, seed++, DType::kBFloat16);
    const Tensor b = MakeB(c, seed++, DType::kBFloat16, -1, 1);
    const Tensor bias = RandomTensor({c.b.back()}, seed++, DType::kBFloat16);
    const Tensor y = Matmul(a, b);
    EXPECT_EQ(y.dtype(), DType::kBFloat16);
    EXPECT_TRUE(MatchesReference(y, a, b, Tensor(), true)) << ShapeStr(c.a) << " x " << ShapeStr(c.b);
    if (c.b.size() == 2) {
      const Tensor yl = Linear(a, b.T(), bias);
      EXPECT_TRUE(MatchesReference(yl, a, b, bias, true)) << "Linear " << ShapeStr(c.a) << " x " << ShapeStr(c.b);
    }
  }
}

TEST_P(GemmPathTest, Fp8ScaledMatmulMatchesFloat64) {
  const std::vector<std::pair<DType, DType>> pairs = {{DType::kFloat8E4M3, DType::kFloat8E4M3},
                                                      {DType::kFloat8E5M2, DType::kFloat8E4M3},
                                                      {DType::kFloat8E4M3, DType::kFloat8E5M2}};
  uint64_t seed = 100;
  for (const auto& [fa, fb] : pairs) {
    for (const GemmCase& c : Cases()) {
      const Tensor a = QuantizeCurrent(RandomTensor(c.a, seed++, DType::kFloat32, -3, 3), fa);
      // Quantize a contiguous (N, K) weight and take its transpose for b_transposed.
      const Tensor b32 = MakeB(c, seed++, DType::kFloat32, -0.5, 0.5);
      const Tensor b = c.b_transposed ? QuantizeCurrent(b32.T().Contiguous(), fb).T() : QuantizeCurrent(b32, fb);
      const Tensor bias = RandomTensor({c.b.back()}, seed++, DType::kFloat32);
      const Tensor ad = AsF64(a), bd = AsF64(b);
      for (DType out : {DType::kFloat32, DType::kBFloat16}) {
        const Tensor y = ScaledMatmul(a, b, out, bias);
        EXPECT_EQ(y.dtype(), out);
        EXPECT_TRUE(MatchesReference(y, ad, bd, bias, out == DType::kBFloat16))
            << Name(fa) << " x " << Name(fb) << " " << ShapeStr(c.a) << " x " << ShapeStr(c.b) << " -> "
            << Name(out);
      }
    }
  }
}

// A given transposed (a weight gradient's dYᵀ): where oneDNN's BF16 matmul
// runs on AMX, large ones are copied row-major first (NOTE [row-major A for
// AMX] in ops/cpu/gemm_transpose_a.h, for N >= 512; 16 x 32 blocks with
// partial blocks in both dims, and K past several panels); elsewhere read in
// place. Same
// results either way, bf16 and FP8, f32 and bf16 outputs.
TEST_P(GemmPathTest, TransposedAMatchesFloat64) {
  struct Case {
    int64_t M, K, N;
  };
  uint64_t seed = 300;
  // N >= 512: the copy's threshold (kRowMajorAMinN); N = 90 stays in place.
  for (const Case& c :
       {Case{300, 70, 520}, Case{256, 32, 512}, Case{262, 1030, 530}, Case{300, 70, 90}, Case{17, 40, 8}}) {
    const Tensor a16 = RandomTensor({c.K, c.M}, seed++, DType::kBFloat16).T();
    const Tensor b16 = RandomTensor({c.K, c.N}, seed++, DType::kBFloat16, -1, 1);
    EXPECT_TRUE(MatchesReference(Matmul(a16, b16), a16, b16, Tensor(), true)) << c.M << "x" << c.K << "x" << c.N;
    const Tensor b32 = RandomTensor({c.K, c.N}, seed++, DType::kFloat32, -1, 1);
    // The mixed form (f32 B and out) of an O2 weight gradient.
    const Tensor out32 = Empty({c.M, c.N}, {.dtype = DType::kFloat32});
    matmul_kernel(DeviceType::kCPU)(a16, b32, Tensor(), out32, Tensor());
    EXPECT_TRUE(MatchesReference(out32, a16, b32.To(DType::kBFloat16), Tensor(), false))
        << "mixed " << c.M << "x" << c.K << "x" << c.N;
    const Tensor a8 = QuantizeCurrent(RandomTensor({c.K, c.M}, seed++, DType::kFloat32, -3, 3), DType::kFloat8E5M2).T();
    const Tensor b8 = QuantizeCurrent(RandomTensor({c.K, c.N}, seed++, DType::kFloat32), DType::kFloat8E4M3);
    for (DType out : {DType::kFloat32, DType::kBFloat16}) {
      EXPECT_TRUE(MatchesReference(ScaledMatmul(a8, b8, out), AsF64(a8), AsF64(b8), Tensor(),
                                   out == DType::kBFloat16))
          << "fp8 " << c.M << "x" << c.K << "x" << c.N << " -> " << Name(out);
    }
  }
}

// NOTE [converted A reuse] (ops/cpu/matmul_operands.h): a converted A operand is
// reused only for the same bytes of the same live storage at the same
// version. Each step below would read stale values if one of the three
// checks were missing: a new storage over the same memory after the first one
// died (identity; same address, same version 0), the same tensor read
// transposed (reused), the other half of the same storage (first element),
// and bytes rewritten in place (version).
TEST_P(GemmPathTest, ConvertedOperandIsReusedOnlyForTheSameBytes) {
  const int64_t M = 300, K = 70, N = 90;
  std::vector<uint8_t> blob(M * K);
  auto fill = [&](uint64_t seed) {
    const Tensor q = QuantizeCurrent(RandomTensor({M, K}, seed, DType::kFloat32, -3, 3), DType::kFloat8E5M2);
    const Tensor bytes = q.Contiguous();
    std::memcpy(blob.data(), bytes.raw_data(), blob.size());
  };
  const Tensor b = QuantizeCurrent(RandomTensor({K, N}, 7, DType::kFloat32, -0.5, 0.5), DType::kFloat8E4M3);
  const Tensor c = QuantizeCurrent(RandomTensor({M, 40}, 8, DType::kFloat32, -0.5, 0.5), DType::kFloat8E4M3);
  fill(1);
  {
    const Tensor a1 = FromBlob(blob.data(), {M, K}, DType::kFloat8E5M2);
    EXPECT_TRUE(MatchesReference(ScaledMatmul(a1, b, DType::kFloat32), AsF64(a1), AsF64(b), Tensor(), false));
  }
  // The first storage is gone; a new one wraps the same memory, version 0.
  fill(3);
  const Tensor a = FromBlob(blob.data(), {M, K}, DType::kFloat8E5M2);
  EXPECT_TRUE(MatchesReference(ScaledMatmul(a, b, DType::kFloat32), AsF64(a), AsF64(b), Tensor(), false))
      << "a new storage over the same memory";
  // Reused: the same bytes, read transposed (a Linear's dW after its dX).
  EXPECT_TRUE(MatchesReference(ScaledMatmul(a.T(), c, DType::kFloat32), AsF64(a).T(), AsF64(c), Tensor(), false));
  // Two halves of one storage: same storage, version and span, other bytes.
  const Tensor top = a.Slice(0, 0, M / 2), bottom = a.Slice(0, M / 2, M);
  EXPECT_TRUE(MatchesReference(ScaledMatmul(top, b, DType::kFloat32), AsF64(top), AsF64(b), Tensor(), false));
  EXPECT_TRUE(MatchesReference(ScaledMatmul(bottom, b, DType::kFloat32), AsF64(bottom), AsF64(b), Tensor(), false))
      << "the other half of the storage";
  // Rewritten in place: the copy bumps the version. New codes under a's own
  // scale (a copy of codes between FP8 tensors of different scales throws:
  // NOTE [fp8 copies] in ops/shape.cc).
  const std::vector<double> before = a.ToDoubles();
  Tensor target = a;
  const Tensor next = QuantizeCurrent(RandomTensor({M, K}, 2, DType::kFloat32, -3, 3), DType::kFloat8E5M2);
  target.WithScaleMeta(nullptr).CopyFrom_(next.WithScaleMeta(nullptr));
  ASSERT_NE(a.ToDoubles(), before);
  EXPECT_TRUE(MatchesReference(ScaledMatmul(a, b, DType::kFloat32), AsF64(a), AsF64(b), Tensor(), false))
      << "after an in-place write";
}

TEST_P(GemmPathTest, PathDecidesWhichPrimitiveRuns) {
  // On the f32 path a bf16 GEMM runs oneDNN's f32 primitive: an f32 GEMM of the
  // same geometry afterwards finds it in the cache. On the bf16 path it does not.
  cpu::ClearMatmulCacheForTesting();
  const Tensor a = RandomTensor({20, 12}, 1, DType::kBFloat16), b = RandomTensor({12, 8}, 2, DType::kBFloat16);
  Matmul(a, b);
  const cpu::MatmulCacheStats after_bf16 = cpu::GetMatmulCacheStats();
  Matmul(a.To(DType::kFloat32), b.To(DType::kFloat32));
  const cpu::MatmulCacheStats after_f32 = cpu::GetMatmulCacheStats();
  const bool widened = GetParam() == CpuGemmPath::kFp32Fma;
  EXPECT_EQ(after_f32.hits - after_bf16.hits, widened ? 1 : 0);
  EXPECT_EQ(after_f32.misses - after_bf16.misses, widened ? 0 : 1);
}

// NOTE [cpu gemm timing] (ops/cpu_gemm_path.h): off, a GEMM adds nothing; on,
// each GEMM kernel call adds one call, exactly its 2·M·N·K flops (times the
// batch), and times that nest (B packing + primitive within the call, the
// primitive's time positive); a matmul's backward adds its two GEMMs; a reset
// zeroes everything.
TEST_P(GemmPathTest, TimingCountsEveryGemmWithItsFlops) {
  const Tensor a = RandomTensor({3, 40, 24}, 1, DType::kBFloat16), b = RandomTensor({24, 36}, 2, DType::kBFloat16);
  const Tensor a8 = QuantizeCurrent(RandomTensor({300, 24}, 3, DType::kFloat32, -3, 3), DType::kFloat8E4M3);
  const Tensor b8 = QuantizeCurrent(RandomTensor({24, 36}, 4, DType::kFloat32, -3, 3), DType::kFloat8E4M3);
  SetCpuGemmTiming(false);
  ResetCpuGemmTimes();
  Matmul(a, b);
  CpuGemmTimes t = GetCpuGemmTimes();
  EXPECT_EQ(t.calls, 0);
  EXPECT_EQ(t.flops, 0.0);
  EXPECT_EQ(t.seconds, 0.0);

  SetCpuGemmTiming(true);
  Matmul(a, b);
  ScaledMatmul(a8, b8, DType::kFloat32);
  t = GetCpuGemmTimes();
  EXPECT_EQ(t.calls, 2);
  EXPECT_EQ(t.flops, 2.0 * 3 * 40 * 36 * 24 + 2.0 * 300 * 36 * 24);
  EXPECT_GT(t.execute_seconds, 0.0);
  EXPECT_GE(t.pack_seconds, 0.0);
  EXPECT_LE(t.pack_seconds + t.execute_seconds, t.seconds);

  ResetCpuGemmTimes();
  Tensor x = RandomTensor({40, 24}, 5).requires_grad_();
  Tensor w = RandomTensor({24, 36}, 6).requires_grad_();
  Sum(Matmul(x, w)).Backward();  // forward, dX = dY·Wᵀ, dW = Xᵀ·dY
  t = GetCpuGemmTimes();
  SetCpuGemmTiming(false);
  EXPECT_EQ(t.calls, 3);
  EXPECT_EQ(t.flops, 3 * 2.0 * 40 * 36 * 24);

  ResetCpuGemmTimes();
  t = GetCpuGemmTimes();
  EXPECT_EQ(t.calls, 0);
  EXPECT_EQ(t.flops, 0.0);
  EXPECT_EQ(t.seconds + t.pack_seconds + t.execute_seconds, 0.0);
}
INSTANTIATE_TEST_SUITE_P(Paths, GemmPathTest, ::octet::testing::AllGemmPaths(), ::octet::testing::GemmPathName);

// NOTE [plain weights] (ops/cpu/dnnl_primitive.cc): with oneDNN limited to AVX2
// (what an AVX2-only CPU runs: gemm:jit, no blocked weights layout), packed B
// operands become plain ones converted by octet, never a oneDNN reorder (its
// bf16 -> f32 reorder has no JIT kernel there), and the results still match
// float64 for the packed-size cases, bf16 and FP8, with the converters on
// their non-AVX-512 loops too. oneDNN's ISA limit can only be set before its
// first primitive: ctest runs each test in a process of its own; a run of the
// whole program skips this one.
TEST(CpuGemmPath, Avx2OneDnnTakesPlainBWithoutReorders) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success)
    GTEST_SKIP() << "oneDNN already made a primitive in this process (run it alone, as ctest does)";
  internal::SetConverterIsaForTesting({.avx2 = true});
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kFp32Fma);
  const cpu::MatmulCacheStats before = cpu::GetMatmulCacheStats();
  uint64_t seed = 500;
  for (const GemmCase& c : {GemmCase{{300, 70}, {70, 90}, false}, GemmCase{{300, 70}, {70, 90}, true}}) {
    const Tensor a = RandomTensor(c.a, seed++, DType::kBFloat16);
    const Tensor b = MakeB(c, seed++, DType::kBFloat16, -1, 1);
    EXPECT_TRUE(MatchesReference(Matmul(a, b), a, b, Tensor(), true)) << "bf16, b transposed " << c.b_transposed;
    const Tensor a8 = QuantizeCurrent(RandomTensor(c.a, seed++, DType::kFloat32, -3, 3), DType::kFloat8E5M2);
    const Tensor b32 = MakeB(c, seed++, DType::kFloat32, -0.5, 0.5);
    const Tensor b8 = c.b_transposed ? QuantizeCurrent(b32.T().Contiguous(), DType::kFloat8E4M3).T()
                                     : QuantizeCurrent(b32, DType::kFloat8E4M3);
    EXPECT_TRUE(MatchesReference(ScaledMatmul(a8, b8, DType::kFloat32), AsF64(a8), AsF64(b8), Tensor(), false))
        << "fp8, b transposed " << c.b_transposed;
  }
  const cpu::MatmulCacheStats after = cpu::GetMatmulCacheStats();
  internal::SetCpuGemmPathForTesting(std::nullopt);
  internal::ForceScalarConvertersForTesting(false);
  EXPECT_GE(after.plain_b - before.plain_b, 2);  // both orientations asked for packing and got plain
  EXPECT_EQ(after.b_reorders, before.b_reorders);
}

// NOTE [column-major A] (ops/cpu/dnnl_primitive.cc): under oneDNN's gemm:jit (set
// here with its ISA limited to AVX2, as an AVX2-only CPU runs it), a
// column-major A whose leading dimension is a multiple of 2 KiB — a weight
// gradient's dYᵀ — is copied to a padded one first: f32 (O0), bf16 widened
// (the FP32-FMA path) and FP8 codes, each still matching float64, the copy
// counted; a leading dimension off that multiple, or a row-major A, is not
// copied. Own process, as above.
TEST(CpuGemmPath, Avx2OneDnnPadsAColumnMajorAOnAliasingStrides) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success)
    GTEST_SKIP() << "oneDNN already made a primitive in this process (run it alone, as ctest does)";
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kFp32Fma);
  auto padded = [] { return cpu::GetMatmulCacheStats().padded_a; };
  uint64_t seed = 700;
  // dY (K = 24 tokens, M = 512 features: 2 KiB rows in f32); dW = dYᵀ·X.
  const Tensor dy = RandomTensor({24, 512}, seed++, DType::kFloat32);
  const Tensor x = RandomTensor({24, 40}, seed++, DType::kFloat32);
  int64_t before = padded();
  EXPECT_TRUE(MatchesReference(Matmul(dy.T(), x), dy.T(), x, Tensor(), false)) << "f32";
  EXPECT_EQ(padded() - before, 1) << "f32, leading dimension 512";
  const Tensor dy16 = dy.To(DType::kBFloat16), x16 = x.To(DType::kBFloat16);
  before = padded();
  EXPECT_TRUE(MatchesReference(Matmul(dy16.T(), x16), dy16.T(), x16, Tensor(), true)) << "bf16 widened";
  EXPECT_EQ(padded() - before, 1) << "bf16 widened, leading dimension 512";
  const Tensor dy8 = QuantizeCurrent(dy, DType::kFloat8E5M2), x8 = QuantizeCurrent(x, DType::kFloat8E4M3);
  before = padded();
  EXPECT_TRUE(MatchesReference(ScaledMatmul(dy8.T(), x8, DType::kFloat32), AsF64(dy8).T(), AsF64(x8), Tensor(),
                               false))
      << "fp8";
  EXPECT_EQ(padded() - before, 1) << "fp8 widened, leading dimension 512";
  // A leading dimension of 500 (2000 bytes), and a row-major A: as they are.
  const Tensor dz = RandomTensor({24, 500}, seed++, DType::kFloat32);
  before = padded();
  EXPECT_TRUE(MatchesReference(Matmul(dz.T(), x), dz.T(), x, Tensor(), false)) << "leading dimension 500";
  EXPECT_TRUE(MatchesReference(Matmul(dy.T().Contiguous(), x), dy.T(), x, Tensor(), false)) << "row-major";
  EXPECT_EQ(padded(), before);
  internal::SetCpuGemmPathForTesting(std::nullopt);
}

// NOTE [row-major B beside a column-major A] (ops/cpu/dnnl_primitive.cc):
// under gemm:jit (oneDNN's ISA capped at AVX2, as above), a weight
// gradient's row-major B whose rows are a multiple of 512 bytes apart, next
// to a column-major A, is copied with padded rows first: f32 (O0), bf16
// widened while it is copied (the FP32-FMA path), an f32 B rounded to bf16
// (the mixed O2 weight gradient) and FP8 codes likewise,
// each matching float64 and giving the bits of the same GEMM on an unpadded
// B of another width's view, the copy counted; rows 2000 bytes apart, a
// row-major A, or fewer than 128 columns: not copied. Own process, as above.
TEST(CpuGemmPath, Avx2OneDnnPadsARowMajorBBesideAColumnMajorA) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success)
    GTEST_SKIP() << "oneDNN already made a primitive in this process (run it alone, as ctest does)";
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kFp32Fma);
  auto padded = [] { return cpu::GetMatmulCacheStats().padded_b; };
  uint64_t seed = 800;
  // dY (K = 40 tokens, M = 24 features), X (40 tokens, N = 256: 1 KiB rows in f32); dW = dYᵀ·X.
  const Tensor dy = RandomTensor({40, 24}, seed++, DType::kFloat32);
  const Tensor x = RandomTensor({40, 256}, seed++, DType::kFloat32);
  // The same X as the first 256 columns of a 40 x 260 tensor: 1040-byte rows, not copied.
  Tensor wide = RandomTensor({40, 260}, seed++, DType::kFloat32);
  wide.Slice(1, 0, 256).CopyFrom_(x);
  const Tensor x_view = wide.Slice(1, 0, 256);
  int64_t before = padded();
  const Tensor dw = Matmul(dy.T(), x);
  EXPECT_TRUE(MatchesReference(dw, dy.T(), x, Tensor(), false)) << "f32";
  EXPECT_EQ(padded() - before, 1) << "f32, rows 1 KiB apart";
  before = padded();
  EXPECT_TRUE(testing::AllClose(Matmul(dy.T(), x_view), dw, 0, 0)) << "f32, unpadded view";
  EXPECT_EQ(padded(), before) << "f32, rows 1040 bytes apart";
  const Tensor dy16 = dy.To(DType::kBFloat16), x16 = x.To(DType::kBFloat16);
  before = padded();
  const Tensor dw16 = Matmul(dy16.T(), x16);
  EXPECT_TRUE(MatchesReference(dw16, dy16.T(), x16, Tensor(), true)) << "bf16 widened";
  EXPECT_EQ(padded() - before, 1) << "bf16 widened, rows 512 bytes apart";
  EXPECT_TRUE(testing::AllClose(Matmul(dy16.T(), wide.To(DType::kBFloat16).Slice(1, 0, 256)), dw16, 0, 0))
      << "bf16, unpadded view";
  // The mixed form of an O2 weight gradient: an f32 B, rounded to bf16 as it is copied.
  const Tensor out_mixed = Empty({24, 256}, {.dtype = DType::kFloat32});
  before = padded();
  matmul_kernel(DeviceType::kCPU)(dy16.T(), x, Tensor(), out_mixed, Tensor());
  EXPECT_TRUE(MatchesReference(out_mixed, dy16.T(), x.To(DType::kBFloat16), Tensor(), false)) << "mixed";
  EXPECT_EQ(padded() - before, 1) << "mixed, an f32 B rounded";
  const Tensor dy8 = QuantizeCurrent(dy, DType::kFloat8E5M2), x8 = QuantizeCurrent(x, DType::kFloat8E4M3);
  before = padded();
  EXPECT_TRUE(MatchesReference(ScaledMatmul(dy8.T(), x8, DType::kFloat32), AsF64(dy8).T(), AsF64(x8), Tensor(),
                               false))
      << "fp8";
  EXPECT_EQ(padded() - before, 1) << "fp8 widened, rows 256 bytes apart as codes, 1 KiB as f32";
  // Rows of 500 floats (2000 bytes), a row-major A, 64 columns: as they are.
  const Tensor x500 = RandomTensor({40, 500}, seed++, DType::kFloat32);
  const Tensor x64 = RandomTensor({40, 64}, seed++, DType::kFloat32);
  before = padded();
  EXPECT_TRUE(MatchesReference(Matmul(dy.T(), x500), dy.T(), x500, Tensor(), false)) << "500 columns";
  EXPECT_TRUE(MatchesReference(Matmul(dy.T().Contiguous(), x), dy.T(), x, Tensor(), false)) << "row-major A";
  EXPECT_TRUE(MatchesReference(Matmul(dy.T(), x64), dy.T(), x64, Tensor(), false)) << "64 columns";
  EXPECT_EQ(padded(), before);
  internal::SetCpuGemmPathForTesting(std::nullopt);
}

// CpuF32GemmPacksB, what octet-device-info prints: an f32 GEMM whose B is
// worth packing (256 output rows, a B of more than 2^18 elements: NOTE
// [small f32 B stays plain] in ops/cpu/matmul_operands.cc) has its B packed
// by octet where the library says so, and a primitive made for the plain B
// where it says not (oneDNN's gemm:jit on an AVX2-only CPU); the product
// matches float64 either way.
TEST(CpuGemmPath, F32BIsPackedWhereTheLibrarySaysSo) {
  const Tensor a = RandomTensor({256, 520}, 900, DType::kFloat32);
  const Tensor b = RandomTensor({520, 530}, 901, DType::kFloat32);
  const cpu::MatmulCacheStats before = cpu::GetMatmulCacheStats();
  EXPECT_TRUE(MatchesReference(Matmul(a, b), a, b, Tensor(), false));
  const cpu::MatmulCacheStats after = cpu::GetMatmulCacheStats();
  if (CpuF32GemmPacksB()) {
    EXPECT_EQ(after.packed_b - before.packed_b, 1);
    EXPECT_EQ(after.plain_b, before.plain_b);
  } else {
    EXPECT_EQ(after.packed_b, before.packed_b);
    EXPECT_EQ(after.plain_b - before.plain_b, 1);
  }
}

// The BF16 path forced where oneDNN has no bf16 matmul (AVX2 only): the
// error says why and what to do, and CpuRunsBf16Gemm (what the forced-path
// tests skip on) says no. Own process, as above.
TEST(CpuGemmPath, ForcedBf16PathWithoutAvx512SaysWhy) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success)
    GTEST_SKIP() << "oneDNN already made a primitive in this process (run it alone, as ctest does)";
  EXPECT_FALSE(internal::CpuRunsBf16Gemm());
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kBf16Dot);
  const Tensor a = RandomTensor({8, 16}, 1, DType::kBFloat16), b = RandomTensor({16, 4}, 2, DType::kBFloat16);
  const std::string error = ErrorOf([&] { Matmul(a, b); });
  internal::SetCpuGemmPathForTesting(std::nullopt);
  EXPECT_NE(error.find("this CPU's oneDNN has no bf16 matmul (it needs AVX-512): BF16 and FP8 GEMMs run on the "
                       "FP32-FMA path here, which OCTET_CPU_GEMM=bf16 overrides"),
            std::string::npos)
      << error;
}

TEST(CpuGemmPath, AmxProbeComputesTheClosedForm) {
  float sum = -1.0f;
  const int64_t iters = 1000;
  const double rate = internal::AmxBf16Rate(iters, &sum);
  __builtin_cpu_init();
  if (rate == 0.0) {
    EXPECT_EQ(sum, -1.0f);  // nothing ran
    if (__builtin_cpu_supports("amx-bf16") && CpuHasAvx512Bf16())
      GTEST_SKIP() << "the CPU has AMX but Linux or oneDNN's ISA cap keeps it from oneDNN";
    GTEST_SKIP() << "no AMX BF16 on this CPU";
  }
  // Every accumulator element gains 32 products of 1.0 x 2^-10 per instruction.
  EXPECT_EQ(sum, static_cast<float>(iters) * 32.0f / 1024.0f);
  // 16384 flop per instruction, at most one instruction per cycle on any
  // core clocked below 10 GHz: a rate above that means a broken timer or count.
  EXPECT_GT(rate, 0.0);
  EXPECT_LT(rate, 16384.0 * 10e9);
  EXPECT_GT(GetCpuGemmPath().amx_bf16_gflops, 0.0);
}

TEST(CpuGemmPath, AmxIsNotCountedWhereOneDnnIsCappedBelowIt) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_bf16) != dnnl::status::success)
    GTEST_SKIP() << "oneDNN already fixed its ISA in this process (run it alone, as ctest does)";
  EXPECT_EQ(internal::AmxBf16Rate(100), 0.0);
  EXPECT_EQ(GetCpuGemmPath().amx_bf16_gflops, 0.0);
}

// Measured rates (GFLOP/s) and the path decided from them.
CpuGemmPathInfo Rates(double fma, double dot, double amx, CpuGemmPath path = CpuGemmPath::kBf16Dot) {
  CpuGemmPathInfo info;
  info.path = path;
  info.fp32_fma_gflops = fma;
  info.bf16_dot_gflops = dot;
  info.amx_bf16_gflops = amx;
  return info;
}

TEST(CpuGemmPath, DecisionRuleWeighsAmxAtAQuarterOfItsRate) {
  EXPECT_TRUE(internal::PrefersBf16(Rates(228, 456, 0)));     // Zen 5: dot 2x FMA
  EXPECT_FALSE(internal::PrefersBf16(Rates(351, 171, 0)));    // Xeon without AMX
  EXPECT_TRUE(internal::PrefersBf16(Rates(242, 117, 2400)));  // Xeon with AMX
  EXPECT_FALSE(internal::PrefersBf16(Rates(242, 117, 1200)));  // 300 < 1.25 x 242
  EXPECT_TRUE(internal::PrefersBf16(Rates(242, 117, 1212)));   // 303 >= 302.5
  EXPECT_FALSE(internal::PrefersBf16(Rates(242, 0, 0)));      // no BF16 instruction at all
}

// Attention's BF16 tiles use VDPBF16PS only where it beats the FMA, or when
// the path is forced: AMX alone makes the GEMMs, not those tiles, BF16.
TEST(CpuGemmPath, Bf16DotKernelsOnlyWhereTheDotProductWins) {
  EXPECT_TRUE(internal::UsesBf16DotKernels(Rates(228, 456, 0), false));
  EXPECT_FALSE(internal::UsesBf16DotKernels(Rates(242, 117, 3400), false));
  EXPECT_TRUE(internal::UsesBf16DotKernels(Rates(242, 117, 3400), true));
  EXPECT_FALSE(internal::UsesBf16DotKernels(Rates(228, 456, 0, CpuGemmPath::kFp32Fma), true));
  // And what this process decided agrees with the rule.
  ScopedGemmEnv env("auto");
  const CpuGemmPathInfo info = GetCpuGemmPath();
  EXPECT_EQ(info.bf16_dot_kernels, internal::UsesBf16DotKernels(info, /*forced=*/false));
  EXPECT_EQ(ActiveBf16DotKernels(), info.bf16_dot_kernels);
}

TEST(CpuGemmPath, OverrideIsHonoured) {
  {
    ScopedGemmEnv env("fp32");
    const CpuGemmPathInfo info = GetCpuGemmPath();
    EXPECT_EQ(info.path, CpuGemmPath::kFp32Fma);
    EXPECT_EQ(info.reason, "OCTET_CPU_GEMM=fp32");
    EXPECT_EQ(ActiveCpuGemmPath(), CpuGemmPath::kFp32Fma);
    EXPECT_GT(info.fp32_fma_gflops, 0.0);  // still measured, for octet-device-info
  }
  {
    ScopedGemmEnv env("bf16");
    EXPECT_EQ(GetCpuGemmPath().path, CpuGemmPath::kBf16Dot);
    EXPECT_EQ(ActiveCpuGemmPath(), CpuGemmPath::kBf16Dot);
  }
  {
    ScopedGemmEnv env("auto");
    const CpuGemmPathInfo info = GetCpuGemmPath();
    EXPECT_NE(info.reason.find(info.bf16_dot_gflops > 0 ? "measured" : "no AVX-512 BF16"), std::string::npos)
        << info.reason;
    // The decision rule of NOTE [CPU GEMM path].
    const double bf16_rate = std::max(info.bf16_dot_gflops, 0.25 * info.amx_bf16_gflops);
    const bool bf16 = info.bf16_dot_gflops > 0 && bf16_rate >= 1.25 * info.fp32_fma_gflops;
    EXPECT_EQ(info.path, bf16 ? CpuGemmPath::kBf16Dot : CpuGemmPath::kFp32Fma);
  }
}

TEST(CpuGemmPath, BadOverrideIsAnErrorNamingTheVariable) {
  EXPECT_EQ(internal::ParseCpuGemmPath(""), std::nullopt);
  EXPECT_EQ(internal::ParseCpuGemmPath("auto"), std::nullopt);
  EXPECT_EQ(internal::ParseCpuGemmPath("fp32"), CpuGemmPath::kFp32Fma);
  // Made before the switch goes bad: the first allocation and the first f32
  // GEMM of a process read switches of their own, and a read of any switch
  // checks them all (NOTE [every switch checked at every read]).
  const Tensor a = RandomTensor({4, 4}, 1, DType::kBFloat16);
  const Tensor f = RandomTensor({4, 4}, 2, DType::kFloat32);
  EXPECT_EQ(Matmul(f, f).shape(), (Shape{4, 4}));
  for (const char* bad : {"FP32", "bf16 ", "fast", "1"}) {
    ScopedGemmEnv env(bad);
    const std::string err = ErrorOf([] { GetCpuGemmPath(); });
    EXPECT_NE(err.find("OCTET_CPU_GEMM='" + std::string(bad) + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("bf16"), std::string::npos) << err;
    EXPECT_NE(err.find("fp32"), std::string::npos) << err;
    // The GEMMs themselves report it too, and keep reporting it (nothing is cached).
    EXPECT_NE(ErrorOf([&] { Matmul(a, a); }).find("OCTET_CPU_GEMM"), std::string::npos);
    EXPECT_NE(ErrorOf([&] { Matmul(a, a); }).find("OCTET_CPU_GEMM"), std::string::npos);
  }
  // f32 GEMMs do not depend on the path and keep working.
  ScopedGemmEnv env("nonsense");
  EXPECT_EQ(Matmul(f, f).shape(), (Shape{4, 4}));
}

}  // namespace
}  // namespace octet
