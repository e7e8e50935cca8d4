// LayerNorm and RMSNorm: forward and backward against float64 references
// written here, gradcheck for every input, non-contiguous inputs, thread-count
// independence of the parameter gradients, and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <octet/autograd/engine.h>
#include <octet/autograd/gradcheck.h>
#include <octet/autograd/grad_mode.h>
#include <octet/core/convert_testing.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/norm.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

// Tolerances per dtype, stated once. The references run in f64 on the values
// actually stored in the input dtype, so the error is the kernel's compute
// precision (f32 for bf16/f16) plus the rounding of the output. atol is
// relative to the largest magnitude of the expected tensor.
struct Tol {
  double rtol, atol;
};
Tol TolFor(DType d) {
  switch (d) {
    case DType::kFloat64: return {1e-12, 1e-12};
    case DType::kFloat32: return {2e-5, 2e-6};
    case DType::kBFloat16: return {8e-3, 4e-3};  // one bf16 rounding of the output (2^-9 relative)
    case DType::kFloat16: return {1e-3, 5e-4};
    default: return {0, 0};
  }
}

::testing::AssertionResult Close(const Tensor& actual, const std::vector<double>& expected, DType d) {
  double scale = 1e-30;
  for (double e : expected) scale = std::max(scale, std::abs(e));
  const Tol t = TolFor(d);
  return AllClose(actual, expected, t.rtol, t.atol * scale);
}

// f64 reference of LayerNorm (center = true) and RMSNorm (center = false)
// over rows of length c, with its gradients for output gradient dy. w/b empty
// mean "no affine part".
struct NormRef {
  std::vector<double> y, dx, dw, db;
};
NormRef RefNorm(bool center, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& b, const std::vector<double>& dy, int64_t c, double eps) {
  const int64_t n = static_cast<int64_t>(x.size()) / c;
  NormRef r{std::vector<double>(x.size()), std::vector<double>(x.size()), std::vector<double>(c, 0.0),
            std::vector<double>(c, 0.0)};
  for (int64_t i = 0; i < n; ++i) {
    const double* xr = &x[i * c];
    double mu = 0, var = 0;
    if (center) {
      for (int64_t j = 0; j < c; ++j) mu += xr[j];
      mu /= c;
    }
    for (int64_t j = 0; j < c; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= c;
    const double rs = 1.0 / std::sqrt(var + eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (xr[j] - mu) * rs;
      const double wj = w.empty() ? 1.0 : w[j];
      r.y[i * c + j] = xh * wj + (b.empty() ? 0.0 : b[j]);
      const double g = dy[i * c + j] * wj;
      mean_g += g / c;
      mean_gx += g * xh / c;
      r.dw[j] += dy[i * c + j] * xh;
      r.db[j] += dy[i * c + j];
    }
    if (!center) mean_g = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (xr[j] - mu) * rs;
      const double g = dy[i * c + j] * (w.empty() ? 1.0 : w[j]);
      r.dx[i * c + j] = rs * (g - mean_g - xh * mean_gx);
    }
  }
  return r;
}

std::vector<double> ValuesOrEmpty(const Tensor& t) { return t.defined() ? t.ToDoubles() : std::vector<double>{}; }

// ---- values for every dtype ----------------------------------------------------

class NormValueTest : public ::testing::TestWithParam<std::tuple<DType, bool, bool>> {};

TEST_P(NormValueTest, ForwardAndBackwardMatchFloat64Reference) {
  const auto [dtype, center, affine] = GetParam();
  const int64_t c = 40;
  const double eps = center ? 1e-5 : 1e-6;
  Tensor x = RandomTensor({2, 3, c}, 1, dtype, -2.0, 3.0).requires_grad_();
  Tensor w, b;
  if (affine) {
    w = RandomTensor({c}, 2, dtype, 0.5, 1.5).requires_grad_();
    if (center) b = RandomTensor({c}, 3, dtype, -0.5, 0.5).requires_grad_();
  }
  const Tensor dy = RandomTensor({2, 3, c}, 4, dtype);
  Tensor y = center ? LayerNorm(x, w, b, eps) : RmsNorm(x, w, eps);
  ASSERT_EQ(y.dtype(), dtype);
  ASSERT_EQ(y.shape(), x.shape());
  y.Backward(dy);
  const NormRef ref = RefNorm(center, x.ToDoubles(), ValuesOrEmpty(w), ValuesOrEmpty(b), dy.ToDoubles(), c, eps);
  EXPECT_TRUE(Close(y, ref.y, dtype)) << "y";
  EXPECT_TRUE(Close(x.grad(), ref.dx, dtype)) << "dx";
  if (w.defined()) EXPECT_TRUE(Close(w.grad(), ref.dw, dtype)) << "dweight";
  if (b.defined()) EXPECT_TRUE(Close(b.grad(), ref.db, dtype)) << "dbias";
}

INSTANTIATE_TEST_SUITE_P(Norm, NormValueTest,
                         ::testing::Combine(::testing::Values(DType::kFloat64, DType::kFloat32, DType::kBFloat16,
                                                              DType::kFloat16),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(Name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_layer_norm" : "_rms_norm") +
                                  (std::get<2>(info.param) ? "_affine" : "_plain");
                         });

// ---- gradcheck -------------------------------------------------------------

TEST(NormGrad, LayerNormPassesGradcheckForXWeightAndBias) {
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 2, 5}, Shape{6}}) {
    const int64_t c = shape.back();
    Tensor x = RandomTensor(shape, 10, DType::kFloat64, -2, 2).requires_grad_();
    Tensor w = RandomTensor({c}, 11, DType::kFloat64, 0.5, 1.5).requires_grad_();
    Tensor b = RandomTensor({c}, 12, DType::kFloat64, -1, 1).requires_grad_();
    GradcheckResult r =
        Gradcheck([](const TensorList& in) { return LayerNorm(in[0], in[1], in[2], 1e-5); }, {x, w, b});
    EXPECT_TRUE(r.ok) << ShapeStr(shape) << ": " << r.message;
  }
}

TEST(NormGrad, LayerNormWithoutAffinePassesGradcheck) {
  Tensor x = RandomTensor({4, 9}, 13, DType::kFloat64, -2, 2).requires_grad_();
  GradcheckResult r = Gradcheck([](const TensorList& in) { return LayerNorm(in[0], Tensor(), Tensor()); }, {x});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor w = RandomTensor({9}, 14, DType::kFloat64, 0.5, 1.5).requires_grad_();
  r = Gradcheck([](const TensorList& in) { return LayerNorm(in[0], in[1], Tensor()); }, {x, w});
  EXPECT_TRUE(r.ok) << "weight only: " << r.message;
}

TEST(NormGrad, RmsNormPassesGradcheckForXAndWeight) {
  Tensor x = RandomTensor({3, 2, 8}, 15, DType::kFloat64, -2, 2).requires_grad_();
  Tensor w = RandomTensor({8}, 16, DType::kFloat64, 0.5, 1.5).requires_grad_();
  GradcheckResult r = Gradcheck([](const TensorList& in) { return RmsNorm(in[0], in[1]); }, {x, w});
  EXPECT_TRUE(r.ok) << r.message;
  r = Gradcheck([](const TensorList& in) { return RmsNorm(in[0], Tensor()); }, {x});
  EXPECT_TRUE(r.ok) << "no weight: " << r.message;
}

TEST(NormGrad, GradcheckThroughTransposedAndSlicedInputs) {
  Tensor xt = RandomTensor({6, 4}, 17, DType::kFloat64, -2, 2).requires_grad_();  // used as (4, 6)
  Tensor w = RandomTensor({6}, 18, DType::kFloat64, 0.5, 1.5).requires_grad_();
  Tensor b = RandomTensor({6}, 19, DType::kFloat64, -1, 1).requires_grad_();
  GradcheckResult r =
      Gradcheck([](const TensorList& in) { return LayerNorm(in[0].T(), in[1], in[2]); }, {xt, w, b});
  EXPECT_TRUE(r.ok) << "transposed: " << r.message;
  Tensor xs = RandomTensor({3, 10}, 20, DType::kFloat64, -2, 2).requires_grad_();
  Tensor w5 = RandomTensor({5}, 21, DType::kFloat64, 0.5, 1.5).requires_grad_();
  r = Gradcheck([](const TensorList& in) { return RmsNorm(in[0].Slice(1, 1, 10, 2), in[1]); }, {xs, w5});
  EXPECT_TRUE(r.ok) << "sliced: " << r.message;
}

// ---- layout, precision, determinism ----------------------------------------

TEST(Norm, NonContiguousInputGivesTheContiguousResult) {
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor base = RandomTensor({24, 10}, 22, d, -2, 2);
    const Tensor x = base.T();  // (10, 24), strides (1, 10)
    ASSERT_FALSE(x.is_contiguous());
    const Tensor w = RandomTensor({24}, 23, d, 0.5, 1.5), b = RandomTensor({24}, 24, d);
    EXPECT_TRUE(AllClose(LayerNorm(x, w, b), LayerNorm(x.Contiguous(), w, b), 0, 0)) << Name(d);
    EXPECT_TRUE(AllClose(RmsNorm(x, w), RmsNorm(x.Contiguous(), w), 0, 0)) << Name(d);
    // A strided weight (every other element of a longer vector).
    const Tensor w2 = RandomTensor({48}, 25, d, 0.5, 1.5).Slice(0, 0, 48, 2);
    EXPECT_TRUE(AllClose(LayerNorm(x, w2, b), LayerNorm(x, w2.Contiguous(), b), 0, 0)) << Name(d);
  }
}

TEST(Norm, VarianceIsAccurateWhenTheMeanIsLarge) {
  // Rows 1000 +- 1: var = 1 exactly, so y = +-1/sqrt(1 + eps). The one-pass
  // E[x^2] - E[x]^2 formula in f32 loses every digit here.
  std::vector<double> xv(2 * 64), expected(2 * 64);
  for (size_t i = 0; i < xv.size(); ++i) {
    xv[i] = 1000.0 + ((i % 2) ? 1.0 : -1.0);
    expected[i] = ((i % 2) ? 1.0 : -1.0) / std::sqrt(1.0 + 1e-5);
  }
  const Tensor x = FromVector(xv, {2, 64}, {.dtype = DType::kFloat32});
  EXPECT_TRUE(AllClose(LayerNorm(x, Tensor(), Tensor()), expected, 1e-6, 1e-6));
}

TEST(Norm, ParameterGradientsDoNotDependOnTheThreadCount) {
  // 512 x 96 is above the parallel grain, so two threads really split it.
  const Tensor x0 = RandomTensor({512, 96}, 26, DType::kFloat32, -2, 2);
  const Tensor dy = RandomTensor({512, 96}, 27, DType::kFloat32);
  auto grads = [&](int threads) {
    const cpu::ScopedOmpThreads scoped(threads);
    Tensor x = x0.Clone().requires_grad_();
    Tensor w = Ones({96}).requires_grad_(), b = Zeros({96}).requires_grad_();
    LayerNorm(x, w, b).Backward(dy);
    return TensorList{x.grad(), w.grad(), b.grad()};
  };
  const TensorList one = grads(1), two = grads(2);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(AllClose(one[i], two[i], 0, 0)) << "gradient " << i;
}

// NOTE [norm isa dispatch]: the row loops of LayerNorm, RMSNorm, AddLayerNorm
// and LayerNormFp8, forward and backward, are compiled for the baseline and
// for AVX-512; both must give the same bits on every float dtype (a width
// with a ragged tail, rows split across threads, parameter gradients). On a
// CPU without AVX-512 both runs take the baseline.
// The outputs and gradients of LayerNorm, RMSNorm and AddLayerNorm (forward
// and backward; AddLayerNorm's with a dsum) on fixed random inputs of dtype:
// each one's bytes, in the order of kNormOutputNames.
const std::vector<std::string> kNormOutputNames = {
    "LayerNorm y", "LayerNorm dx",     "LayerNorm dw",   "LayerNorm db",    "RmsNorm y",       "RmsNorm dx",
    "RmsNorm dw",  "AddLayerNorm sum", "AddLayerNorm y", "AddLayerNorm dx", "AddLayerNorm dr", "AddLayerNorm dw",
    "AddLayerNorm db"};
std::vector<std::vector<uint8_t>> NormOutputBytes(int64_t rows, int64_t c, DType dtype) {
  std::vector<std::vector<uint8_t>> all;
  const auto add = [&](const Tensor& t) { ::octet::testing::AppendBytes(&all.emplace_back(), t); };
  Tensor x = RandomTensor({rows, c}, 61, dtype, -3, 3).requires_grad_();
  Tensor r = RandomTensor({rows, c}, 62, dtype, -1, 1).requires_grad_();
  Tensor w = RandomTensor({c}, 63, dtype, 0.5, 1.5).requires_grad_();
  Tensor b = RandomTensor({c}, 64, dtype).requires_grad_();
  const Tensor dy = RandomTensor({rows, c}, 65, dtype), dsum = RandomTensor({rows, c}, 66, dtype);
  const Tensor y = LayerNorm(x, w, b);
  y.Backward(dy);
  for (const Tensor& t : {y, x.grad(), w.grad(), b.grad()}) add(t);
  for (Tensor* t : {&x, &w, &b}) t->zero_grad();
  const Tensor z = RmsNorm(x, w);
  z.Backward(dy);
  for (const Tensor& t : {z, x.grad(), w.grad()}) add(t);
  for (Tensor* t : {&x, &w}) t->zero_grad();
  const AddLayerNormResult o = AddLayerNorm(x, r, w, b);
  autograd::Backward({o.sum, o.out}, {dsum, dy});
  for (const Tensor& t : {o.sum, o.out, x.grad(), r.grad(), w.grad(), b.grad()}) add(t);
  return all;
}

TEST(Norm, IsaBuildsGiveIdenticalBits) {
  const int64_t rows = 96, c = 777;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    std::vector<std::vector<std::vector<uint8_t>>> results;
    for (bool avx512 : {false, true}) {
      internal::SetConverterIsaForTesting({avx512, avx512, avx512, true});
      results.push_back(NormOutputBytes(rows, c, dtype));
      if (dtype != DType::kFloat64) {
        const Tensor x = RandomTensor({rows, c}, 61, dtype, -3, 3), w = RandomTensor({c}, 63, dtype, 0.5, 1.5);
        const Tensor b = RandomTensor({c}, 64, dtype);
        const Tensor scale = FromVector(std::vector<double>{9.0}, {1}, {.dtype = DType::kFloat32});
        ::octet::testing::AppendBytes(&results.back().emplace_back(),
                                      LayerNormFp8(x, w, b, DType::kFloat8E4M3, scale));
      }
    }
    internal::ForceScalarConvertersForTesting(false);
    EXPECT_EQ(results[0], results[1]) << Name(dtype);
  }
}

// NOTE [native bf16 norm output]: with AVX-512 BF16, a bf16 LayerNorm or
// RMSNorm output row and a LayerNorm dx row are computed and narrowed in
// registers by explicit intrinsics. They must give the generic AVX-512
// loop's bits. A rounding that differs by one FMA changes a bf16 result only
// about once in 2^16 elements, so the rows are many (Norm.IsaBuildsGive-
// IdenticalBits, with ~75 k elements, missed such a change), with a ragged
// width and the default GPT's.
TEST(Norm, NativeBf16RowsMatchTheGenericLoop) {
  const internal::ConverterIsa cpu = internal::DetectedConverterIsa();
  if (!cpu.avx512 || !cpu.bf16) GTEST_SKIP() << "this CPU has no AVX-512 BF16: the native rows never run";
  // 64-256 values: NOTE [short bf16 rows in registers]; rows taken sixteen
  // (NOTE [row statistics sixteen rows at a time]), three, two and one at a
  // time. f32 rows of those widths take the sixteen-row batches too; their
  // outputs are not rounded to bf16, so any difference shows.
  for (const DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    for (const auto& [c, rows] : {std::pair<int64_t, int64_t>{777, 4096}, {128, 4096}, {128, 4097}, {64, 4099},
                                  {192, 4097}, {256, 4097}}) {
      std::vector<std::vector<uint8_t>> results;
      for (bool native : {false, true}) {
        internal::SetConverterIsaForTesting({true, true, native, true});
        std::vector<uint8_t> all;
        const auto add = [&](const Tensor& t) { ::octet::testing::AppendBytes(&all, t); };
        Tensor x = RandomTensor({rows, c}, 81, dtype, -3, 3).requires_grad_();
        Tensor w = RandomTensor({c}, 83, dtype, 0.5, 1.5).requires_grad_();
        Tensor b = RandomTensor({c}, 84, dtype).requires_grad_();
        const Tensor r = RandomTensor({rows, c}, 82, dtype, -1, 1);
        const Tensor dy = RandomTensor({rows, c}, 85, dtype);
        const Tensor y = LayerNorm(x, w, b);
        y.Backward(dy);
        for (const Tensor& t : {y, x.grad(), w.grad(), b.grad()}) add(t);
        add(RmsNorm(x.detach(), w.detach()));
        add(AddLayerNorm(x.detach(), r, w.detach(), b.detach()).out);
        results.push_back(all);
      }
      internal::ForceScalarConvertersForTesting(false);
      EXPECT_EQ(results[0], results[1]) << Name(dtype) << ", width " << c << ", rows " << rows;
    }
  }
}

// NOTE [bf16 dx rows narrowed in AVX2 registers]: without AVX-512, bf16
// LayerNorm and RMSNorm output rows and dx rows (with and without a dsum) are
// computed and narrowed in AVX2 registers. They must give the generic loop's
// bits, which run when the AVX2 converters are off (then the rows go through
// f32 scratch and the scalar FloatToBf16Bits). Rows many and widths ragged,
// as in NativeBf16RowsMatchTheGenericLoop: one FMA more or less changes a
// bf16 result only about once in 2^16 elements.
TEST(Norm, Avx2Bf16RowsMatchTheGenericLoop) {
  if (!internal::DetectedConverterIsa().avx2) GTEST_SKIP() << "this CPU has no AVX2: the AVX2 rows never run";
  for (const auto& [c, rows] : {std::pair<int64_t, int64_t>{777, 4096}, {128, 4097}, {768, 1024}, {15, 4099},
                                {33, 4097}, {256, 4097}}) {
    std::vector<std::vector<std::vector<uint8_t>>> results;
    for (const bool avx2 : {false, true}) {
      internal::SetConverterIsaForTesting({.avx2 = avx2});
      results.push_back(NormOutputBytes(rows, c, DType::kBFloat16));
    }
    internal::ForceScalarConvertersForTesting(false);
    ASSERT_EQ(results[0].size(), kNormOutputNames.size());
    for (size_t k = 0; k < kNormOutputNames.size(); ++k) {
      int64_t differing_bytes = 0;
      for (size_t e = 0; e < results[0][k].size(); ++e) differing_bytes += results[0][k][e] != results[1][k][e];
      EXPECT_EQ(differing_bytes, 0) << kNormOutputNames[k] << ", width " << c << ", rows " << rows;
    }
  }
}

// Rows holding a NaN, an infinity or values whose square overflows f32,
// beside finite rows, through every forward path (generic loops in both ISA
// builds, the AVX-512 BF16 short rows and their sixteen-row batches): where
// the float64 reference is NaN the output is NaN, its other values agree
// with the reference, and the paths agree bit for bit on every non-NaN
// value (a NaN's sign and payload may follow its path's operand order).
TEST(Norm, NonFiniteRowsGiveTheSameResultOnEveryPath) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const int64_t c : {int64_t{128}, int64_t{777}}) {
      const int64_t rows = 37;
      std::vector<double> xv = RandomTensor({rows, c}, 91, dtype, -3, 3).ToDoubles();
      xv[3 * c + 5] = nan;
      xv[20 * c] = inf;
      xv[33 * c + c - 1] = -inf;
      // Row 17's squares overflow f32: its variance is infinite there (rstd 0,
      // y = b) where the float64 reference's is not, so it is held only to
      // the paths agreeing.
      const int64_t overflow_row = 17;
      for (int64_t j = 0; j < c; ++j) xv[overflow_row * c + j] = (j % 2 ? 1 : -1) * 2e38;
      const Tensor x = FromVector(xv, {rows, c}, {.dtype = dtype});
      const Tensor w = RandomTensor({c}, 92, dtype, 0.5, 1.5), b = RandomTensor({c}, 93, dtype);
      const std::vector<double> dy(xv.size(), 0.0);
      std::vector<std::vector<double>> refs;
      for (const bool center : {true, false})
        refs.push_back(RefNorm(center, x.ToDoubles(), w.ToDoubles(), center ? b.ToDoubles() : std::vector<double>{},
                               dy, c, 1e-5)
                           .y);
      const internal::ConverterIsa cpu = internal::DetectedConverterIsa();
      std::vector<std::vector<double>> first;
      for (const internal::ConverterIsa isa : {internal::ConverterIsa{false, false, false, true},
                                               internal::ConverterIsa{cpu.avx512, cpu.vbmi, false, true},
                                               internal::ConverterIsa{cpu.avx512, cpu.vbmi, cpu.bf16, true}}) {
        internal::SetConverterIsaForTesting(isa);
        const std::vector<std::vector<double>> outs = {LayerNorm(x, w, b).ToDoubles(), RmsNorm(x, w).ToDoubles()};
        for (size_t k = 0; k < outs.size(); ++k) {
          const std::string what = std::string(Name(dtype)) + (k == 0 ? " LayerNorm" : " RMSNorm") + ", width " +
                                   std::to_string(c) + ", isa " + std::to_string(isa.avx512) +
                                   std::to_string(isa.bf16);
          for (size_t i = 0; i < outs[k].size(); ++i) {
            if (static_cast<int64_t>(i) / c == overflow_row) continue;
            const double got = outs[k][i], want = refs[k][i];
            if (std::isnan(want)) {
              ASSERT_TRUE(std::isnan(got)) << what << ", element " << i << ": " << got << ", reference NaN";
            } else {
              ASSERT_FALSE(std::isnan(got)) << what << ", element " << i << ": NaN, reference " << want;
              ASSERT_NEAR(got, want, 1e-2 + 1e-2 * std::abs(want)) << what << ", element " << i;
            }
          }
        }
        if (first.empty()) {
          first = outs;
          continue;
        }
        for (size_t k = 0; k < outs.size(); ++k)
          for (size_t i = 0; i < outs[k].size(); ++i)
            if (!std::isnan(outs[k][i]))
              ASSERT_EQ(outs[k][i], first[k][i]) << Name(dtype) << " output " << k << ", width " << c
                                                 << ", element " << i << ", isa " << isa.avx512 << isa.bf16;
      }
      internal::ForceScalarConvertersForTesting(false);
    }
  }
}

// NOTE [paired row statistics]: the forward takes rows two at a time; a row
// computed alone (a batch of one) must give the bits it gets inside a batch,
// whichever row it pairs with there, in both ISA builds: LayerNorm, RMSNorm,
// AddLayerNorm and LayerNormFp8 (its codes and per-row statistics), with a
// ragged width and an odd row count.
TEST(Norm, RowsGiveTheSameBitsAloneAsInABatch) {
  // A batch of 16 rows and three more (NOTE [row statistics sixteen rows at
  // a time]); at 7 rows NOTE [unfused row statistics] went unseen.
  const int64_t rows = 19;
  for (const auto& [dtype, c] : {std::pair<DType, int64_t>{DType::kFloat32, 777}, {DType::kBFloat16, 777},
                                 {DType::kFloat64, 777}, {DType::kBFloat16, 128}, {DType::kBFloat16, 256},
                                 {DType::kFloat32, 128}}) {
    for (bool avx512 : {false, true}) {
      internal::SetConverterIsaForTesting({avx512, avx512, avx512, true});
      const Tensor x = RandomTensor({rows, c}, 71, dtype, -3, 3), r = RandomTensor({rows, c}, 72, dtype);
      const Tensor w = RandomTensor({c}, 73, dtype, 0.5, 1.5), b = RandomTensor({c}, 74, dtype);
      const Tensor scale = FromVector(std::vector<double>{9.0}, {1}, {.dtype = DType::kFloat32});
      // Every output of the forwards on `xs` rows [i, i + n) (x, the residual r).
      const auto outputs = [&](int64_t i, int64_t n) {
        const Tensor xs = x.Narrow(0, i, n).Contiguous(), rs = r.Narrow(0, i, n).Contiguous();
        const AddLayerNormResult o = AddLayerNorm(xs, rs, w, b);
        TensorList out{LayerNorm(xs, w, b), RmsNorm(xs, w), o.sum, o.out};
        if (dtype != DType::kFloat64) out.push_back(LayerNormFp8(xs, w, b, DType::kFloat8E4M3, scale));
        return out;
      };
      const TensorList batch = outputs(0, rows);
      for (int64_t i = 0; i < rows; ++i) {
        const TensorList alone = outputs(i, 1);
        for (size_t k = 0; k < alone.size(); ++k)
          EXPECT_EQ(::octet::testing::Bytes(alone[k]), ::octet::testing::Bytes(batch[k].Narrow(0, i, 1).Contiguous()))
              << Name(dtype) << (avx512 ? " avx512" : " baseline") << ", output " << k << ", row " << i;
      }
    }
    internal::ForceScalarConvertersForTesting(false);
  }
}

TEST(Norm, OnlyRequestedGradientsAreComputed) {
  const Tensor x = RandomTensor({5, 8}, 28, DType::kFloat64, -2, 2);
  Tensor w = RandomTensor({8}, 29, DType::kFloat64, 0.5, 1.5).requires_grad_();
  const Tensor b = RandomTensor({8}, 30, DType::kFloat64);
  const Tensor dy = RandomTensor({5, 8}, 31, DType::kFloat64);
  LayerNorm(x, w, b).Backward(dy);
  const NormRef ref = RefNorm(true, x.ToDoubles(), w.ToDoubles(), b.ToDoubles(), dy.ToDoubles(), 8, 1e-5);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(AllClose(w.grad(), ref.dw, 1e-12, 1e-12));
}

TEST(Norm, EmptyBatchGivesZeroParameterGradients) {
  Tensor x = Zeros({0, 4}, {.dtype = DType::kFloat64}).requires_grad_();
  Tensor w = Ones({4}, {.dtype = DType::kFloat64}).requires_grad_();
  Tensor b = Zeros({4}, {.dtype = DType::kFloat64}).requires_grad_();
  Tensor y = LayerNorm(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  y.Backward(Zeros({0, 4}, {.dtype = DType::kFloat64}));
  EXPECT_TRUE(AllClose(w.grad(), std::vector<double>(4, 0.0), 0, 0));
  EXPECT_TRUE(AllClose(b.grad(), std::vector<double>(4, 0.0), 0, 0));
}

// ---- AddLayerNorm ----------------------------------------------------------

TEST(AddLayerNorm, OutputsEqualAddThenLayerNormBitwise) {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    const Tensor x = RandomTensor({3, 5, 48}, 40, d, -2, 2), r = RandomTensor({3, 5, 48}, 41, d, -2, 2);
    const Tensor w = RandomTensor({48}, 42, d, 0.5, 1.5), b = RandomTensor({48}, 43, d);
    const AddLayerNormResult res = AddLayerNorm(x, r, w, b);
    const Tensor h = x + r;
    EXPECT_TRUE(AllClose(res.sum, h, 0, 0)) << Name(d);
    EXPECT_TRUE(AllClose(res.out, LayerNorm(h, w, b), 0, 0)) << Name(d);
  }
}

TEST(AddLayerNorm, PassesGradcheckThroughBothOutputs) {
  Tensor x = RandomTensor({4, 6}, 44, DType::kFloat64, -2, 2).requires_grad_();
  Tensor r = RandomTensor({4, 6}, 45, DType::kFloat64, -2, 2).requires_grad_();
  Tensor w = RandomTensor({6}, 46, DType::kFloat64, 0.5, 1.5).requires_grad_();
  Tensor b = RandomTensor({6}, 47, DType::kFloat64).requires_grad_();
  // out + sum^2: both outputs carry a gradient, dsum depends on sum.
  GradcheckResult res = Gradcheck(
      [](const TensorList& in) {
        const AddLayerNormResult o = AddLayerNorm(in[0], in[1], in[2], in[3]);
        return o.out + o.sum * o.sum;
      },
      {x, r, w, b});
  EXPECT_TRUE(res.ok) << res.message;
  // Only the normalised output used (dsum arrives as zeros), residual transposed.
  Tensor rt = RandomTensor({6, 4}, 48, DType::kFloat64, -2, 2).requires_grad_();
  res = Gradcheck([](const TensorList& in) { return AddLayerNorm(in[0], in[1].T(), in[2], Tensor()).out; },
                  {x, rt, w});
  EXPECT_TRUE(res.ok) << "out only: " << res.message;
}

TEST(AddLayerNorm, GradientsMatchTheUnfusedOpsInFloat32) {
  const Tensor x0 = RandomTensor({64, 96}, 49, DType::kFloat32, -2, 2), r0 = RandomTensor({64, 96}, 50, DType::kFloat32);
  const Tensor dy = RandomTensor({64, 96}, 51, DType::kFloat32);
  const Tensor dsum = RandomTensor({64, 96}, 52, DType::kFloat32);
  auto run = [&](bool fused) {
    Tensor x = x0.Clone().requires_grad_(), r = r0.Clone().requires_grad_();
    Tensor w = Ones({96}).requires_grad_(), b = Zeros({96}).requires_grad_();
    Tensor h, y;
    if (fused) {
      const AddLayerNormResult o = AddLayerNorm(x, r, w, b);
      h = o.sum;
      y = o.out;
    } else {
      h = x + r;
      y = LayerNorm(h, w, b);
    }
    Sum(y * dy + h * dsum).Backward();
    return TensorList{x.grad(), r.grad(), w.grad(), b.grad()};
  };
  const TensorList fused = run(true), plain = run(false);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(AllClose(fused[i], plain[i], 1e-5, 1e-5)) << i;
}

// ---- errors ----------------------------------------------------------------

TEST(NormErrors, BadArgumentsNameTheOpAndTheTensors) {
  const Tensor x = RandomTensor({4, 8}, 32, DType::kFloat32);
  const Tensor w = Ones({8});
  std::string e = ErrorOf([&] { LayerNorm(x, Ones({7}), Tensor()); });
  EXPECT_NE(e.find("layer_norm: weight must have shape [C] = [8]"), std::string::npos) << e;
  EXPECT_NE(e.find("float32[7]"), std::string::npos) << e;
  e = ErrorOf([&] { LayerNorm(x, w, Zeros({4, 8})); });
  EXPECT_NE(e.find("layer_norm: bias must have shape [C] = [8]"), std::string::npos) << e;
  e = ErrorOf([&] { RmsNorm(x, Ones({8}, {.dtype = DType::kFloat64})); });
  EXPECT_NE(e.find("rms_norm: dtype mismatch"), std::string::npos) << e;
  e = ErrorOf([&] { LayerNorm(x.To(DType::kFloat8E4M3), w, Tensor()); });
  EXPECT_NE(e.find("layer_norm: argument 'x' is fp8_e4m3[4, 8]"), std::string::npos) << e;
  EXPECT_NE(e.find("FP8 inputs are rejected"), std::string::npos) << e;
  e = ErrorOf([&] { RmsNorm(x, w.To(DType::kFloat8E5M2)); });
  EXPECT_NE(e.find("rms_norm: argument 'weight' is fp8_e5m2[8]"), std::string::npos) << e;
  e = ErrorOf([&] { LayerNorm(Zeros({4, 8}, {.dtype = DType::kInt32}), Tensor(), Tensor()); });
  EXPECT_NE(e.find("layer_norm: argument 'x' is int32[4, 8]"), std::string::npos) << e;
  e = ErrorOf([&] { LayerNorm(Scalar(1.0), Tensor(), Tensor()); });
  EXPECT_NE(e.find("layer_norm: x must have at least one dim"), std::string::npos) << e;
  e = ErrorOf([&] { RmsNorm(Zeros({3, 0}), Tensor()); });
  EXPECT_NE(e.find("rms_norm: the normalised (last) dim of x is empty"), std::string::npos) << e;
  e = ErrorOf([&] { LayerNorm(x, w, Tensor(), -1.0); });
  EXPECT_NE(e.find("layer_norm: eps must be finite and >= 0, got -1"), std::string::npos) << e;
  e = ErrorOf([&] { RmsNorm(x, w, INFINITY); });  // would give weight * 0 everywhere
  EXPECT_NE(e.find("rms_norm: eps must be finite and >= 0, got inf"), std::string::npos) << e;
  e = ErrorOf([&] { AddLayerNorm(x, Zeros({8}), w, Tensor()); });
  EXPECT_NE(e.find("add_layer_norm: residual float32[8] must have the shape of x float32[4, 8]"), std::string::npos)
      << e;
  e = ErrorOf([&] { AddLayerNorm(x, x.To(DType::kBFloat16), w, Tensor()); });
  EXPECT_NE(e.find("add_layer_norm: dtype mismatch"), std::string::npos) << e;
  e = ErrorOf([&] { AddLayerNorm(x, x.To(DType::kFloat8E4M3), w, Tensor()); });
  EXPECT_NE(e.find("add_layer_norm: argument 'residual' is fp8_e4m3[4, 8]"), std::string::npos) << e;
}

}  // namespace
}  // namespace octet
