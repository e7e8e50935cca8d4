// The CPU random kernels' exact arithmetic, which the CUDA kernels reproduce
// (NOTE [cuda random parity] in ops/cuda/random.cu). These run on the CPU on
// any machine: if a compiler or flag change makes the CPU fuse (or stop
// fusing) a multiply-add, this fails here instead of as a CPU/GPU mismatch
// on a GPU machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include <octet/core/philox.h>
#include <octet/core/random.h>
#include <octet/ops/random.h>
#include "tests/test_util.h"

namespace octet {
namespace {

// Rounded separately: no contraction into an FMA.
double MulAdd(double a, double b, double c) {
  volatile double p = a * b;
  return p + c;
}

TEST(CpuRandomArithmetic, UniformIsAPlainMultiplyThenAdd) {
  const int64_t n = 100001;
  const double a = -2.0, b = 5.0;
  Generator g(1234);
  const Tensor t = Rand({n}, a, b, {.dtype = DType::kFloat64}, &g);
  const double* p = t.data<double>();
  int64_t fused_differs = 0;
  for (int64_t j = 0; j < (n + 1) / 2; ++j) {
    const Philox4 r = Philox(1234, static_cast<uint64_t>(j));
    const double u[2] = {UniformDoubleFromBits(r.v[0], r.v[1]), UniformDoubleFromBits(r.v[2], r.v[3])};
    for (int k = 0; k < 2 && 2 * j + k < n; ++k) {
      ASSERT_EQ(p[2 * j + k], MulAdd(b - a, u[k], a)) << "element " << 2 * j + k;
      fused_differs += std::fma(b - a, u[k], a) != MulAdd(b - a, u[k], a);
    }
  }
  EXPECT_GT(fused_differs, 0);  // the two candidates are really different
}

TEST(CpuRandomArithmetic, IntegersAreAPlusFloorOfUTimesRange) {
  Generator g(77);
  const int64_t n = 10001;
  const Tensor t = RandInt({n}, 3, 1000, {.dtype = DType::kInt64}, &g);
  const int64_t* p = t.data<int64_t>();
  for (int64_t j = 0; j < (n + 1) / 2; ++j) {
    const Philox4 r = Philox(77, static_cast<uint64_t>(j));
    const double u[2] = {UniformDoubleFromBits(r.v[0], r.v[1]), UniformDoubleFromBits(r.v[2], r.v[3])};
    for (int k = 0; k < 2 && 2 * j + k < n; ++k) {
      volatile double prod = u[k] * (1000.0 - 3.0);
      ASSERT_EQ(p[2 * j + k], static_cast<int64_t>(3.0 + std::floor(prod)));
    }
  }
}

TEST(CpuRandomArithmetic, NormalIsBoxMullerWithTheFinalMultiplyAddFusedOrNot) {
  // The CUDA kernel uses fma(b * radius, cos, a), which is what g++ emits for
  // x86-64-v3; a build without FMA rounds twice (normal parity is checked
  // with a tolerance, so both are fine). Anything else is a different formula.
  Generator g(99);
  const int64_t n = 20001;
  const double a = 0.5, b = 2.0;
  const Tensor t = Randn({n}, a, b, {.dtype = DType::kFloat64}, &g);
  const double* p = t.data<double>();
  int64_t fused = 0;
  for (int64_t j = 0; j < (n + 1) / 2; ++j) {
    const Philox4 r = Philox(99, static_cast<uint64_t>(j));
    const double u1 = UniformDoubleFromBits(r.v[0], r.v[1]), u2 = UniformDoubleFromBits(r.v[2], r.v[3]);
    volatile double radius = std::sqrt(-2.0 * std::log1p(-u1));
    volatile double theta = 6.283185307179586 * u2;
    const double trig[2] = {std::cos(theta), std::sin(theta)};
    for (int k = 0; k < 2 && 2 * j + k < n; ++k) {
      volatile double br = b * radius;
      const double with_fma = std::fma(br, trig[k], a), without = MulAdd(br, trig[k], a);
      const double v = p[2 * j + k];
      ASSERT_TRUE(v == with_fma || v == without) << "element " << 2 * j + k << ": " << v;
      fused += v == with_fma;
    }
  }
  RecordProperty("fused_fraction", std::to_string(static_cast<double>(fused) / n));
}

TEST(CpuRandomArithmetic, DropoutKeepsWhereTheTwentyFourBitUniformIsAtLeastP) {
  Generator g(5);
  const int64_t n = 4099;
  const Tensor x = Ones({n});
  const Tensor y = Dropout(x, 0.3, true, &g);
  const std::vector<double> v = y.ToDoubles();
  const float scale = static_cast<float>(1.0 / (1.0 - 0.3));
  for (int64_t i = 0; i < n; ++i) {
    const Philox4 r = Philox(5, static_cast<uint64_t>(i / 4));
    const bool keep = UniformFromBits(r.v[i % 4]) >= 0.3f;
    ASSERT_EQ(v[i], keep ? static_cast<double>(scale) : 0.0) << i;
  }
}

}  // namespace
}  // namespace octet
