// bf16 GELU by table (NOTE [bf16 gelu tables] in ops/cpu_gelu_path.h): for
// every one of the 65536 bf16 codes, the table path gives the computed
// kernel's bits and those of the float32 op rounded once to bf16 — forward,
// backward with dy of every kind (±0, ±inf, NaN, huge, tiny, random) and
// GeluFp8 — in both ISA builds; strided inputs fall back to the functor; and
// OCTET_CPU_GELU picks the path or names what is wrong with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <octet/core/convert_testing.h>
#include <octet/core/scaling.h>
#include <octet/ops/cast.h>
#include <octet/ops/cpu_gelu_path.h>
#include <octet/ops/cpu_gelu_path_testing.h>
#include <octet/ops/pointwise.h>
#include "tests/scoped_env.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::Bytes;
using ::octet::testing::ErrorOf;
using ::octet::testing::ScopedEnv;
using ::testing::HasSubstr;

constexpr int64_t kCodes = 65536;

// (65536) bf16: every code once, in order.
Tensor AllCodes() {
  Tensor t = Empty({kCodes}, {.dtype = DType::kBFloat16});
  bfloat16* p = t.data<bfloat16>();
  for (int64_t i = 0; i < kCodes; ++i) p[i].bits = static_cast<uint16_t>(i);
  return t;
}

// Runs fn with the path forced, then forgets the choice.
template <typename F>
auto WithPath(CpuGeluPath path, F&& fn) {
  internal::SetCpuGeluPathForTesting(path);
  auto r = fn();
  internal::SetCpuGeluPathForTesting(std::nullopt);
  return r;
}

class GeluTable : public ::testing::TestWithParam<bool> {  // param: AVX-512 builds
 protected:
  void SetUp() override {
    const bool avx512 = GetParam();
    internal::SetConverterIsaForTesting({avx512, avx512, avx512, true});
  }
  void TearDown() override {
    internal::ForceScalarConvertersForTesting(false);
    internal::SetCpuGeluPathForTesting(std::nullopt);
  }
};

TEST_P(GeluTable, ForwardOfEveryCodeIsTheComputedKernelsAndTheF32OpRounded) {
  const Tensor x = AllCodes();
  const std::vector<uint8_t> table = WithPath(CpuGeluPath::kTable, [&] { return Bytes(Gelu(x)); });
  const std::vector<uint8_t> computed = WithPath(CpuGeluPath::kCompute, [&] { return Bytes(Gelu(x)); });
  const std::vector<uint8_t> f32 = Bytes(Gelu(x.To(DType::kFloat32)).To(DType::kBFloat16));
  EXPECT_EQ(table, computed);
  EXPECT_EQ(table, f32);
}

TEST_P(GeluTable, BackwardOfEveryCodeIsTheComputedKernelsForEveryKindOfDy) {
  const Tensor x = AllCodes();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<double> dys = {1.0, -0.3, 7.5, 3e38, 1e-38, 2e-40, 0.0, -0.0, inf, -inf, NAN};
  std::vector<Tensor> dy_tensors;
  for (double d : dys) dy_tensors.push_back(Full({kCodes}, d, {.dtype = DType::kBFloat16}));
  dy_tensors.push_back(::octet::testing::RandomTensor({kCodes}, 5, DType::kBFloat16, -4.0, 4.0));
  for (size_t i = 0; i < dy_tensors.size(); ++i) {
    const Tensor& dy = dy_tensors[i];
    const auto run = [&] { return Bytes(BinaryRaw(BinaryOp::kGeluBackward, dy, x)); };
    const std::vector<uint8_t> table = WithPath(CpuGeluPath::kTable, run);
    const std::vector<uint8_t> computed = WithPath(CpuGeluPath::kCompute, run);
    const std::vector<uint8_t> f32 = Bytes(
        BinaryRaw(BinaryOp::kGeluBackward, dy.To(DType::kFloat32), x.To(DType::kFloat32)).To(DType::kBFloat16));
    EXPECT_EQ(table, computed) << "dy case " << i;
    EXPECT_EQ(table, f32) << "dy case " << i;
  }
}

TEST_P(GeluTable, GeluFp8OfEveryCodeIsTheComputedKernels) {
  const Tensor x = AllCodes();
  for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    for (double s : {1.0, 37.0, 1e-3}) {
      const Tensor scale = Full({1}, s, {.dtype = DType::kFloat32});
      const auto run = [&] {
        const Tensor q = GeluFp8(x, fp8, scale);
        std::vector<uint8_t> b = Bytes(q);
        for (const Tensor& t : {Tensor(q.scale_meta()->amax), Tensor(q.scale_meta()->scale_inv)}) {
          const std::vector<uint8_t> m = Bytes(t);
          b.insert(b.end(), m.begin(), m.end());
        }
        return b;
      };
      EXPECT_EQ(WithPath(CpuGeluPath::kTable, run), WithPath(CpuGeluPath::kCompute, run))
          << Name(fp8) << " scale " << s;
    }
  }
}

TEST_P(GeluTable, StridedInputsGiveTheContiguousBits) {
  const Tensor x = ::octet::testing::RandomTensor({64, 96}, 9, DType::kBFloat16, -6.0, 6.0);
  const Tensor dy = ::octet::testing::RandomTensor({96, 64}, 10, DType::kBFloat16, -2.0, 2.0);
  const Tensor xt = x.T();  // (96, 64), not contiguous
  const auto run = [&] {
    std::vector<uint8_t> b = Bytes(Gelu(xt));
    const std::vector<uint8_t> g = Bytes(BinaryRaw(BinaryOp::kGeluBackward, dy, xt));
    b.insert(b.end(), g.begin(), g.end());
    return b;
  };
  const auto contiguous = [&] {
    std::vector<uint8_t> b = Bytes(Gelu(xt.Contiguous()));
    const std::vector<uint8_t> g = Bytes(BinaryRaw(BinaryOp::kGeluBackward, dy, xt.Contiguous()));
    b.insert(b.end(), g.begin(), g.end());
    return b;
  };
  EXPECT_EQ(WithPath(CpuGeluPath::kTable, run), WithPath(CpuGeluPath::kTable, contiguous));
  EXPECT_EQ(WithPath(CpuGeluPath::kTable, run), WithPath(CpuGeluPath::kCompute, contiguous));
}

INSTANTIATE_TEST_SUITE_P(Isa, GeluTable, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Avx512" : "Baseline"; });

TEST(CpuGeluPath, EnvironmentChoosesOrMeasures) {
  for (const auto& [value, path] : {std::pair{"table", CpuGeluPath::kTable}, {"compute", CpuGeluPath::kCompute}}) {
    ScopedEnv env("OCTET_CPU_GELU", value);
    internal::SetCpuGeluPathForTesting(std::nullopt);
    const CpuGeluPathInfo info = GetCpuGeluPath();
    EXPECT_EQ(info.path, path);
    EXPECT_EQ(info.backward_path, path);
    EXPECT_EQ(info.reason, std::string("OCTET_CPU_GELU=") + value);
    EXPECT_EQ(info.backward_reason, std::string("OCTET_CPU_GELU=") + value);
  }
  for (const char* value : {"auto", ""}) {
    ScopedEnv env("OCTET_CPU_GELU", value);
    internal::SetCpuGeluPathForTesting(std::nullopt);
    const CpuGeluPathInfo info = GetCpuGeluPath();
    EXPECT_GT(info.table_ns, 0.0);
    EXPECT_GT(info.compute_ns, 0.0);
    EXPECT_EQ(info.path, info.table_ns < info.compute_ns ? CpuGeluPath::kTable : CpuGeluPath::kCompute);
    EXPECT_THAT(info.reason, HasSubstr("measured: table"));
    // The backward is timed and chosen on its own.
    EXPECT_GT(info.backward_table_ns, 0.0);
    EXPECT_GT(info.backward_compute_ns, 0.0);
    EXPECT_EQ(info.backward_path,
              info.backward_table_ns < info.backward_compute_ns ? CpuGeluPath::kTable : CpuGeluPath::kCompute);
    EXPECT_THAT(info.backward_reason, HasSubstr("measured: table"));
  }
  internal::SetCpuGeluPathForTesting(std::nullopt);
}

TEST(CpuGeluPath, AnUnknownValueIsAnErrorNamingTheVariable) {
  // Made before the switch goes bad: a process's first allocation and its
  // first conversion read switches, and a read of any checks them all (NOTE
  // [every switch checked at every read] in core/env.h).
  const Tensor x = Full({8}, 0.5, {.dtype = DType::kBFloat16});
  const Tensor x32 = x.To(DType::kFloat32);
  ScopedEnv env("OCTET_CPU_GELU", "fast");
  internal::SetCpuGeluPathForTesting(std::nullopt);
  EXPECT_THAT(ErrorOf([] { GetCpuGeluPath(); }), HasSubstr("OCTET_CPU_GELU='fast' is not understood"));
  // The op reports it too (nothing was cached), and a float32 GELU never asks.
  EXPECT_THAT(ErrorOf([&] { Gelu(x); }), HasSubstr("table (look bf16 GELU up in tables)"));
  EXPECT_EQ(Gelu(x32).numel(), 8);
  internal::SetCpuGeluPathForTesting(std::nullopt);
}

}  // namespace
}  // namespace octet
