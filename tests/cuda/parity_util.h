// Helpers of the CPU-vs-CUDA parity tests (tests/cuda/kernels*_test.cc):
// the skip when there is no device, inputs laid out identically on both
// devices, and the per-dtype tolerances in one place.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <octet/core/tensor.h>
#include "tests/cuda/require_cuda.h"
#include "tests/test_util.h"

namespace octet::testing {

inline Device Gpu() { return CUDA(0); }

// Tolerance of a CUDA result against the CPU's on the same input. Both
// backends compute in the same type (f32 for f32/bf16/f16, f64 for f64); what
// differs is the last bits of exp/log/tanh/pow (CUDA's math library vs libm
// and octet's ExpFast), FMA contraction and summation order, plus at most one
// rounding step of the output dtype when the compute results straddle it.
struct Tol {
  double rtol;
  double atol;
};
inline Tol ParityTol(DType d) {
  switch (d) {
    case DType::kFloat64: return {1e-12, 1e-13};
    case DType::kFloat32: return {2e-5, 2e-6};
    case DType::kBFloat16: return {1.6e-2, 1e-2};  // 2 bf16 ulps (2^-7 relative)
    case DType::kFloat16: return {2e-3, 2e-4};     // 2 f16 ulps
    default: return {0, 0};
  }
}
// Sums of n terms of magnitude ~1 in a different order: the error grows
// with n (and with one output rounding for 16-bit dtypes).
inline Tol SumTol(DType d, int64_t n) {
  const Tol t = ParityTol(d);
  const double eps = d == DType::kFloat64 ? 1e-16 : 6e-8;
  return {t.rtol, t.atol + 4 * eps * static_cast<double>(n)};
}

// Softmax-like results: a value divided by (or offset by the log of) a sum of
// n positive terms, whose relative error grows like sqrt(n) eps.
inline Tol SoftmaxTol(DType d, int64_t n) {
  const Tol t = ParityTol(d);
  const double eps = d == DType::kFloat64 ? 1e-16 : 6e-8;
  return {t.rtol + 8 * eps * std::sqrt(static_cast<double>(n)), t.atol};
}

// How an input is laid out in memory (the same on both devices).
enum class Layout {
  kContiguous,  // row-major, aligned: the 16-byte vector path
  kTransposed,  // a transposed view: the strided path
  kSliced,      // columns 1..cols of a wider tensor: strided and misaligned
  kMisaligned,  // contiguous but starting one element in: the scalar path
};
inline const char* Name(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kTransposed: return "transposed";
    case Layout::kSliced: return "sliced";
    case Layout::kMisaligned: return "misaligned";
  }
  return "?";
}

// The same view of the same values on the CPU and on the GPU: a (rows, cols)
// tensor of uniform values in [lo, hi) in `layout`.
struct Pair {
  Tensor cpu;
  Tensor gpu;
};
inline Pair MakeInput(int64_t rows, int64_t cols, Layout layout, uint64_t seed, DType dtype, double lo = -1.0,
                      double hi = 1.0) {
  auto view = [&](const Tensor& base) {
    switch (layout) {
      case Layout::kContiguous: return base;
      case Layout::kTransposed: return base.T();
      case Layout::kSliced: return base.Narrow(1, 1, cols);
      case Layout::kMisaligned: return base.Narrow(0, 1, rows * cols).View({rows, cols});
    }
    return base;
  };
  Shape base_shape = {rows, cols};
  if (layout == Layout::kTransposed) base_shape = {cols, rows};
  if (layout == Layout::kSliced) base_shape = {rows, cols + 3};
  if (layout == Layout::kMisaligned) base_shape = {rows * cols + 1};
  const Tensor base = RandomTensor(base_shape, seed, dtype, lo, hi);
  return {view(base), view(base.To(Gpu()))};
}

// Same tensor on both devices.
inline Pair Both(const Tensor& cpu) { return {cpu, cpu.To(Gpu())}; }

// The CUDA result `gpu` matches the CPU result `cpu` within `tol`.
inline ::testing::AssertionResult Matches(const Tensor& gpu, const Tensor& cpu, Tol tol) {
  if (!gpu.device().is_cuda()) return ::testing::AssertionFailure() << "result is on " << gpu.device();
  if (gpu.dtype() != cpu.dtype())
    return ::testing::AssertionFailure() << "dtype " << Name(gpu.dtype()) << " vs " << Name(cpu.dtype());
  return AllClose(gpu.To(kCPU), cpu, tol.rtol, tol.atol);
}

// Bitwise-equal values (NaN equal to NaN).
inline ::testing::AssertionResult Identical(const Tensor& gpu, const Tensor& cpu) {
  if (gpu.shape() != cpu.shape())
    return ::testing::AssertionFailure() << ShapeStr(gpu.shape()) << " vs " << ShapeStr(cpu.shape());
  if (gpu.dtype() != cpu.dtype())
    return ::testing::AssertionFailure() << "dtype " << Name(gpu.dtype()) << " vs " << Name(cpu.dtype());
  const std::vector<double> a = gpu.To(kCPU).ToDoubles(), b = cpu.ToDoubles();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) ||
                      (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i]));
    if (!same) return ::testing::AssertionFailure() << "element " << i << ": cuda " << a[i] << " vs cpu " << b[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace octet::testing
