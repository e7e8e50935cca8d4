#include "tests/test_util.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace octet::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<double> RandomValues(int64_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

Tensor RandomTensor(const Shape& shape, uint64_t seed, DType dtype, double lo, double hi) {
  return FromVector(RandomValues(Numel(shape), seed, lo, hi), shape, {.dtype = dtype});
}

::testing::AssertionResult AllClose(const Tensor& actual, const std::vector<double>& expected, double rtol,
                                    double atol) {
  const std::vector<double> a = actual.ToDoubles();
  if (a.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size mismatch: " << a.size() << " vs " << expected.size();
  }
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = atol + rtol * std::abs(expected[i]);
    const bool ok = std::abs(a[i] - expected[i]) <= tol || (std::isnan(a[i]) && std::isnan(expected[i])) ||
                    (std::isinf(a[i]) && a[i] == expected[i]);
    if (!ok) {
      if (bad < 8) os << "\n  [" << i << "] actual " << a[i] << " expected " << expected[i] << " (tol " << tol << ")";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ:" << os.str();
}

::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape mismatch: " << ShapeStr(actual.shape()) << " vs "
                                         << ShapeStr(expected.shape());
  }
  return AllClose(actual, expected.ToDoubles(), rtol, atol);
}

std::vector<uint8_t> Bytes(const Tensor& t) {
  const Tensor c = t.To(kCPU).Contiguous();
  std::vector<uint8_t> out(c.nbytes());
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

void AppendBytes(std::vector<uint8_t>* all, const Tensor& t) {
  const std::vector<uint8_t> bytes = Bytes(t);
  all->insert(all->end(), bytes.begin(), bytes.end());
}

}  // namespace octet::testing
