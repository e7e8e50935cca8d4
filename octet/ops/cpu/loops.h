// CPU loop machinery shared by the kernels in ops/cpu/: a strided N-operand
// iterator that coalesces dimensions, runs the innermost dimension as a tight
// loop and parallelises the rest with OpenMP (the one CPU thread pool).
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <octet/core/scaling_math.h>  // MaxNaN, for the kernels that combine amaxes
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

// Sets the calling thread's OpenMP thread count (its nthreads-var, as
// omp_set_num_threads does) while it lives and puts the previous one back,
// also when an exception leaves the scope.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

// Runs body(begin, end) over [0, n) split across OpenMP threads when n is
// at least `grain`: each thread's share in pieces, balanced between them
// (NOTE [balanced split]). Bodies get any sub-range and must not depend on
// how [0, n) is cut.
//
// NOTE [balanced split]: every body computes element by element or block by
// block (partials indexed by block, never by thread), so its results do not
// depend on the split. Each thread owns an even share, as kPiecesPerThread
// pieces it takes front to back; a thread done with its own takes the
// others' remaining pieces from their backs. With threads of equal speed
// that is the even split, each thread reading the share it also wrote in the
// previous op (its cache); with unequal ones the faster thread finishes the
// slower one's share. The VMs issue 12 is measured on have unequal vCPUs at
// times (pinned, one ran an FMA-bound loop 1.2-1.5x and a streaming loop
// 1.2-1.8x slower than the other; at other times they measure equal), and a
// thread then waits at the end of nearly every region: perf of a small O2
// GPT step showed the faster one idle in libgomp for 23 % of its samples.
// Measured against one share per thread (2026-11-24, Zen 5 VM, alternating
// runs): in the quarter hour the vCPUs measured unequal, octet_norm_bench's
// LayerNorm forward f32 / bf16 and AddLayerNorm forward+backward f32 / bf16
// were faster in all twelve pairs, by 5-40 % (LayerNorm f32 0.557-0.670 ->
// 0.355-0.537 ms, bf16 0.436-0.518 -> 0.364-0.428); once they measured equal,
// the two splits were equal too (LayerNorm f32 0.308-0.395 against
// 0.314-0.349 ms), as were the small GPT step's (O2 47.4-48.6 against
// 48.0-49.3 ms, five pairs). A step's time is dominated by oneDNN's GEMMs,
// which keep their own even split (NOTE [gemm thread split] in
// ops/cpu/dnnl_gemm.cc), and the VM's noise hides the rest: an earlier
// session's version of this split cut the threads' waits at the end of
// regions from 7.8 to 6.3 ms a step without a step-time change the noise
// let through.
inline constexpr int64_t kPiecesPerThread = 8;

namespace internal {

// One thread's share as pieces [front, back), taken from the front by the
// owner and from the back by the others.
struct alignas(64) PieceRange {
  std::atomic<uint64_t> word{0};  // front << 32 | back

  void Set(uint64_t front, uint64_t back) { word.store(front << 32 | back, std::memory_order_relaxed); }
  // The next piece from the front or the back, or -1 when none is left.
  int64_t Take(bool from_front) {
    uint64_t w = word.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = w >> 32, back = w & 0xFFFFFFFFu;
      if (front >= back) return -1;
      const uint64_t next = from_front ? (front + 1) << 32 | back : front << 32 | (back - 1);
      if (word.compare_exchange_weak(w, next, std::memory_order_relaxed))
        return static_cast<int64_t>(from_front ? front : back - 1);
    }
  }
};

}  // namespace internal

template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& body) {
  if (n <= 0) return;
  const int max_threads = omp_get_max_threads();
  if (n < grain || max_threads == 1 || omp_in_parallel()) {
    body(int64_t{0}, n);
    return;
  }
  const int64_t nt = std::min<int64_t>(max_threads, (n + grain - 1) / grain);
  const int64_t per = std::min<int64_t>(kPiecesPerThread, std::max<int64_t>(1, n / nt));
  const int64_t pieces = nt * per;
  internal::PieceRange local[16];
  std::unique_ptr<internal::PieceRange[]> heap;
  internal::PieceRange* ranges = local;
  if (nt > 16) {
    heap = std::make_unique<internal::PieceRange[]>(static_cast<size_t>(nt));
    ranges = heap.get();
  }
  for (int64_t t = 0; t < nt; ++t) ranges[t].Set(static_cast<uint64_t>(t * per), static_cast<uint64_t>((t + 1) * per));
  auto run = [&](int64_t p) {
    const int64_t begin = n * p / pieces, end = n * (p + 1) / pieces;
    if (begin < end) body(begin, end);
  };
#pragma omp parallel num_threads(static_cast<int>(nt))
  {
    // A team smaller than asked for leaves whole shares: taken the same way.
    const int64_t t = omp_get_thread_num();
    for (int64_t p = ranges[t].Take(true); p >= 0; p = ranges[t].Take(true)) run(p);
    for (int64_t k = 1; k < nt; ++k) {
      internal::PieceRange& other = ranges[(t + k) % nt];
      for (int64_t p = other.Take(false); p >= 0; p = other.Take(false)) run(p);
    }
  }
}

// A piece of work over [0, n) that may be cut anywhere (ParallelJobs).
struct RangeJob {
  int64_t n = 0;
  std::function<void(int64_t, int64_t)> run;
};

// Runs every job over its whole range in one ParallelFor over their
// concatenation (grain in those units); a piece that spans jobs is cut at
// their boundaries. One parallel region where a loop per job would open one
// each (NOTE [adamw one region] in ops/cpu/adamw_cpu.cc).
inline void ParallelJobs(const std::vector<RangeJob>& jobs, int64_t grain) {
  std::vector<int64_t> start(jobs.size() + 1, 0);
  for (size_t j = 0; j < jobs.size(); ++j) start[j + 1] = start[j] + jobs[j].n;
  ParallelFor(start.back(), grain, [&](int64_t begin, int64_t end) {
    // The last job starting at or before `begin` (empty jobs before it are skipped).
    size_t j = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), begin) - start.begin()) - 1;
    for (; begin < end; ++j) {
      const int64_t stop = std::min(end, start[j + 1]);
      if (stop > begin) jobs[j].run(begin - start[j], stop - start[j]);
      begin = stop;
    }
  });
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

// The amax over per-block (or per-row) amaxes, NaN winning wherever it
// appears (NOTE [amax combine order] in ops/cpu/cast_cpu.cc); 0 for none.
inline float CombineAmax(const std::vector<float>& parts) {
  float m = 0.0f;
  for (float p : parts) m = MaxNaN(m, p);
  return m;
}

}  // namespace octet::cpu
