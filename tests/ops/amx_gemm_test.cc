// octet's AMX GEMM (ops/cpu/amx_gemm.h, NOTE [amx gemm]) against a float64
// reference: every edge of its 32 x 32 blocks and 256-row chunks (partial
// rows, partial columns, B's column padding), each packed layout oneDNN may
// choose, f32 and bf16 outputs, both bias orders and the scale; and the
// dispatch from RunDnnlGemm. Skipped where the CPU has no AMX (the refusals
// run everywhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/error.h>
#include <octet/ops/cpu/amx_gemm.h>
#include <octet/ops/cpu/dnnl_gemm.h>
#include <octet/ops/cpu/gemm_pack.h>
#include <octet/ops/matmul_kernels.h>
#include "tests/test_util.h"

namespace octet::cpu {
namespace {

using ::octet::testing::MessageOf;

PackedBLayout LayoutFor(int64_t K, int64_t N, int64_t nb) {
  const int64_t kp = (K + 31) / 32 * 32, np = (N + nb - 1) / nb * nb;
  return {.k_padded = kp, .k_block = 32, .n_padded = np, .n_block = nb, .stride_kb = 32 * nb, .stride_nb = kp * nb};
}

// Random bf16 values in [-2, 2].
std::vector<uint16_t> RandomBf16(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = FloatToBf16Bits(dist(rng));
  return v;
}

struct Case {
  int64_t m, n, k, nb;
};

class AmxGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!AmxGemmEnabled()) GTEST_SKIP() << "no AMX GEMM on this CPU (or OCTET_CPU_AMX_GEMM=0)";
  }
};

TEST_F(AmxGemmTest, MatchesFloat64ReferenceOnEveryEdge) {
  std::mt19937 rng(7);
  const std::vector<Case> cases = {{1, 1, 32, 16},    {5, 17, 64, 64},   {16, 16, 32, 32},  {17, 33, 96, 48},
                                   {32, 32, 32, 64},  {45, 100, 64, 16}, {64, 64, 128, 64}, {300, 70, 160, 32},
                                   {513, 40, 32, 64}, {259, 129, 64, 64}};
  for (const Case& c : cases) {
    const int64_t lda = c.k + 32, ldc = c.n + 3;  // rows further apart than their length
    const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(c.m * lda), rng);
    const std::vector<uint16_t> b = RandomBf16(static_cast<size_t>(c.k * c.n), rng);
    const PackedBLayout layout = LayoutFor(c.k, c.n, c.nb);
    std::vector<uint16_t> packed(static_cast<size_t>(PackedElements(layout)));
    PackVnniB(b.data(), DType::kBFloat16, c.k, c.n, c.n, 1, layout, packed.data());
    std::vector<float> bias(static_cast<size_t>(c.n));
    for (int64_t j = 0; j < c.n; ++j) bias[j] = 0.25f * static_cast<float>(j % 7) - 0.5f;
    const float scale = 0.375f;
    // The products in float64, and the sums of their magnitudes (the f32
    // accumulation's error bound).
    std::vector<double> prod(static_cast<size_t>(c.m * c.n)), mag(prod.size());
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j)
        for (int64_t p = 0; p < c.k; ++p) {
          const double t = static_cast<double>(Bf16BitsToFloat(a[i * lda + p])) * Bf16BitsToFloat(b[p * c.n + j]);
          prod[i * c.n + j] += t;
          mag[i * c.n + j] += std::fabs(t);
        }
    for (DType out_dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (int variant = 0; variant < 3; ++variant) {  // plain; bias first then scale; scale then bias
        SCOPED_TRACE(::testing::Message() << "m " << c.m << " n " << c.n << " k " << c.k << " n_block " << c.nb
                                          << " out " << Name(out_dtype) << " variant " << variant);
        const bool bf16 = out_dtype == DType::kBFloat16;
        std::vector<float> out_f(static_cast<size_t>(c.m * ldc), -7.0f);
        std::vector<uint16_t> out_b(static_cast<size_t>(c.m * ldc), 0x7BCD);
        AmxGemmArgs g;
        g.a = a.data();
        g.lda = lda;
        g.b = packed.data();
        g.layout = layout;
        g.m = c.m;
        g.n = c.n;
        g.k = c.k;
        g.out = bf16 ? static_cast<void*>(out_b.data()) : static_cast<void*>(out_f.data());
        g.ldc = ldc;
        g.out_dtype = out_dtype;
        if (variant > 0) {
          g.bias = bias.data();
          g.bias_first = variant == 1;
          g.scale = &scale;
        }
        AmxGemm(g);
        int64_t bad = 0;
        for (int64_t i = 0; i < c.m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            const int64_t at = i * ldc + j;
            if (j >= c.n) {  // past n: untouched
              bad += bf16 ? out_b[at] != 0x7BCD : out_f[at] != -7.0f;
              continue;
            }
            const double p = prod[i * c.n + j];
            const double ref = variant == 0 ? p : variant == 1 ? (p + bias[j]) * scale : p * scale + bias[j];
            const double got = bf16 ? Bf16BitsToFloat(out_b[at]) : out_f[at];
            const double tol =
                4e-6 * mag[i * c.n + j] * (variant == 0 ? 1.0 : scale) + (bf16 ? std::fabs(ref) / 256 : 0) + 1e-6;
            if (std::fabs(got - ref) > tol && bad++ < 5)
              ADD_FAILURE() << "(" << i << ", " << j << "): " << got << " vs " << ref;
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

TEST_F(AmxGemmTest, RunDnnlGemmTakesItForPackedBf16GemmsOnly) {
  std::mt19937 rng(11);
  const int64_t M = 70, K = 64, N = 96, kWidest = 224;
  const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(M * K), rng);
  const std::vector<uint16_t> b = RandomBf16(static_cast<size_t>(K * kWidest), rng);
  std::vector<float> bias(static_cast<size_t>(kWidest), 0.5f);
  const float scale = 2.0f;
  auto run = [&](int amx, int64_t n) {
    SetAmxGemmForTesting(amx);
    DnnlGemmSpec spec;
    spec.a = {a.data(), {M, K}, {K, 1}, DType::kBFloat16};
    spec.b = {b.data(), {K, n}, {kWidest, 1}, DType::kBFloat16};
    std::vector<uint16_t> out(static_cast<size_t>(M * n));
    spec.out = {out.data(), {M, n}, {n, 1}, DType::kBFloat16};
    spec.pack_b = true;
    spec.scale = true;
    spec.bias_mode = BiasMode::kPostOp;
    const int64_t before = GetMatmulCacheStats().amx_gemms;
    RunDnnlGemm(spec, bias.data(), &scale);
    const int64_t ran = GetMatmulCacheStats().amx_gemms - before;
    SetAmxGemmForTesting(-1);
    return std::make_pair(ran, out);
  };
  const auto [amx_ran, amx_out] = run(1, N);
  const auto [dnnl_ran, dnnl_out] = run(0, N);
  EXPECT_EQ(amx_ran, 1);
  EXPECT_EQ(dnnl_ran, 0);
  // The same values up to the order of the f32 sums, then one bf16 rounding.
  for (int64_t i = 0; i < M * N; ++i) {
    const float x = Bf16BitsToFloat(amx_out[i]), y = Bf16BitsToFloat(dnnl_out[i]);
    ASSERT_LE(std::fabs(x - y), std::fabs(y) / 128 + 1e-3f) << i;
  }
  // N <= 3 K runs on it, N > 3 K on oneDNN's (NOTE [amx gemm]).
  EXPECT_EQ(run(1, 3 * K).first, 1);
  EXPECT_EQ(run(1, kWidest).first, 0);
}

TEST(AmxGemmRefusals, NamesWhatItDoesNotTake) {
  EXPECT_FALSE(AmxGemmTakes(LayoutFor(48, 64, 64), 48, DType::kBFloat16));  // k not a multiple of 32
  EXPECT_FALSE(AmxGemmTakes(LayoutFor(64, 64, 64), 64, DType::kFloat8E4M3));
  EXPECT_TRUE(AmxGemmTakes(LayoutFor(64, 64, 64), 64, DType::kFloat32));
  SetAmxGemmForTesting(0);
  AmxGemmArgs g;
  g.layout = LayoutFor(64, 64, 64);
  g.k = 64;
  EXPECT_NE(MessageOf<Error>([&] { AmxGemm(g); }).find("does not run the AMX GEMM"), std::string::npos);
  SetAmxGemmForTesting(-1);
  if (!AmxGemmEnabled()) return;
  g.k = 48;
  EXPECT_NE(MessageOf<Error>([&] { AmxGemm(g); }).find("unsupported geometry: k 48"), std::string::npos);
  g.k = 64;
  g.m = 4;
  g.n = 100;  // more columns than B's padding holds
  g.lda = 64;
  g.ldc = 100;
  EXPECT_NE(MessageOf<Error>([&] { AmxGemm(g); }).find("bad dims"), std::string::npos);
}

}  // namespace
}  // namespace octet::cpu
