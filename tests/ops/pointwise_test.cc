// Pointwise ops: values against float64 references, gradcheck, broadcasting,
// non-contiguous inputs, reduced-precision dtypes and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <octet/autograd/gradcheck.h>
#include <octet/autograd/grad_mode.h>
#include <octet/core/convert_testing.h>
#include <octet/core/scaling.h>
#include <octet/ops/cpu_gelu_path_testing.h>
#include <octet/ops/functors.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::octet::testing::RandomValues;

// Tolerances per dtype, stated once: relative to the f64 reference.
double Rtol(DType d) {
  switch (d) {
    case DType::kFloat64: return 1e-12;
    case DType::kFloat32: return 2e-6;
    case DType::kBFloat16: return 1.6e-2;  // 8 bits of mantissa, input and output rounding
    case DType::kFloat16: return 2e-3;
    default: return 0;
  }
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input domain
};

std::vector<UnaryCase> UnaryCases() {
  const double k = std::sqrt(2.0 / M_PI);
  return {
      {"neg", [](const Tensor& x) { return Neg(x); }, [](double x) { return -x; }, -3, 3},
      {"exp", [](const Tensor& x) { return Exp(x); }, [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](const Tensor& x) { return Log(x); }, [](double x) { return std::log(x); }, 0.1, 5},
      {"sqrt", [](const Tensor& x) { return Sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.1, 5},
      {"rsqrt", [](const Tensor& x) { return Rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
      {"tanh", [](const Tensor& x) { return Tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"relu", [](const Tensor& x) { return Relu(x); }, [](double x) { return x > 0 ? x : 0; }, -3, 3},
      {"gelu", [](const Tensor& x) { return Gelu(x); },
       [k](double x) { return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x))); }, -4, 4},
      {"sigmoid", [](const Tensor& x) { return Sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -4,
       4},
      {"abs", [](const Tensor& x) { return Abs(x); }, [](double x) { return std::abs(x); }, -3, 3},
      {"square", [](const Tensor& x) { return Square(x); }, [](double x) { return x * x; }, -3, 3},
      {"pow2.5", [](const Tensor& x) { return Pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 0.1, 3},
      {"add_scalar", [](const Tensor& x) { return x + 1.25; }, [](double x) { return x + 1.25; }, -3, 3},
      {"mul_scalar", [](const Tensor& x) { return x * -0.75; }, [](double x) { return x * -0.75; }, -3, 3},
  };
}

class UnaryTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(UnaryTest, MatchesFloat64Reference) {
  const UnaryCase c = UnaryCases()[std::get<0>(GetParam())];
  const DType dtype = std::get<1>(GetParam());
  // Reference on the values actually stored in the input dtype.
  Tensor x = RandomTensor({5, 37}, 7, dtype, c.lo, c.hi);
  std::vector<double> expected;
  for (double v : x.ToDoubles()) expected.push_back(c.ref(v));
  Tensor y = c.op(x);
  EXPECT_EQ(y.dtype(), dtype);
  // Absolute slack for results near zero that come from O(1) intermediates.
  EXPECT_TRUE(AllClose(y, expected, Rtol(dtype), Rtol(dtype) * 0.1)) << c.name << " " << Name(dtype);
  // Non-contiguous input: transposed view gives the transposed result.
  Tensor yt = c.op(x.T());
  EXPECT_TRUE(AllClose(yt, y.T().Contiguous(), 0, 0)) << c.name;
}

class UnaryGradTest : public ::testing::TestWithParam<int> {};

TEST_P(UnaryGradTest, PassesGradcheck) {
  const UnaryCase c = UnaryCases()[GetParam()];
  Tensor x = RandomTensor({3, 4}, 11, DType::kFloat64, c.lo, c.hi).requires_grad_();
  if (std::string(c.name) == "abs" || std::string(c.name) == "relu") {
    // Keep away from the kink at 0 where finite differences are meaningless.
    NoGradGuard g;
    Tensor shifted = AddScalar(Mul(x, x), 0.05);
    x = Mul(shifted, FromVector(RandomValues(12, 3), {3, 4}, {.dtype = DType::kFloat64})).detach();
    x.requires_grad_();
  }
  GradcheckResult r = Gradcheck([&](const TensorList& in) { return c.op(in[0]); }, {x});
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryTest,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(UnaryCases().size())),
                                            ::testing::Values(DType::kFloat64, DType::kFloat32, DType::kBFloat16,
                                                              DType::kFloat16)),
                         [](const auto& info) {
                           std::string n = UnaryCases()[std::get<0>(info.param)].name;
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n + "_" + Name(std::get<1>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(Ops, UnaryGradTest, ::testing::Range(0, static_cast<int>(UnaryCases().size())),
                         [](const auto& info) {
                           std::string n = UnaryCases()[info.param].name;
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n;
                         });

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
};

std::vector<BinaryCase> BinaryCases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return Maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return Minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }},
  };
}

// Broadcast pairs: (a shape, b shape).
const std::vector<std::pair<Shape, Shape>> kBroadcastPairs = {
    {{4, 5}, {4, 5}}, {{4, 5}, {5}}, {{4, 1}, {1, 5}}, {{2, 3, 4}, {3, 1}}, {{3, 1, 5}, {4, 1}}, {{}, {2, 3}}};

class BinaryTest : public ::testing::TestWithParam<int> {};

TEST_P(BinaryTest, BroadcastsAndMatchesReference) {
  const BinaryCase c = BinaryCases()[GetParam()];
  for (const auto& [sa, sb] : kBroadcastPairs) {
    Tensor a = RandomTensor(sa, 1, DType::kFloat64, 0.5, 2.0);
    Tensor b = RandomTensor(sb, 2, DType::kFloat64, 0.5, 2.0);
    Tensor y = c.op(a, b);
    const Shape out = BroadcastShapes(sa, sb, "test");
    ASSERT_EQ(y.shape(), out);
    // Reference: index both inputs with broadcasting by hand.
    std::vector<double> expected(Numel(out));
    const std::vector<double> av = a.ToDoubles(), bv = b.ToDoubles();
    for (int64_t i = 0; i < Numel(out); ++i) {
      int64_t rem = i, ia = 0, ib = 0, sta = 1, stb = 1;
      for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
        const int64_t idx = rem % out[d];
        rem /= out[d];
        const int64_t da = d - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(sa.size()));
        const int64_t db = d - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(sb.size()));
        if (da >= 0) {
          if (sa[da] != 1) ia += idx * sta;
          sta *= sa[da];
        }
        if (db >= 0) {
          if (sb[db] != 1) ib += idx * stb;
          stb *= sb[db];
        }
      }
      expected[i] = c.ref(av[ia], bv[ib]);
    }
    EXPECT_TRUE(AllClose(y, expected, 1e-15, 0)) << c.name << " " << ShapeStr(sa) << " x " << ShapeStr(sb);
    // Gradcheck through the broadcast (sum back to the input shapes).
    Tensor ag = a.detach().requires_grad_(), bg = b.detach().requires_grad_();
    GradcheckResult r = Gradcheck([&](const TensorList& in) { return c.op(in[0], in[1]); }, {ag, bg});
    EXPECT_TRUE(r.ok) << c.name << " " << ShapeStr(sa) << " x " << ShapeStr(sb) << ": " << r.message;
  }
}

TEST_P(BinaryTest, NonContiguousAndBf16) {
  const BinaryCase c = BinaryCases()[GetParam()];
  Tensor a = RandomTensor({6, 8}, 5, DType::kFloat32, 0.5, 2.0);
  Tensor b = RandomTensor({8, 6}, 6, DType::kFloat32, 0.5, 2.0);
  Tensor y = c.op(a.Slice(0, 0, 6, 2), b.T().Slice(0, 1, 6, 2));  // both strided [3, 8]
  Tensor y_ref = c.op(a.Slice(0, 0, 6, 2).Contiguous(), b.T().Slice(0, 1, 6, 2).Contiguous());
  EXPECT_TRUE(AllClose(y, y_ref, 0, 0));
  Tensor ab = a.To(DType::kBFloat16), bb = b.To(DType::kBFloat16);
  std::vector<double> expected;
  const std::vector<double> av = ab.ToDoubles(), bv = bb.ToDoubles();
  for (size_t i = 0; i < av.size(); ++i) expected.push_back(c.ref(av[i], bv[i]));
  EXPECT_TRUE(AllClose(c.op(ab, bb.Reshape({6, 8})), expected, Rtol(DType::kBFloat16), 0));
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryTest, ::testing::Range(0, static_cast<int>(BinaryCases().size())),
                         [](const auto& info) { return std::string(BinaryCases()[info.param].name); });

// NOTE [narrow pointwise in chunks]: contiguous bf16/f16 runs are computed
// in chunks (bf16 widened inside the loop, the result narrowed by the row
// converter); strided ones element by element. Both must give the same bits,
// across chunk boundaries and for inf, NaN, subnormal results and ties.
TEST(Pointwise, NarrowChunkedRunsMatchElementByElement) {
  const int64_t rows = 3, cols = 3 * 512 + 77;  // several chunks and a tail per row
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<double> va = RandomValues(rows * cols, 11, -6.0, 6.0);
    std::vector<double> vb = RandomValues(rows * cols, 12, -6.0, 6.0);
    const double specials[] = {INFINITY, -INFINITY, NAN, 1e-39, -1e-40, 0.0, -0.0, 3e38, 1.00390625, 65504.0};
    for (size_t i = 0; i < std::size(specials); ++i) {
      va[700 + 37 * i] = specials[i];
      vb[1500 + 41 * i] = specials[i];
    }
    // Built transposed, so that .T() is a strided view of the same values.
    const Tensor at = FromVector(va, {cols, rows}, {.dtype = dtype}).T();
    const Tensor bt = FromVector(vb, {cols, rows}, {.dtype = dtype}).T();
    const Tensor a = at.Contiguous(), b = bt.Contiguous();
    ASSERT_TRUE(a.is_contiguous() && !at.is_contiguous());
    const Tensor row = b.Slice(0, 1, 2).Reshape({cols});
    const Tensor col = b.Slice(1, 700, 701).Contiguous();  // [rows, 1]: stride 0 along a row
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
        {"gelu", [](const Tensor& x, const Tensor&) { return Gelu(x); }},
        {"mul_scalar", [](const Tensor& x, const Tensor&) { return x * 0.3; }},
        {"add", [](const Tensor& x, const Tensor& y) { return x + y; }},
        {"mul", [](const Tensor& x, const Tensor& y) { return x * y; }},
        {"div", [](const Tensor& x, const Tensor& y) { return x / y; }},
    };
    for (const auto& [name, op] : ops) {
      EXPECT_EQ(::octet::testing::Bytes(op(a, b)), ::octet::testing::Bytes(op(at, bt).Contiguous()))
          << name << " " << Name(dtype);
    }
    // Broadcasts: a row (contiguous operands) and a column (the
    // tensor-by-scalar-like fast path), against the strided loop.
    EXPECT_EQ(::octet::testing::Bytes(a * row), ::octet::testing::Bytes((at * row).Contiguous())) << Name(dtype);
    EXPECT_EQ(::octet::testing::Bytes(a - col), ::octet::testing::Bytes((at - col).Contiguous())) << Name(dtype);
    EXPECT_EQ(::octet::testing::Bytes(col - a), ::octet::testing::Bytes((col - at).Contiguous())) << Name(dtype);
  }
}

// NOTE [pointwise isa dispatch]: the contiguous runs are compiled for the
// baseline and for AVX-512 from one body. Every op, on every float dtype, in
// each run shape (two rows, row by broadcast value, value by row) and in
// GeluFp8, must give the same bits from both builds, across chunk and vector
// boundaries and for specials. On a CPU without AVX-512 both runs take the
// baseline and the test checks nothing new. bf16 GELU is computed here, not
// looked up (NOTE [bf16 gelu tables]: the tables are the f32 kernels' output,
// and tests/ops/gelu_table_test.cc compares them with this computed path).
TEST(Pointwise, IsaBuildsGiveIdenticalBits) {
  internal::SetCpuGeluPathForTesting(CpuGeluPath::kCompute);
  const int64_t rows = 3, cols = 2 * 512 + 4096 + 45;  // chunks, a GeluFp8 block and ragged tails per row
  std::vector<double> va = RandomValues(rows * cols, 21, -8.0, 8.0);
  std::vector<double> vb = RandomValues(rows * cols, 22, 0.05, 3.0);  // positive: log, sqrt, pow, div
  const double specials[] = {INFINITY, -INFINITY, NAN, 1e-39, -1e-40, 0.0, -0.0, 3e38, 1.00390625, 65504.0, -20.0};
  for (size_t i = 0; i < std::size(specials); ++i) va[900 + 53 * i] = specials[i];
  const auto run_all = [&](DType dtype) {
    const Tensor a = FromVector(va, {rows, cols}, {.dtype = dtype});
    const Tensor b = FromVector(vb, {rows, cols}, {.dtype = dtype});
    const Tensor col = b.Slice(1, 7, 8).Contiguous();  // [rows, 1]: a value broadcast along each row
    std::vector<uint8_t> all;
    const auto add = [&](const Tensor& t) { ::octet::testing::AppendBytes(&all, t); };
    for (int op = 0; op < static_cast<int>(UnaryOp::kCount); ++op) {
      add(UnaryRaw(static_cast<UnaryOp>(op), static_cast<UnaryOp>(op) == UnaryOp::kPowScalar ? b : a, 1.7));
    }
    for (int op = 0; op < static_cast<int>(BinaryOp::kCount); ++op) {
      const BinaryOp bop = static_cast<BinaryOp>(op);
      const Tensor x = bop == BinaryOp::kPowBackward ? b : a;
      add(BinaryRaw(bop, x, b, 1.3));
      add(BinaryRaw(bop, x, col, 1.3));
      add(BinaryRaw(bop, col, x, 1.3));
    }
    if (dtype != DType::kFloat64) {
      const Tensor scale = FromVector(std::vector<double>{17.0}, {1}, {.dtype = DType::kFloat32});
      for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) add(GeluFp8(a, fp8, scale));
    }
    return all;
  };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    std::vector<std::vector<uint8_t>> results;
    for (bool avx512 : {false, true}) {
      internal::SetConverterIsaForTesting({avx512, avx512, avx512, true});
      results.push_back(run_all(dtype));
    }
    internal::ForceScalarConvertersForTesting(false);
    EXPECT_EQ(results[0], results[1]) << Name(dtype);
  }
  internal::SetCpuGeluPathForTesting(std::nullopt);
}

// NOTE [fast exp]: ExpFast, and the f32 Exp op built on it (both ISA
// builds), over the float range against std::exp in float64: every 4099th
// bit pattern of both signs, plus the edges of the range and their
// neighbours. Within 2 ulp wherever e^x is a normal float at or above
// e^-86.985; +0 below e^-86.995 (the clamp's bottom scale is +0), -inf
// included; +inf exactly where e^x rounds past FLT_MAX; NaN for NaN. The
// top of the range was once wrong: e^88.5 = 2.7e38 came out +inf.
TEST(Pointwise, ExpFastOverTheFloatRange) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {0.0f, -0.0f, inf, -inf, 88.5f, 88.376f, 88.72f, 88.7228f, 88.7229f, 88.8f, 89.0f, 1000.0f,
                           -86.98f, -86.99f, -87.0f, -87.33654f, -87.4f, -103.0f, -1e30f, 1e30f, 1e-30f, -1e-30f};
  for (float edge : {88.72283f, 88.376f, -86.9893f, -87.33654f, 0.5f * 0.6931472f}) {
    float up = edge, down = edge;
    for (int i = 0; i < 16; ++i) {
      xs.push_back(up);
      xs.push_back(down);
      up = std::nextafter(up, inf);
      down = std::nextafter(down, -inf);
    }
  }
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
    float x;
    const uint32_t u32 = static_cast<uint32_t>(u);
    std::memcpy(&x, &u32, 4);
    if (!std::isnan(x)) xs.push_back(x);
  }
  double worst_ulps = 0.0;
  const auto check = [&](float x, float got, const char* who) {
    const double want = std::exp(static_cast<double>(x));
    const float want_f = static_cast<float>(want);
    if (std::isinf(want_f)) {
      ASSERT_EQ(got, inf) << who << ": e^" << x;
    } else if (x < -86.995f) {
      ASSERT_TRUE(got == 0.0f && !std::signbit(got)) << who << ": e^" << x << " = " << got;
    } else if (x >= -86.985f || got != 0.0f) {
      // One ulp of a float near want (normal: want >= 1.7e-38 here).
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      const double ulps = std::abs(static_cast<double>(got) - want) / ulp;
      worst_ulps = std::max(worst_ulps, ulps);
      ASSERT_LE(ulps, 2.0) << who << ": e^" << x << " = " << got << ", want " << want;
    }
  };
  // An ASSERT in check ends only that call: stop at the first failure
  // rather than report one for each of a million arguments.
  for (float x : xs) {
    check(x, functors::ExpFast(x), "ExpFast");
    if (HasFatalFailure()) return;
  }
  EXPECT_TRUE(std::isnan(functors::ExpFast(std::numeric_limits<float>::quiet_NaN())));
  const double measured_scalar = worst_ulps;
  std::vector<double> in(xs.begin(), xs.end());
  in.push_back(NAN);
  for (bool avx512 : {false, true}) {
    internal::SetConverterIsaForTesting({avx512, avx512, avx512, true});
    const std::vector<double> out =
        Exp(FromVector(in, {static_cast<int64_t>(in.size())}, {.dtype = DType::kFloat32})).ToDoubles();
    internal::ForceScalarConvertersForTesting(false);
    for (size_t i = 0; i < xs.size(); ++i) {
      check(xs[i], static_cast<float>(out[i]), avx512 ? "Exp avx512" : "Exp base");
      if (HasFatalFailure()) return;
    }
    EXPECT_TRUE(std::isnan(out.back()));
  }
  EXPECT_GT(measured_scalar, 0.5);  // the sweep reached values that are not exact
  std::printf("ExpFast: worst error %.3f ulp over %zu arguments\n", worst_ulps, xs.size());
}

// GELU at the ends of the float range: x / (1 + e^-2u) with e^-2u overflowing
// to +inf (x << 0: -0, and NaN at -inf as 0.5 x (1 + tanh u) gives), or
// vanishing beside 1 (x >> 0: x itself); tiny x halves exactly.
TEST(Pointwise, GeluAtTheEndsOfTheRange) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<double> in = {inf, -inf, 100.0, -100.0, 1e-30, -1e-30, 0.0, 10.0, -10.0, 6.0};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const std::vector<double> y = Gelu(FromVector(in, {static_cast<int64_t>(in.size())}, {.dtype = dtype})).ToDoubles();
    const std::vector<double> x = FromVector(in, {static_cast<int64_t>(in.size())}, {.dtype = dtype}).ToDoubles();
    EXPECT_EQ(y[0], inf) << Name(dtype);
    EXPECT_TRUE(std::isnan(y[1])) << Name(dtype);
    EXPECT_EQ(y[2], x[2]) << Name(dtype);
    EXPECT_TRUE(y[3] == 0.0 && std::signbit(y[3])) << Name(dtype) << ": " << y[3];
    EXPECT_EQ(y[4], x[4] / 2) << Name(dtype);
    EXPECT_EQ(y[5], x[5] / 2) << Name(dtype);
    EXPECT_TRUE(y[6] == 0.0 && !std::signbit(y[6])) << Name(dtype);
    EXPECT_EQ(y[7], x[7]) << Name(dtype);
    // gelu(-10) = -10 sigmoid(2u) ~ -1.2e-37: a normal f32, tiny but not 0.
    const double k = std::sqrt(2.0 / M_PI), u = k * (-10.0 + 0.044715 * -1000.0);
    const double want = -10.0 / (1.0 + std::exp(-2.0 * u));
    if (dtype == DType::kFloat32) EXPECT_NEAR(y[8] / want, 1.0, 1e-5) << y[8] << " vs " << want;
    EXPECT_NEAR(y[9], 6.0 / (1.0 + std::exp(-2.0 * k * (6.0 + 0.044715 * 216.0))), 1e-6 * 6.0) << Name(dtype);
  }
}

TEST(Pointwise, MaximumSplitsGradientOnTies) {
  Tensor a = FromVector(std::vector<double>{1, 2, 3}, {3}, {.dtype = DType::kFloat64, .requires_grad = true});
  Tensor b = FromVector(std::vector<double>{1, 5, 0}, {3}, {.dtype = DType::kFloat64, .requires_grad = true});
  Sum(Maximum(a, b)).Backward();
  EXPECT_TRUE(AllClose(a.grad(), std::vector<double>{0.5, 0, 1}, 0, 0));
  EXPECT_TRUE(AllClose(b.grad(), std::vector<double>{0.5, 1, 0}, 0, 0));
}

TEST(Pointwise, WhereAndMaskedFill) {
  Tensor cond = CompareScalar(CompareOp::kGt, FromVector(std::vector<double>{-1, 2, 0, 3}, {4}), 0.5);
  Tensor a = FromVector(std::vector<double>{1, 2, 3, 4}, {4}, {.dtype = DType::kFloat64, .requires_grad = true});
  Tensor b = FromVector(std::vector<double>{9}, {1}, {.dtype = DType::kFloat64, .requires_grad = true});
  Tensor y = Where(cond, a, b);
  EXPECT_TRUE(AllClose(y, std::vector<double>{9, 2, 9, 4}, 0, 0));
  Sum(y).Backward();
  EXPECT_TRUE(AllClose(a.grad(), std::vector<double>{0, 1, 0, 1}, 0, 0));
  EXPECT_TRUE(AllClose(b.grad(), std::vector<double>{2}, 0, 0));
  Tensor m = MaskedFill(FromVector(std::vector<double>{1, 2, 3, 4}, {4}), cond, -1e9);
  EXPECT_TRUE(AllClose(m, std::vector<double>{1, -1e9, 3, -1e9}, 0, 0));
  GradcheckResult r = Gradcheck([&](const TensorList& in) { return Where(cond, in[0], in[1]); },
                                {a.detach().requires_grad_(), b.detach().requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Pointwise, ComparisonsReturnBool) {
  Tensor a = FromVector(std::vector<double>{1, 2, 3}, {3});
  Tensor b = FromVector(std::vector<double>{2, 2, 2}, {3});
  Tensor lt = Lt(a, b);
  EXPECT_EQ(lt.dtype(), DType::kBool);
  EXPECT_TRUE(AllClose(lt, std::vector<double>{1, 0, 0}, 0, 0));
  EXPECT_TRUE(AllClose(Eq(a, b), std::vector<double>{0, 1, 0}, 0, 0));
  EXPECT_TRUE(AllClose(Gt(a, b), std::vector<double>{0, 0, 1}, 0, 0));
}

TEST(Pointwise, InPlaceAddBumpsVersion) {
  Tensor x = Zeros({3});
  const uint64_t v0 = x.storage()->version();
  AddInPlace(x, Ones({3}), 2.0);
  EXPECT_TRUE(AllClose(x, std::vector<double>{2, 2, 2}, 0, 0));
  EXPECT_GT(x.storage()->version(), v0);
}

TEST(Pointwise, InPlaceMaximumBroadcastsKeepsNanAndBumpsVersion) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = FromVector(std::vector<double>{1, 5, nan, -2}, {4});
  const uint64_t v0 = x.storage()->version();
  MaximumInPlace(x, FromVector(std::vector<double>{3, 2, 7, nan}, {4}));
  const std::vector<double> got = x.ToDoubles();
  EXPECT_EQ(got[0], 3);
  EXPECT_EQ(got[1], 5);
  EXPECT_TRUE(std::isnan(got[2]));  // NaN from either side wins, as Maximum
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_GT(x.storage()->version(), v0);
  Tensor y = FromVector(std::vector<double>{1, 4, 2, 6}, {2, 2});
  MaximumInPlace(y, FromVector(std::vector<double>{3}, {1}));  // broadcast
  EXPECT_TRUE(AllClose(y, std::vector<double>{3, 4, 3, 6}, 0, 0));
  std::string msg = ErrorOf([&] { MaximumInPlace(y, Zeros({3})); });
  EXPECT_NE(msg.find("maximum_"), std::string::npos) << msg;
  msg = ErrorOf([&] { MaximumInPlace(y, Zeros({2, 2, 2})); });
  EXPECT_NE(msg.find("maximum_: float32[2, 2, 2] does not broadcast to the in-place target float32[2, 2]"),
            std::string::npos)
      << msg;
  msg = ErrorOf([&] { MaximumInPlace(y, Zeros({2, 2}, {.dtype = DType::kBFloat16})); });
  EXPECT_NE(msg.find("maximum_"), std::string::npos) << msg;
}

TEST(Pointwise, BadInputsNameOpShapesAndDtypes) {
  Tensor a = Zeros({2, 3});
  Tensor b = Zeros({4});
  std::string msg = ErrorOf([&] { Add(a, b); });
  EXPECT_NE(msg.find("add: shapes [2, 3] and [4] cannot be broadcast together"), std::string::npos) << msg;
  msg = ErrorOf([&] { Mul(a, Zeros({2, 3}, {.dtype = DType::kBFloat16})); });
  EXPECT_NE(msg.find("mul: dtype mismatch: float32[2, 3] vs bfloat16[2, 3]"), std::string::npos) << msg;
  Tensor q = a.To(DType::kFloat8E4M3);
  msg = ErrorOf([&] { Gelu(q); });
  EXPECT_NE(msg.find("gelu: argument 'x' is fp8_e4m3[2, 3]; gelu ignores FP8 scales"), std::string::npos) << msg;
  msg = ErrorOf([&] { Add(q, q); });
  EXPECT_NE(msg.find("add: argument 'a' is fp8_e4m3[2, 3]"), std::string::npos) << msg;
  msg = ErrorOf([&] { Exp(Zeros({2}, {.dtype = DType::kInt64})); });
  EXPECT_NE(msg.find("exp: argument 'x' is int64[2]; expected float32, float64, bfloat16 or float16"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace octet
