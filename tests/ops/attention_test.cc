// Causal attention: forward, log-sum-exp and gradients against float64
// references written with plain loops (explicit softmax over each causal
// row), gradcheck, every instruction-set path, strided (permuted-view) inputs,
// determinism across thread counts and backward paths, the fused-projection
// layout (CausalAttentionQkv) and strided outputs, errors. The FP8 op:
// attention_fp8_qkv_test.cc.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <octet/autograd/gradcheck.h>
#include <octet/autograd/grad_mode.h>
#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>
#include <octet/core/device_control.h>
#include <octet/ops/attention.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cast.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>
#include "tests/ops/attention_reference.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::AttentionRef;
using ::octet::testing::AttentionReference;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

// Output tolerance per dtype (relative and absolute), stated in one place:
// f64 is exact up to summation order; f32 computes in f32 with a polynomial
// exp2 (rel. error < 1e-7); bf16/f16 inputs are exact in f32 and the error is
// the rounding of the output (bf16: 8 significant bits, f16: 11) plus f32.
double ForwardTol(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 1e-12;
    case DType::kFloat32: return 5e-6;
    case DType::kBFloat16: return 5e-3;  // half an ulp of bf16 at 1 is 2e-3
    default: return 1e-3;
  }
}
// Gradients sum up to T terms, and for bf16/f16 D_i = rowsum(dO o O) uses
// the rounded output.
double BackwardTol(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 1e-11;
    case DType::kFloat32: return 2e-5;
    case DType::kBFloat16: return 1.5e-2;
    default: return 2e-3;
  }
}

struct Inputs {
  Tensor q, k, v;
};

Inputs MakeInputs(const Shape& shape, DType dtype, uint64_t seed, double range = 1.0) {
  return {RandomTensor(shape, seed, dtype, -range, range), RandomTensor(shape, seed + 1, dtype, -range, range),
          RandomTensor(shape, seed + 2, dtype, -range, range)};
}

double DefaultScale(const Shape& shape) { return 1.0 / std::sqrt(static_cast<double>(shape[3])); }

// Shapes with T below, at and across the 64-row tile, T = 1, odd D, D past 64.
const std::vector<Shape>& ForwardShapes() {
  static const std::vector<Shape> shapes = {{1, 1, 1, 1},  {1, 1, 1, 64}, {2, 3, 17, 5},   {1, 2, 64, 64},
                                            {1, 1, 65, 8}, {2, 1, 130, 33}, {1, 1, 200, 64}, {1, 1, 70, 80}};
  return shapes;
}

class AttentionDtypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(AttentionDtypeTest, ForwardMatchesF64Reference) {
  const DType dtype = GetParam();
  for (const Shape& shape : ForwardShapes()) {
    const Inputs in = MakeInputs(shape, dtype, 10);
    const double scale = DefaultScale(shape);
    const AttentionRef ref = AttentionReference(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), shape, scale);
    const Tensor out = CausalAttention(in.q, in.k, in.v);
    ASSERT_EQ(out.shape(), shape);
    ASSERT_EQ(out.dtype(), dtype);
    ASSERT_TRUE(out.is_contiguous());
    const double tol = ForwardTol(dtype);
    EXPECT_TRUE(AllClose(out, ref.out, tol, tol)) << ShapeStr(shape) << " " << Name(dtype);

    // The saved log-sum-exp, through the raw kernel.
    Tensor out2 = EmptyLike(out);
    Tensor lse = Empty({shape[0], shape[1], shape[2]}, {.dtype = AttentionLseDtype(dtype)});
    causal_attention_fwd(kCPU)(in.q, in.k, in.v, scale, out2, lse);
    EXPECT_EQ(lse.dtype(), dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32);
    const double lse_tol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(AllClose(lse, ref.lse, lse_tol, lse_tol)) << ShapeStr(shape) << " " << Name(dtype);
  }
}

TEST_P(AttentionDtypeTest, BackwardMatchesF64Reference) {
  const DType dtype = GetParam();
  for (const Shape& shape : {Shape{1, 1, 1, 3}, Shape{2, 3, 17, 5}, Shape{1, 2, 130, 33}, Shape{2, 1, 70, 64}}) {
    const Inputs in = MakeInputs(shape, dtype, 20);
    const Tensor dout = RandomTensor(shape, 99, dtype);
    const std::vector<double> dov = dout.ToDoubles();
    const double scale = 0.3;
    const AttentionRef ref = AttentionReference(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), shape, scale, &dov);
    Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(),
           v = in.v.detach().requires_grad_();
    CausalAttention(q, k, v, scale).Backward(dout);
    const double tol = BackwardTol(dtype);
    EXPECT_TRUE(AllClose(q.grad(), ref.dq, tol, tol)) << "dq " << ShapeStr(shape) << " " << Name(dtype);
    EXPECT_TRUE(AllClose(k.grad(), ref.dk, tol, tol)) << "dk " << ShapeStr(shape) << " " << Name(dtype);
    EXPECT_TRUE(AllClose(v.grad(), ref.dv, tol, tol)) << "dv " << ShapeStr(shape) << " " << Name(dtype);
    EXPECT_EQ(q.grad().dtype(), dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, AttentionDtypeTest,
                         ::testing::Values(DType::kFloat64, DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(Name(info.param)); });

// Every instruction-set path this CPU has (generic, AVX2, AVX-512) gives the
// reference values, forward and backward, in f32 and f64.
TEST(Attention, EveryIsaMatchesReference) {
  const auto detected = internal::DetectedAttentionIsa();
  for (int isa = 0; isa <= static_cast<int>(detected); ++isa) {
    internal::SetAttentionIsaForTesting(static_cast<internal::AttentionIsa>(isa));
    ASSERT_EQ(static_cast<int>(internal::ActiveAttentionIsa()), isa);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (const Shape& shape : {Shape{1, 2, 67, 7}, Shape{1, 1, 130, 64}, Shape{2, 1, 9, 48}}) {
        const Inputs in = MakeInputs(shape, dtype, 30);
        const Tensor dout = RandomTensor(shape, 31, dtype);
        const std::vector<double> dov = dout.ToDoubles();
        const AttentionRef ref =
            AttentionReference(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), shape, DefaultScale(shape), &dov);
        Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(),
               v = in.v.detach().requires_grad_();
        const Tensor out = CausalAttention(q, k, v);
        out.Backward(dout);
        const std::string what = std::string(internal::Name(static_cast<internal::AttentionIsa>(isa))) + " " +
                                 Name(dtype) + " " + ShapeStr(shape);
        EXPECT_TRUE(AllClose(out, ref.out, ForwardTol(dtype), ForwardTol(dtype))) << what;
        EXPECT_TRUE(AllClose(q.grad(), ref.dq, BackwardTol(dtype), BackwardTol(dtype))) << what;
        EXPECT_TRUE(AllClose(k.grad(), ref.dk, BackwardTol(dtype), BackwardTol(dtype))) << what;
        EXPECT_TRUE(AllClose(v.grad(), ref.dv, BackwardTol(dtype), BackwardTol(dtype))) << what;
      }
    }
  }
  internal::SetAttentionIsaForTesting(std::nullopt);
}

// NOTE [bf16 attention tiles]: bfloat16 attention on BF16 dot products, and
// with its products on AMX tiles (NOTE [amx attention products]), where the
// CPU has them, against the float64 reference: T = 1, odd T and D, T across
// tiles (and partial 16-row blocks), D past 64 (two column blocks), both
// forward work decompositions (4 heads and 1 head over two threads). P and
// dS are rounded to bf16 there, so within the bf16 tolerances; and the
// results differ from the f32 tiles' (the path really ran).
class Bf16TilesTest : public ::testing::TestWithParam<internal::AttentionIsa> {};

TEST_P(Bf16TilesTest, MatchReference) {
  const internal::AttentionIsa isa = GetParam();
  if (internal::DetectedAttentionIsa() < isa)
    GTEST_SKIP() << "this CPU has no " << internal::Name(isa) << " attention (it has "
                 << internal::Name(internal::DetectedAttentionIsa()) << ")";
  double max_diff = 0.0;
  std::vector<Shape> shapes = ForwardShapes();
  shapes.push_back({1, 4, 200, 64});
  shapes.push_back({2, 3, 75, 96});
  for (const Shape& shape : shapes) {
    const Inputs in = MakeInputs(shape, DType::kBFloat16, 90);
    const Tensor dout = RandomTensor(shape, 91, DType::kBFloat16);
    const std::vector<double> dov = dout.ToDoubles();
    const AttentionRef ref =
        AttentionReference(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), shape, DefaultScale(shape), &dov);
    internal::SetAttentionIsaForTesting(isa);
    ASSERT_EQ(internal::ActiveAttentionIsa(), isa);
    Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(),
           v = in.v.detach().requires_grad_();
    const Tensor out = CausalAttention(q, k, v);
    out.Backward(dout);
    const std::string what = ShapeStr(shape);
    const double ft = ForwardTol(DType::kBFloat16), bt = BackwardTol(DType::kBFloat16);
    EXPECT_TRUE(AllClose(out, ref.out, ft, ft)) << what;
    EXPECT_TRUE(AllClose(q.grad(), ref.dq, bt, bt)) << "dq " << what;
    EXPECT_TRUE(AllClose(k.grad(), ref.dk, bt, bt)) << "dk " << what;
    EXPECT_TRUE(AllClose(v.grad(), ref.dv, bt, bt)) << "dv " << what;
    internal::SetAttentionIsaForTesting(internal::AttentionIsa::kAvx512);
    const std::vector<double> got = out.ToDoubles();
    const std::vector<double> f32_tiles = CausalAttention(in.q, in.k, in.v).ToDoubles();
    for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::fabs(got[i] - f32_tiles[i]));
  }
  internal::SetAttentionIsaForTesting(std::nullopt);
  EXPECT_GT(max_diff, 0.0) << "the " << internal::Name(isa)
                           << " tiles gave the f32 tiles' bits everywhere: did they run?";
  EXPECT_LT(max_diff, 2 * ForwardTol(DType::kBFloat16));
}

// The AMX products agree with the dot products they replace up to the order
// of the f32 sums: forward and gradients, bf16 and FP8 inputs.
TEST(Attention, AmxProductsMatchDotProducts) {
  if (internal::DetectedAttentionIsa() < internal::AttentionIsa::kAmxBf16) GTEST_SKIP() << "this CPU has no AMX";
  for (const Shape& shape : {Shape{2, 2, 130, 64}, Shape{1, 3, 47, 40}, Shape{1, 1, 64, 32}}) {
    const Inputs in = MakeInputs(shape, DType::kBFloat16, 70);
    const Tensor dout = RandomTensor(shape, 71, DType::kBFloat16);
    std::vector<std::vector<double>> results[2];
    for (int amx = 0; amx < 2; ++amx) {
      internal::SetAttentionIsaForTesting(amx ? internal::AttentionIsa::kAmxBf16 : internal::AttentionIsa::kAvx512Bf16);
      Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(),
             v = in.v.detach().requires_grad_();
      const Tensor out = CausalAttention(q, k, v);
      out.Backward(dout);
      results[amx] = {out.ToDoubles(), q.grad().ToDoubles(), k.grad().ToDoubles(), v.grad().ToDoubles()};
      // FP8 operands (O1's attention): codes read through the bf16 table.
      const Tensor qkv = RandomTensor({shape[0], shape[2], 3 * shape[1] * shape[3]}, 72, DType::kFloat32);
      const Tensor codes = Quantize(qkv, DType::kFloat8E4M3, 64.0f);
      results[amx].push_back(CausalAttentionQkvFp8(codes, shape[1], DType::kBFloat16).ToDoubles());
    }
    internal::SetAttentionIsaForTesting(std::nullopt);
    static const char* const kWhat[] = {"out", "dq", "dk", "dv", "fp8 out"};
    for (size_t i = 0; i < results[0].size(); ++i) {
      double worst = 0.0, scale = 0.0;
      for (size_t j = 0; j < results[0][i].size(); ++j) {
        worst = std::max(worst, std::fabs(results[0][i][j] - results[1][i][j]));
        scale = std::max(scale, std::fabs(results[0][i][j]));
      }
      // bf16 outputs: one or two roundings apart where the f32 sums differ.
      EXPECT_LE(worst, 2.0 * std::ldexp(scale, -8)) << kWhat[i] << " " << ShapeStr(shape);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, Bf16TilesTest,
                         ::testing::Values(internal::AttentionIsa::kAvx512Bf16, internal::AttentionIsa::kAmxBf16),
                         [](const auto& info) { return std::string(internal::Name(info.param)); });

// NOTE [CPU GEMM path]: bfloat16 attention takes BF16 dot products where the
// path is kBf16Dot and the dot product wins (a forced path counts as a win),
// and AMX tiles wherever the path is kBf16Dot and the CPU has them.
TEST(Attention, Bf16DotTilesFollowTheGemmPath) {
  if (internal::DetectedAttentionIsa() < internal::AttentionIsa::kAvx512Bf16)
    GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  if (!internal::ActiveConverterIsa().bf16)
    GTEST_SKIP() << "AVX-512 BF16 kernels turned off (OCTET_DISABLE_AVX512 or OCTET_DISABLE_AVX512_BF16)";
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kFp32Fma);
  EXPECT_EQ(internal::ActiveAttentionIsa(), internal::AttentionIsa::kAvx512);
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kBf16Dot);
  EXPECT_EQ(internal::ActiveAttentionIsa(), internal::DetectedAttentionIsa());
  internal::SetCpuGemmPathForTesting(std::nullopt);
}

// OCTET_DISABLE_AVX512_BF16 keeps attention from the BF16 instructions
// (dot products and AMX) as it keeps the converters; OCTET_DISABLE_AVX512
// from AVX-512 altogether.
TEST(Attention, IsaFollowsTheConvertersSwitches) {
  if (internal::DetectedAttentionIsa() < internal::AttentionIsa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kBf16Dot);
  internal::SetConverterIsaForTesting({.avx512 = true, .vbmi = true, .bf16 = false, .avx2 = true});
  EXPECT_EQ(internal::ActiveAttentionIsa(), internal::AttentionIsa::kAvx512);
  internal::SetConverterIsaForTesting({.avx2 = true});
  EXPECT_EQ(internal::ActiveAttentionIsa(), internal::AttentionIsa::kAvx2);
  internal::ForceScalarConvertersForTesting(false);
  internal::SetCpuGemmPathForTesting(std::nullopt);
}

TEST(Attention, GradcheckF64) {
  for (const Shape& shape : {Shape{1, 1, 1, 1}, Shape{1, 2, 5, 3}, Shape{2, 1, 7, 4}, Shape{1, 1, 66, 2}}) {
    Inputs in = MakeInputs(shape, DType::kFloat64, 40);
    TensorList inputs = {in.q.requires_grad_(), in.k.requires_grad_(), in.v.requires_grad_()};
    GradcheckResult r = Gradcheck(
        [](const TensorList& x) { return CausalAttention(x[0], x[1], x[2], 0.7); }, inputs);
    EXPECT_TRUE(r.ok) << ShapeStr(shape) << ": " << r.message;
  }
}

// The q/k/v slices of a fused (B,T,3,H,D) projection, permuted to
// (3,B,H,T,D): same outputs and gradients as contiguous copies.
TEST(Attention, FusedQkvViewsMatchContiguousInputs) {
  const int64_t b = 2, t = 70, h = 3, d = 16;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    Tensor qkv = RandomTensor({b, t, 3 * h * d}, 50, dtype).requires_grad_();
    const Tensor qkv5 = qkv.View({b, t, 3, h, d}).Permute({2, 0, 3, 1, 4});  // (3,B,H,T,D)
    const Tensor q = qkv5.Select(0, 0), k = qkv5.Select(0, 1), v = qkv5.Select(0, 2);
    ASSERT_FALSE(q.is_contiguous());
    const Tensor dout = RandomTensor({b, h, t, d}, 51, dtype);
    const Tensor out = CausalAttention(q, k, v);
    out.Backward(dout);

    Tensor qc = q.detach().Contiguous().requires_grad_(), kc = k.detach().Contiguous().requires_grad_(),
           vc = v.detach().Contiguous().requires_grad_();
    const Tensor outc = CausalAttention(qc, kc, vc);
    outc.Backward(dout);
    EXPECT_TRUE(AllClose(out, outc, 1e-6, 1e-6)) << Name(dtype);
    const Tensor g5 = qkv.grad().View({b, t, 3, h, d}).Permute({2, 0, 3, 1, 4});
    EXPECT_TRUE(AllClose(g5.Select(0, 0), qc.grad(), 1e-6, 1e-6)) << "dq " << Name(dtype);
    EXPECT_TRUE(AllClose(g5.Select(0, 1), kc.grad(), 1e-6, 1e-6)) << "dk " << Name(dtype);
    EXPECT_TRUE(AllClose(g5.Select(0, 2), vc.grad(), 1e-6, 1e-6)) << "dv " << Name(dtype);
  }
}

// Head dim not the fastest dim (transposed views), and an output gradient
// that is a broadcast (stride 0) view.
TEST(Attention, TransposedAndBroadcastOperands) {
  const Shape shape{1, 2, 75, 12};
  // f32, and bf16 (BF16 dot-product tiles where the CPU has them: their
  // packers' strided-column path).
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor qt = RandomTensor({1, 2, 12, 75}, 60, dtype);
    const Tensor kt = RandomTensor({1, 2, 12, 75}, 61, dtype);
    const Tensor v = RandomTensor(shape, 62, dtype);
    const Tensor q = qt.Transpose(2, 3), k = kt.Transpose(2, 3);
    ASSERT_NE(q.stride(3), 1);
    const Tensor dout = RandomTensor({1, 1, 1, 12}, 63, dtype).Expand(shape);
    const std::vector<double> dov = dout.ToDoubles();
    const AttentionRef ref = AttentionReference(q.ToDoubles(), k.ToDoubles(), v.ToDoubles(), shape, 0.5, &dov);
    Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
    const Tensor out = CausalAttention(qg, kg, vg, 0.5);
    out.Backward(dout);
    const double ft = dtype == DType::kFloat32 ? 2e-5 : ForwardTol(dtype);
    const double bt = dtype == DType::kFloat32 ? 1e-4 : BackwardTol(dtype);
    EXPECT_TRUE(AllClose(out, ref.out, ft, ft)) << Name(dtype);
    EXPECT_TRUE(AllClose(qg.grad(), ref.dq, bt, bt)) << Name(dtype);
    EXPECT_TRUE(AllClose(kg.grad(), ref.dk, bt, bt)) << Name(dtype);
    EXPECT_TRUE(AllClose(vg.grad(), ref.dv, bt, bt)) << Name(dtype);
  }
}

std::vector<TensorList> Grads(const Inputs& in, const Tensor& dout, bool gq, bool gk, bool gv) {
  Tensor q = in.q.detach().requires_grad_(gq), k = in.k.detach().requires_grad_(gk),
         v = in.v.detach().requires_grad_(gv);
  CausalAttention(q, k, v).Backward(dout);
  return {{q.grad(), k.grad(), v.grad()}};
}

void ExpectSameBits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  EXPECT_EQ(a.ToDoubles(), b.ToDoubles()) << what;
}

// NOTE [attention in the qkv layout]: CausalAttentionQkv writes its (B,T,C)
// output and the (B,T,3C) gradient in place through strided (B,H,T,D)
// views; bit for bit the chain of views, CausalAttention and the merge of
// the heads, on both backward paths (few heads: per tile; many: per head),
// for every dtype, with a contiguous and a broadcast output gradient.
TEST(Attention, QkvLayoutEqualsTheViewChainBitForBit) {
  struct Case {
    int64_t b, t, h, d;
  };
  for (const Case c : {Case{2, 70, 3, 16}, Case{4, 33, 4, 8}, Case{1, 1, 1, 1}, Case{1, 130, 2, 33}}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
      for (bool broadcast_dout : {false, true}) {
        const int64_t C = c.h * c.d;
        const std::string what = absl::StrCat(Name(dtype), " B=", c.b, " T=", c.t, " H=", c.h, " D=", c.d,
                                              broadcast_dout ? " broadcast dout" : "");
        const Tensor x = RandomTensor({c.b, c.t, 3 * C}, 70, dtype);
        const Tensor dout = broadcast_dout ? RandomTensor({1, 1, C}, 71, dtype).Expand({c.b, c.t, C})
                                           : RandomTensor({c.b, c.t, C}, 71, dtype);
        Tensor fused_in = x.detach().requires_grad_();
        const Tensor fused = CausalAttentionQkv(fused_in, c.h);
        ASSERT_EQ(fused.shape(), (Shape{c.b, c.t, C})) << what;
        fused.Backward(dout);

        Tensor chain_in = x.detach().requires_grad_();
        const Tensor heads = chain_in.View({c.b, c.t, 3, c.h, c.d}).Permute({2, 0, 3, 1, 4});
        const Tensor chain = CausalAttention(heads.Select(0, 0), heads.Select(0, 1), heads.Select(0, 2))
                                 .Permute({0, 2, 1, 3})
                                 .Reshape({c.b, c.t, C});
        chain.Backward(dout);
        ExpectSameBits(fused, chain, "out " + what);
        ExpectSameBits(fused_in.grad(), chain_in.grad(), "dqkv " + what);
      }
    }
  }
}

// The kernels' outputs may have any strides (ops/attention_kernels.h), the
// head dim's included: out, dq, dk, dv written through transposed views give
// the bits of contiguous ones, on the per-tile and the per-head backward path.
TEST(Attention, KernelsWriteOutputsWithAnyStrides) {
  for (const Shape& shape : {Shape{1, 2, 75, 12}, Shape{2, 4, 40, 8}}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      const std::string what = ShapeStr(shape) + " " + Name(dtype);
      const Inputs in = MakeInputs(shape, dtype, 80);
      const Tensor dout = RandomTensor(shape, 83, dtype);
      const Shape lse_shape{shape[0], shape[1], shape[2]};
      const TensorOptions lse_options{.dtype = AttentionLseDtype(dtype)};
      // (B,H,D,T) buffers seen as (B,H,T,D): stride 1 along T, T along D.
      auto transposed = [&] { return Empty({shape[0], shape[1], shape[3], shape[2]}, {.dtype = dtype}).Transpose(2, 3); };

      Tensor out = Empty(shape, {.dtype = dtype}), lse = Empty(lse_shape, lse_options);
      causal_attention_fwd(kCPU)(in.q, in.k, in.v, 0.4, out, lse);
      Tensor out_t = transposed(), lse_t = Empty(lse_shape, lse_options);
      ASSERT_NE(out_t.stride(3), 1);
      causal_attention_fwd(kCPU)(in.q, in.k, in.v, 0.4, out_t, lse_t);
      ExpectSameBits(out_t, out, "out " + what);
      ExpectSameBits(lse_t, lse, "lse " + what);

      Tensor dq = Empty(shape, {.dtype = dtype}), dk = Empty(shape, {.dtype = dtype}), dv = Empty(shape, {.dtype = dtype});
      causal_attention_bwd(kCPU)(in.q, in.k, in.v, out, dout, lse, 0.4, dq, dk, dv);
      Tensor dq_t = transposed(), dk_t = transposed(), dv_t = transposed();
      causal_attention_bwd(kCPU)(in.q, in.k, in.v, out_t, dout, lse, 0.4, dq_t, dk_t, dv_t);
      ExpectSameBits(dq_t, dq, "dq " + what);
      ExpectSameBits(dk_t, dk, "dk " + what);
      ExpectSameBits(dv_t, dv, "dv " + what);
    }
  }
}

// One thread takes the one-sweep-per-head path; two threads over one head
// take the two-pass path (dK/dV over key tiles, dQ over query tiles). Both
// give the same bits, and so does asking for a single gradient.
TEST(Attention, BackwardIsDeterministicAcrossThreadsAndPaths) {
  for (const auto& [shape, dtype] : {std::pair{Shape{1, 1, 200, 64}, DType::kFloat32},
                                      std::pair{Shape{1, 3, 130, 20}, DType::kFloat32},
                                      std::pair{Shape{1, 1, 200, 64}, DType::kBFloat16},
                                      std::pair{Shape{1, 3, 130, 20}, DType::kBFloat16}}) {
    const Inputs in = MakeInputs(shape, dtype, 70);
    const Tensor dout = RandomTensor(shape, 71, dtype);
    const TensorList one = [&] {
      const cpu::ScopedOmpThreads scoped(1);
      return Grads(in, dout, true, true, true)[0];
    }();
    const cpu::ScopedOmpThreads scoped(2);
    const TensorList two = Grads(in, dout, true, true, true)[0];
    const TensorList again = Grads(in, dout, true, true, true)[0];
    const TensorList only_q = Grads(in, dout, true, false, false)[0];
    const TensorList only_k = Grads(in, dout, false, true, false)[0];
    const TensorList only_v = Grads(in, dout, false, false, true)[0];
    for (int i = 0; i < 3; ++i) {
      ExpectSameBits(one[i], two[i], "1 vs 2 threads, grad " + std::to_string(i) + " " + ShapeStr(shape));
      ExpectSameBits(two[i], again[i], "repeat, grad " + std::to_string(i));
    }
    ExpectSameBits(only_q[0], one[0], "dq alone");
    ExpectSameBits(only_k[1], one[1], "dk alone");
    ExpectSameBits(only_v[2], one[2], "dv alone");
    EXPECT_FALSE(only_q[1].defined());
    EXPECT_FALSE(only_v[0].defined());
  }
}

// NOTE [forward per head]: with 4 heads both thread counts take whole heads
// as work items; with 3 heads one thread does, two threads take (head, query
// tile) items and convert K/V tiles per item. Every way gives the same bits.
TEST(Attention, ForwardIsThreadCountInvariant) {
  for (const Shape& shape : {Shape{2, 2, 150, 32}, Shape{1, 3, 150, 32}}) {
    for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
      const Inputs in = MakeInputs(shape, dtype, 80);
      auto run = [&](int threads) {
        const cpu::ScopedOmpThreads scoped(threads);
        return CausalAttention(in.q, in.k, in.v);
      };
      const Tensor one = run(1), two = run(2);
      ExpectSameBits(one, two, "forward " + ShapeStr(shape) + " " + Name(dtype));
    }
  }
}

TEST(Attention, DefaultScaleIsInverseSqrtHeadSize) {
  const Shape shape{1, 2, 20, 9};
  const Inputs in = MakeInputs(shape, DType::kFloat64, 90);
  ExpectSameBits(CausalAttention(in.q, in.k, in.v), CausalAttention(in.q, in.k, in.v, 1.0 / 3.0), "scale");
}

// Scores of several hundred: the online softmax must not overflow, and the
// first query (one key) returns v[0] exactly in f64.
TEST(Attention, LargeScoresStayFiniteAndExact) {
  const Shape shape{1, 1, 100, 16};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Inputs in = MakeInputs(shape, dtype, 100, /*range=*/8.0);
    const AttentionRef ref = AttentionReference(in.q.ToDoubles(), in.k.ToDoubles(), in.v.ToDoubles(), shape, 1.0);
    const Tensor out = CausalAttention(in.q, in.k, in.v, 1.0);
    const double tol = dtype == DType::kFloat64 ? 1e-10 : 1e-3;
    EXPECT_TRUE(AllClose(out, ref.out, tol, tol)) << Name(dtype);
    for (int c = 0; c < 16; ++c) EXPECT_EQ(out.At({0, 0, 0, c}), in.v.At({0, 0, 0, c}));
  }
}

TEST(Attention, EmptySequence) {
  const Tensor q = Zeros({2, 3, 0, 4});
  const Tensor out = CausalAttention(q, q, q);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 0, 4}));
}

TEST(Attention, ErrorsNameOpAndShapes) {
  const Tensor q = Zeros({1, 2, 5, 4});
  // A scale that is not finite would make every output NaN (0 picks 1 / sqrt(D)).
  std::string e = ErrorOf([&] { CausalAttention(q, q, q, NAN); });
  EXPECT_NE(e.find("causal_attention: scale must be finite (0: 1 / sqrt(D)), got nan"), std::string::npos) << e;
  e = ErrorOf([&] { CausalAttentionQkv(Zeros({1, 5, 24}), 2, INFINITY); });
  EXPECT_NE(e.find("causal_attention_qkv: scale must be finite"), std::string::npos) << e;
  // Finite as a double but inf in the kernels' float32: all-NaN output before.
  e = ErrorOf([&] { CausalAttention(q, q, q, 1e300); });
  EXPECT_NE(e.find("causal_attention: scale 1e+300 is out of range: |scale| must be at most 1.70141e+38"),
            std::string::npos)
      << e;
  e = ErrorOf([&] { CausalAttentionQkvFp8(Zeros({1, 5, 24}).To(DType::kFloat8E4M3), 2, DType::kFloat32, -1e39); });
  EXPECT_NE(e.find("causal_attention_qkv_fp8: scale -1e+39 is out of range"), std::string::npos) << e;
  e = ErrorOf([&] { CausalAttention(Zeros({2, 5, 4}), q, q); });
  EXPECT_NE(e.find("causal_attention"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 4"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 5, 4]"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttention(q, Zeros({1, 2, 6, 4}), q); });
  EXPECT_NE(e.find("causal_attention"), std::string::npos) << e;
  EXPECT_NE(e.find("same shape"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 2, 6, 4]"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttention(q, q, Zeros({1, 2, 5, 4}, {.dtype = DType::kBFloat16})); });
  EXPECT_NE(e.find("causal_attention"), std::string::npos) << e;
  EXPECT_NE(e.find("dtype mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("bfloat16"), std::string::npos) << e;

  const Tensor f8 = Zeros({1, 2, 5, 4}).To(DType::kFloat8E4M3);
  e = ErrorOf([&] { CausalAttention(f8, q, q); });
  EXPECT_NE(e.find("causal_attention"), std::string::npos) << e;
  EXPECT_NE(e.find("FP8"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttention(Zeros({1, 2, 5, 4}, {.dtype = DType::kInt32}), q, q); });
  EXPECT_NE(e.find("causal_attention"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttention(Zeros({1, 2, 5, 0}), Zeros({1, 2, 5, 0}), Zeros({1, 2, 5, 0})); });
  EXPECT_NE(e.find("head size"), std::string::npos) << e;
}

TEST(Attention, QkvLayoutErrorsNameOpAndShapes) {
  std::string e = ErrorOf([&] { CausalAttentionQkv(Zeros({2, 5, 4, 3}), 1); });
  EXPECT_NE(e.find("causal_attention_qkv"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 3"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 5, 4, 3]"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttentionQkv(Zeros({2, 5, 13}), 1); });
  EXPECT_NE(e.find("causal_attention_qkv"), std::string::npos) << e;
  EXPECT_NE(e.find("(13)"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttentionQkv(Zeros({2, 5, 12}), 3); });  // C = 4 is not a multiple of 3 heads
  EXPECT_NE(e.find("n_head (3)"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttentionQkv(Zeros({2, 5, 12}), 0); });
  EXPECT_NE(e.find("n_head must be at least 1"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttentionQkv(Zeros({2, 5, 12}).To(DType::kFloat8E4M3), 2); });
  EXPECT_NE(e.find("causal_attention_qkv"), std::string::npos) << e;
  EXPECT_NE(e.find("FP8"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttentionQkv(Tensor(), 2); });
  EXPECT_NE(e.find("causal_attention_qkv"), std::string::npos) << e;

  EXPECT_EQ(CausalAttentionQkv(Zeros({2, 0, 12}), 2).shape(), (Shape{2, 0, 4}));
}

}  // namespace
}  // namespace octet
