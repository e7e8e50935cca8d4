// A program with two parallel regions of known counts, for
// omp_regions_test.sh: RegionA opens 5, RegionB 3, each RegionB after at
// least 3 ms of serial work (what the -g mode charges it). Each RegionA
// lasts at least 1 ms (a fixed loop count took 74 us on a fast Xeon, so the
// table's millisecond column read 0.000 for all five).
#include <omp.h>

#include <chrono>
#include <cstdio>

namespace {

volatile double sink = 0.0;

__attribute__((noinline)) void RegionA(int round) {
#pragma omp parallel num_threads(2)
  {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    double s = 0.0;
    for (int i = 0; std::chrono::steady_clock::now() < until; ++i) s += i * (round + omp_get_thread_num());
    sink = s;
  }
}

__attribute__((noinline)) void RegionB(int round) {
#pragma omp parallel num_threads(2)
  sink = round + omp_get_thread_num();
}

// Serial work on the calling thread for at least `ms` milliseconds.
void Serial(int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) sink = sink + 1.0;
}

}  // namespace

int main() {
  for (int r = 0; r < 5; ++r) RegionA(r);
  for (int r = 0; r < 3; ++r) {
    Serial(3);
    RegionB(r);
  }
  std::printf("probe done\n");
  return 0;
}
