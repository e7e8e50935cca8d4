// The CPU GEMMs' side of NOTE [cpu gemm timing] (ops/cpu_gemm_path.h):
// internal to ops/cpu/.
#pragma once

#include <cstdint>

namespace octet::cpu {

// Adds the wall time from its construction to its destruction to one part
// of the counters, and for kCall also the call and its flops, when timing
// is on; costs one relaxed load when off.
class GemmTimer {
 public:
  enum Part { kCall, kPack, kExecute };
  explicit GemmTimer(Part part, double flops = 0.0);
  ~GemmTimer();
  GemmTimer(const GemmTimer&) = delete;
  GemmTimer& operator=(const GemmTimer&) = delete;

 private:
  Part part_;
  double flops_;
  int64_t start_ns_;  // -1: timing was off at construction
};

}  // namespace octet::cpu
