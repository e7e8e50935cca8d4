// octet's blocked f32 GEMM (ops/cpu/blocked_gemm.h) against float64
// references: every operand dtype and layout, edge tiles in every dimension,
// several k blocks, the scale / bias epilogue and the bf16 output. It runs
// only with AVX-512; elsewhere these tests skip.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/core/float8.h>
#include <octet/ops/cpu/blocked_gemm.h>
#include "tests/test_util.h"

namespace octet::cpu {
namespace {

using ::octet::testing::MessageOf;

// Values exact in every operand dtype (FP8 E5M2 keeps 3 significant bits),
// with products and sums exact in f32 for the sizes below: the GEMM's f32
// result must then equal the float64 one exactly.
constexpr double kExact[] = {-7, -6, -5, -4, -3.5, -3, -2.5, -2, -1.75, -1.5, -1.25, -1, -0.75, -0.5, -0.25, 0,
                             0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7};
double ExactValue(int64_t i, int64_t j, int64_t salt) {
  const uint64_t h = static_cast<uint64_t>(i * 7919 + j * 104729 + salt * 15485863) * 2654435761u;
  return kExact[(h >> 7) % (sizeof(kExact) / sizeof(kExact[0]))];
}

// A matrix stored in `dtype`, row- or column-major, with a leading
// dimension `pad` elements longer than its extent (so strides are not tight).
struct Stored {
  std::vector<uint8_t> bytes;
  GemmOperand op;
};
Stored Store(const std::vector<double>& v, int64_t rows, int64_t cols, DType dtype, bool col_major, int64_t pad = 3) {
  Stored s;
  const int64_t ld = (col_major ? rows : cols) + pad;
  const int64_t span = (col_major ? cols : rows) * ld;
  const size_t esz = SizeOf(dtype);
  s.bytes.assign(static_cast<size_t>(span) * esz, 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t off = col_major ? j * ld + i : i * ld + j;
      const float x = static_cast<float>(v[static_cast<size_t>(i * cols + j)]);
      uint8_t* p = s.bytes.data() + off * esz;
      switch (dtype) {
        case DType::kFloat32: std::memcpy(p, &x, 4); break;
        case DType::kBFloat16: {
          const uint16_t b = FloatToBf16Bits(x);
          std::memcpy(p, &b, 2);
          break;
        }
        case DType::kFloat8E4M3: *p = float8_e4m3(x).bits; break;
        case DType::kFloat8E5M2: *p = float8_e5m2(x).bits; break;
        default: ADD_FAILURE() << "no such operand dtype";
      }
    }
  }
  s.op = {s.bytes.data(), dtype, col_major ? 1 : ld, col_major ? ld : 1};
  return s;
}

std::vector<double> Values(int64_t rows, int64_t cols, int64_t salt) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v[static_cast<size_t>(i * cols + j)] = ExactValue(i, j, salt);
  return v;
}

// out = scale * a·b + bias in float64.
std::vector<double> Reference(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& bias,
                              int64_t m, int64_t n, int64_t k, double scale) {
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double av = a[static_cast<size_t>(i * k + p)];
      for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(i * n + j)] += av * b[static_cast<size_t>(p * n + j)];
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double& o = out[static_cast<size_t>(i * n + j)];
      o = o * scale + (bias.empty() ? 0.0 : bias[static_cast<size_t>(j)]);
    }
  return out;
}

class BlockedGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BlockedGemmAvailable()) GTEST_SKIP() << "the blocked GEMM needs AVX-512 (absent or disabled here)";
  }
};

struct Case {
  int64_t m, n, k;
};

TEST_F(BlockedGemmTest, ExactOnEveryDtypeLayoutAndEdge) {
  // Edges: m and n off every tile size (1, odd, past one task), k past one
  // and two 256-deep blocks.
  const Case cases[] = {{1, 1, 1}, {13, 33, 7}, {7, 17, 300}, {100, 65, 257}, {197, 800, 513}};
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2};
  for (const Case& c : cases) {
    const std::vector<double> av = Values(c.m, c.k, 1), bv = Values(c.k, c.n, 2), biasv = Values(1, c.n, 3);
    const std::vector<double> plain = Reference(av, bv, {}, c.m, c.n, c.k, 1.0);
    for (DType da : dtypes) {
      for (DType db : dtypes) {
        if (IsFp8(da) != IsFp8(db) && (c.m * c.n * c.k > 100000)) continue;  // keep the grid small
        for (int layout = 0; layout < 4; ++layout) {
          const bool a_col = (layout & 1) != 0, b_col = (layout & 2) != 0;
          const Stored a = Store(av, c.m, c.k, da, a_col), b = Store(bv, c.k, c.n, db, b_col);
          for (int epi = 0; epi < 2; ++epi) {
            const bool with_epilogue = epi == 1;
            std::vector<float> bias32(biasv.begin(), biasv.end());
            const double scale = with_epilogue ? 0.5 : 1.0;
            std::vector<double> ref = plain;
            if (with_epilogue)
              for (int64_t i = 0; i < c.m * c.n; ++i)
                ref[static_cast<size_t>(i)] = ref[static_cast<size_t>(i)] * scale + biasv[static_cast<size_t>(i % c.n)];
            const int64_t ldo = c.n + 5;
            std::vector<float> out32(static_cast<size_t>(c.m * ldo), -99.0f);
            std::vector<uint16_t> out16(static_cast<size_t>(c.m * ldo), 0xDEAD);
            BlockedGemmArgs g;
            g.m = c.m, g.n = c.n, g.k = c.k, g.a = a.op, g.b = b.op;
            g.has_scale = with_epilogue, g.scale = static_cast<float>(scale);
            g.bias = with_epilogue ? bias32.data() : nullptr;
            g.out = out32.data(), g.out_dtype = DType::kFloat32, g.out_row_stride = ldo;
            BlockedGemm(g);
            g.out = out16.data(), g.out_dtype = DType::kBFloat16;
            BlockedGemm(g);
            const std::string what = std::string(Name(da)) + " x " + Name(db) + (a_col ? " a col" : " a row") +
                                     (b_col ? " b col" : " b row") + (with_epilogue ? " scale+bias" : "") + " m=" +
                                     std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
            int64_t bad = 0;
            for (int64_t i = 0; i < c.m; ++i) {
              for (int64_t j = 0; j < ldo; ++j) {
                const size_t o = static_cast<size_t>(i * ldo + j);
                if (j >= c.n) {  // the gap between rows stays untouched
                  bad += out32[o] != -99.0f || out16[o] != 0xDEAD;
                  continue;
                }
                const double want = ref[static_cast<size_t>(i * c.n + j)];
                bad += static_cast<double>(out32[o]) != want;
                bad += out16[o] != FloatToBf16Bits(static_cast<float>(want));
              }
            }
            EXPECT_EQ(bad, 0) << what;
          }
        }
      }
    }
  }
}

// Inexact values: the f32 result within f32 accumulation error of float64,
// the bf16 output the rounding of the same call's f32 output, and the bits
// the same on one thread as on two.
TEST_F(BlockedGemmTest, RoundsItsOwnF32ResultAndIgnoresThreadCount) {
  const int64_t m = 301, n = 777, k = 700;
  const std::vector<double> av = ::octet::testing::RandomValues(m * k, 11), bv = ::octet::testing::RandomValues(k * n, 12);
  std::vector<double> bias(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) bias[static_cast<size_t>(j)] = 0.01 * static_cast<double>(j % 17);
  const Stored a = Store(av, m, k, DType::kFloat32, false), b = Store(bv, k, n, DType::kFloat32, true);
  std::vector<float> bias32(bias.begin(), bias.end());
  const double scale = 0.3;
  const std::vector<double> ref = Reference(av, bv, bias, m, n, k, scale);
  auto run = [&](DType out_dtype, int threads) {
    std::vector<uint8_t> out(static_cast<size_t>(m * n) * SizeOf(out_dtype));
    BlockedGemmArgs g;
    g.m = m, g.n = n, g.k = k, g.a = a.op, g.b = b.op, g.has_scale = true, g.scale = static_cast<float>(scale);
    g.bias = bias32.data(), g.out = out.data(), g.out_dtype = out_dtype, g.out_row_stride = n;
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    BlockedGemm(g);
    omp_set_num_threads(before);
    return out;
  };
  const std::vector<uint8_t> f32_2 = run(DType::kFloat32, 2), f32_1 = run(DType::kFloat32, 1);
  const std::vector<uint8_t> bf16_2 = run(DType::kBFloat16, 2);
  EXPECT_EQ(f32_1, f32_2) << "the f32 result depends on the thread count";
  const float* o32 = reinterpret_cast<const float*>(f32_2.data());
  const uint16_t* o16 = reinterpret_cast<const uint16_t*>(bf16_2.data());
  double worst = 0.0;
  int64_t bad_rounding = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(o32[i]) - ref[static_cast<size_t>(i)]));
    bad_rounding += o16[i] != FloatToBf16Bits(o32[i]);
  }
  // |sum| <= k, f32 accumulation over k = 700 terms: error well below 1e-3.
  EXPECT_LT(worst, 2e-4);
  EXPECT_EQ(bad_rounding, 0);
}

// An f32 b rounded to bf16 values as it is packed: the same result as a bf16 b.
TEST_F(BlockedGemmTest, RoundsAnF32BToBf16Values) {
  const int64_t m = 40, n = 70, k = 300;
  const std::vector<double> av = Values(m, k, 4);
  std::vector<double> bv = ::octet::testing::RandomValues(k * n, 13);
  std::vector<double> bv_rounded(bv.size());
  for (size_t i = 0; i < bv.size(); ++i)
    bv_rounded[i] = Bf16BitsToFloat(FloatToBf16Bits(static_cast<float>(bv[i])));
  for (bool b_col : {false, true}) {
    const Stored a = Store(av, m, k, DType::kBFloat16, false);
    const Stored b32 = Store(bv, k, n, DType::kFloat32, b_col), b16 = Store(bv_rounded, k, n, DType::kBFloat16, b_col);
    std::vector<float> from32(static_cast<size_t>(m * n)), from16(static_cast<size_t>(m * n));
    BlockedGemmArgs g;
    g.m = m, g.n = n, g.k = k, g.a = a.op, g.b = b32.op, g.b_round_bf16 = true;
    g.out = from32.data(), g.out_row_stride = n;
    BlockedGemm(g);
    g.b = b16.op, g.b_round_bf16 = false, g.out = from16.data();
    BlockedGemm(g);
    EXPECT_EQ(from32, from16) << (b_col ? "column-major b" : "row-major b");
  }
}

// The bf16 output is rounded in registers: ties to even, NaN to the
// canonical NaN, infinities, overflow to infinity and subnormals as
// FloatToBf16Bits does it (out = a · 1 with k = 1 passes each value through).
TEST_F(BlockedGemmTest, RoundsSpecialValuesAsFloatToBf16Bits) {
  const float kTiny = 1e-40f;  // an f32 subnormal
  const std::vector<float> specials = {
      1.0f + 0x1p-8f,            1.0f + 3 * 0x1p-8f,        -(1.0f + 0x1p-8f),  1.0f + 0x1p-8f + 0x1p-20f,
      std::nanf(""),             -std::nanf(""),            INFINITY,           -INFINITY,
      3.4028235e38f,             -3.4028235e38f,            kTiny,              -kTiny,
      0.0f,                      1.0f + 0x1p-7f + 0x1p-8f,  1.17549435e-38f,    65504.0f};  // (-0 sums to +0)
  const int64_t m = static_cast<int64_t>(specials.size()) * 3, n = 37;  // edge rows and columns too
  std::vector<float> a(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) a[static_cast<size_t>(i)] = specials[static_cast<size_t>(i) % specials.size()];
  std::vector<float> b(static_cast<size_t>(n), 1.0f);
  std::vector<uint16_t> out(static_cast<size_t>(m * n));
  BlockedGemmArgs g;
  g.m = m, g.n = n, g.k = 1;
  g.a = {a.data(), DType::kFloat32, 1, 1};
  g.b = {b.data(), DType::kFloat32, n, 1};
  g.out = out.data(), g.out_dtype = DType::kBFloat16, g.out_row_stride = n;
  BlockedGemm(g);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t want = FloatToBf16Bits(a[static_cast<size_t>(i)]);
      const uint16_t got = out[static_cast<size_t>(i * n + j)];
      if (got != want) {
        if (++bad <= 5) ADD_FAILURE() << "row " << i << " (" << a[static_cast<size_t>(i)] << "): got 0x" << std::hex << got << ", want 0x" << want;
      }
    }
  EXPECT_EQ(bad, 0);
}

TEST_F(BlockedGemmTest, RejectsWhatItCannotRead) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), out(64);
  BlockedGemmArgs g;
  g.m = 4, g.n = 4, g.k = 4;
  g.a = {a.data(), DType::kFloat32, 4, 1};
  g.b = {b.data(), DType::kFloat32, 4, 1};
  g.out = out.data(), g.out_row_stride = 4;
  BlockedGemmArgs strided = g;
  strided.a = {a.data(), DType::kFloat32, 8, 2};
  EXPECT_NE(MessageOf<Error>([&] { BlockedGemm(strided); }).find("neither row- nor column-major"), std::string::npos);
  BlockedGemmArgs f64 = g;
  f64.b.dtype = DType::kFloat64;
  EXPECT_NE(MessageOf<Error>([&] { BlockedGemm(f64); }).find("float64"), std::string::npos);
  BlockedGemmArgs f16_out = g;
  f16_out.out_dtype = DType::kFloat16;
  EXPECT_NE(MessageOf<Error>([&] { BlockedGemm(f16_out); }).find("writes float32 or bfloat16"), std::string::npos);
  BlockedGemmArgs round_bf16 = g;
  round_bf16.b.dtype = DType::kBFloat16, round_bf16.b_round_bf16 = true;
  EXPECT_NE(MessageOf<Error>([&] { BlockedGemm(round_bf16); }).find("b_round_bf16 needs an f32 b"), std::string::npos);
}

}  // namespace
}  // namespace octet::cpu
