// The float64 reference of Matmul, Linear and ScaledMatmul with NumPy
// semantics, and the per-element tolerances the matmul tests hold results to
// (matmul_test.cc's header explains them): shared by matmul_test.cc and
// matmul_cpu_backend_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <octet/core/tensor.h>

namespace octet::testing {

struct Ref {
  Shape shape;
  std::vector<double> value;  // row-major
  std::vector<double> bound;  // sum_k |a||b| per element
};

// Reference of a (..., M, K) x b (..., K, N) (1-D operands promoted as NumPy),
// plus bias (N) if given.
inline Ref RefMatmul(const Tensor& a, const Tensor& b, const Tensor& bias = Tensor()) {
  Shape sa = a.shape(), sb = b.shape();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const std::vector<double> av = a.ToDoubles(), bv = b.ToDoubles();
  const std::vector<double> biasv = bias.defined() ? bias.ToDoubles() : std::vector<double>();
  const size_t rank = std::max(sa.size(), sb.size());
  sa.insert(sa.begin(), rank - sa.size(), 1);
  sb.insert(sb.begin(), rank - sb.size(), 1);
  const int64_t M = sa[rank - 2], K = sa[rank - 1], N = sb[rank - 1];
  Shape batch(rank - 2);
  for (size_t d = 0; d + 2 < rank; ++d) batch[d] = std::max(sa[d], sb[d]);
  const int64_t nb = Numel(batch);
  Ref r;
  r.value.assign(nb * M * N, 0.0);
  r.bound.assign(nb * M * N, 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t rem = bi, ao = 0, bo = 0, astride = M * K, bstride = K * N;
    for (int64_t d = static_cast<int64_t>(rank) - 3; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      if (sa[d] != 1) ao += idx * astride;
      if (sb[d] != 1) bo += idx * bstride;
      astride *= sa[d];
      bstride *= sb[d];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, bound = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = av[ao + m * K + k] * bv[bo + k * N + n];
          s += p;
          bound += std::abs(p);
        }
        if (!biasv.empty()) s += biasv[n];
        r.value[(bi * M + m) * N + n] = s;
        r.bound[(bi * M + m) * N + n] = bound;
      }
  }
  r.shape = batch;
  if (a.dim() > 1) r.shape.push_back(M);
  if (b.dim() > 1) r.shape.push_back(N);
  return r;
}

struct Tol {
  double bound_factor;  // times S
  double rel;           // times |ref|
  double abs = 0.0;
};

inline Tol TolFor(DType dtype, int64_t K) {
  const double acc = (K + 2) * std::ldexp(1.0, -24);
  switch (dtype) {
    case DType::kFloat64: return {1e-12, 0.0};
    case DType::kFloat32: return {acc, 0.0};
    case DType::kBFloat16: return {acc, std::ldexp(1.0, -8)};
    case DType::kFloat16: return {acc, std::ldexp(1.0, -11)};
    default: return {0.0, 0.0};
  }
}

inline ::testing::AssertionResult Matches(const Tensor& got, const Ref& ref, const Tol& tol) {
  if (got.shape() != ref.shape)
    return ::testing::AssertionFailure() << "shape " << ShapeStr(got.shape()) << " vs " << ShapeStr(ref.shape);
  const std::vector<double> g = got.ToDoubles();
  int bad = 0;
  std::string msg;
  for (size_t i = 0; i < g.size(); ++i) {
    const double t = tol.bound_factor * ref.bound[i] + tol.rel * std::abs(ref.value[i]) + tol.abs + 1e-300;
    if (!(std::abs(g[i] - ref.value[i]) <= t)) {
      if (bad++ < 5)
        msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(g[i]) + " want " +
               std::to_string(ref.value[i]) + " tol " + std::to_string(t);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << g.size() << " elements off:" << msg;
}

}  // namespace octet::testing
