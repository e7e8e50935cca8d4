// What the CUDA benchmarks (benchmarks/cuda_*_bench.cc) share: their
// environment switches and the median of a run's samples (header-only).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace octet::bench {

// OCTET_BENCH_DEVICE=cpu runs a benchmark's code path on the CPU: a check of
// the benchmark itself on a machine without a GPU.
inline bool OnCpuForChecking() {
  const char* v = std::getenv("OCTET_BENCH_DEVICE");
  return v != nullptr && std::string(v) == "cpu";
}

// A positive integer from the environment, else `fallback`.
inline int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return (end != v && *end == '\0' && x > 0) ? static_cast<int64_t>(x) : fallback;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace octet::bench
