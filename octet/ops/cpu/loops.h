// CPU loop machinery shared by the kernels in ops/cpu/: a strided N-operand
// iterator that coalesces dimensions, runs the innermost dimension as a tight
// loop and parallelises the rest with OpenMP (the one CPU thread pool).
#pragma once

#include <omp.h>

#include <array>
#include <cstdint>

#include <octet/core/tensor.h>

namespace octet::cpu {

// Below this many elements a pointwise loop runs on one thread.
//
// NOTE [fork-join cost]: under OMP_WAIT_POLICY=passive every parallel
// region pays futex wake-ups (~24 us against ~4 us spinning, an empty
// 2-thread region on a Zen 5 VM), and a small GPT step at O1 opens ~400
// regions (counted by interposing GOMP_parallel: 8037 in 20 train_gpt
// steps). train_gpt small O1 ran 70-72 ms/step passive against 56-58 spinning
// (2026-11-24). Scaling the grain by the measured cost was tried: a 6x grain
// (small ops on one thread) gave 62.3 / 63.5 / 63.3 ms against 62.2 / 62.0 /
// 62.9 ms (alternating runs) — no gain, because the wake-ups that cost are
// those of regions carrying real work (oneDNN's GEMMs, attention, packing),
// which run in parallel at any grain. The grain stays a constant.
inline constexpr int64_t kParallelGrain = 32768;

// Runs body(begin, end) over [0, n) split across OpenMP threads when n is
// at least `grain`: one contiguous share per thread (NOTE [static split]).
//
// NOTE [static split]: every body computes element by element or block by
// block (partials indexed by block, never by thread), so its results do not
// depend on the split. A work-stealing split was measured against this one
// (2026-11-24, Zen 5 VM whose second vCPU ran FMA-bound loops 1.5x and
// load/store loops 1.8x slower than the first when pinned): each thread took
// its share as 8 pieces front to back and then stole pieces from the back of
// the other's. Time threads spent waiting at the end of these regions fell
// from 7.8 to 6.3 ms per step (small GPT at O1, 60 steps), but step times did
// not move (octet_train_step_bench small O1, four alternating pairs:
// 59.4/58.8/62.9/59.5 ms static, 61.0/59.7/58.3/61.6 stealing; same losses
// bit for bit), so the simpler split stays. The largest waits left are
// regions with one block per thread (then the bias-gradient column sums,
// now ops/cpu/column_sums.cc).
template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& body) {
  if (n <= 0) return;
  const int max_threads = omp_get_max_threads();
  if (n < grain || max_threads == 1 || omp_in_parallel()) {
    body(int64_t{0}, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(max_threads, (n + grain - 1) / grain);
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) body(begin, end);
  }
}

// N operands over one iteration shape. strides are in elements; operands may
// broadcast (stride 0). Calls inner(ptrs, byte_strides, n) for runs along the
// innermost (coalesced) dimension, where ptrs[k] points at operand k's first
// element of the run.
template <int N>
struct StridedIter {
  Shape shape;                           // coalesced
  std::array<Shape, N> byte_strides;     // coalesced, in bytes
  std::array<char*, N> base;

  StridedIter(const Shape& iter_shape, const std::array<const Tensor*, N>& ops) {
    const int64_t rank = static_cast<int64_t>(iter_shape.size());
    std::array<Shape, N> st;
    for (int k = 0; k < N; ++k) {
      base[k] = static_cast<char*>(ops[k]->raw_data());
      st[k] = ops[k]->strides();
      OCTET_DCHECK(static_cast<int64_t>(st[k].size()) == rank);
      for (auto& s : st[k]) s *= SizeOf(ops[k]->dtype());
    }
    // Drop size-1 dims, then merge neighbours that are contiguous for every operand.
    for (int64_t d = 0; d < rank; ++d) {
      if (iter_shape[d] == 1) continue;
      if (!shape.empty()) {
        bool mergeable = true;
        for (int k = 0; k < N; ++k)
          mergeable &= byte_strides[k].back() == st[k][d] * iter_shape[d];
        if (mergeable) {
          shape.back() *= iter_shape[d];
          for (int k = 0; k < N; ++k) byte_strides[k].back() = st[k][d];
          continue;
        }
      }
      shape.push_back(iter_shape[d]);
      for (int k = 0; k < N; ++k) byte_strides[k].push_back(st[k][d]);
    }
    if (shape.empty()) {  // scalar or all-ones shape: one element
      shape.push_back(Numel(iter_shape) == 0 ? 0 : 1);
      for (int k = 0; k < N; ++k) byte_strides[k].push_back(0);
    }
  }

  // Splits the whole iteration space (not just the outer dims) across threads,
  // so a single long contiguous run is parallel too.
  template <typename Inner>
  void Run(Inner&& inner, int64_t grain = kParallelGrain) const {
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t inner_n = shape.back();
    const int64_t total = Numel(shape);
    if (total == 0) return;
    std::array<int64_t, N> inner_stride;
    for (int k = 0; k < N; ++k) inner_stride[k] = byte_strides[k].back();
    ParallelFor(total, grain, [&](int64_t begin, int64_t end) {
      // Unravel `begin` once, then walk runs along the innermost dim.
      Shape idx(rank, 0);
      int64_t rem = begin;
      for (int64_t d = rank - 1; d >= 0; --d) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
      }
      std::array<char*, N> p;
      for (int64_t pos = begin; pos < end;) {
        const int64_t run = std::min(inner_n - idx[rank - 1], end - pos);
        for (int k = 0; k < N; ++k) {
          char* q = base[k];
          for (int64_t d = 0; d < rank; ++d) q += idx[d] * byte_strides[k][d];
          p[k] = q;
        }
        inner(p, inner_stride, run);
        pos += run;
        idx[rank - 1] += run;
        for (int64_t d = rank - 1; d > 0 && idx[d] >= shape[d]; --d) {
          idx[d] = 0;
          ++idx[d - 1];
        }
      }
    });
  }
};

// The larger of two amaxes, NaN winning wherever it appears (NOTE [amax
// combine order] in ops/cpu/cast_cpu.cc): how the CPU FP8 kernels combine
// the amaxes of their blocks or rows.
inline float MaxNaN(float a, float b) { return (b > a || b != b) ? b : a; }

}  // namespace octet::cpu
