// Deterministic random tensors. A Generator is (seed, offset): each call
// consumes a range of Philox counters and advances the offset, so a run is
// reproducible from the seed, and resumable from (seed, offset).
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>

namespace octet {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void SetState(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `n` counters (each yields 4 words) and returns the first.
  uint64_t Reserve(uint64_t n) {
    const uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (used when none is passed).
Generator& DefaultGenerator();
void ManualSeed(uint64_t seed);

// Uniform in [lo, hi). Float dtypes.
Tensor Rand(const Shape& shape, double lo = 0.0, double hi = 1.0, const TensorOptions& options = {},
            Generator* gen = nullptr);
// Normal(mean, std) by Box-Muller. Float dtypes.
Tensor Randn(const Shape& shape, double mean = 0.0, double std = 1.0, const TensorOptions& options = {},
             Generator* gen = nullptr);
// Integers uniform in [lo, hi). Integer dtypes. Throws when lo or hi - 1 lies
// outside the dtype's range, or the range reaches past +-2^53 (drawn in double).
Tensor RandInt(const Shape& shape, int64_t lo, int64_t hi, const TensorOptions& options = {.dtype = DType::kInt64},
               Generator* gen = nullptr);
// Fills x in place (no autograd) with uniform / normal values.
void UniformFill_(Tensor& x, double lo, double hi, Generator* gen = nullptr);
void NormalFill_(Tensor& x, double mean, double std, Generator* gen = nullptr);

}  // namespace octet
