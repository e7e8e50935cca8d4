// Work decomposition shared by the CPU attention drivers (internal to
// ops/cpu/attention_cpu.cc, the f32/f64 tiles, and attention_bf16.cc, the
// BF16 dot-product tiles): aligned scratch, the geometry of a (B,H,T,D)
// problem cut into kTile-row tiles, and the OpenMP loop over work items.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include <octet/core/tensor.h>
#include <octet/ops/cpu/attention_tiles.h>

namespace octet::cpu::attn {

// 64-byte aligned, uninitialised storage.
template <typename A>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(int64_t n)
      : p_(n > 0 ? static_cast<A*>(::operator new(static_cast<size_t>(n) * sizeof(A), std::align_val_t{64}))
                 : nullptr) {}
  ~Buffer() {
    if (p_ != nullptr) ::operator delete(p_, std::align_val_t{64});
  }
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  A* get() const { return p_; }

 private:
  A* p_ = nullptr;
};

struct Geometry {
  explicit Geometry(const Tensor& q, int64_t lanes)
      : bh(q.size(0) * q.size(1)), t(q.size(2)), d(q.size(3)), dp((q.size(3) + lanes - 1) / lanes * lanes),
        nt((q.size(2) + kTile - 1) / kTile) {}
  int64_t bh, t, d, dp, nt;
  int64_t TileRows(int64_t tile) const { return std::min(kTile, t - tile * kTile); }
};

// Runs body(workspace, item) for item in [0, n): OpenMP dynamic schedule (work
// items are listed most expensive first), one workspace per thread, allocated
// before the parallel region so that running out of memory throws here.
template <typename MakeWs, typename Body>
void ParallelItems(int64_t n, MakeWs&& make_ws, Body&& body) {
  if (n <= 0) return;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), n));
  std::vector<decltype(make_ws())> workspaces;
  workspaces.reserve(threads);
  for (int i = 0; i < threads; ++i) workspaces.push_back(make_ws());
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(workspaces[0], i);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    auto& ws = workspaces[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) body(ws, i);
  }
}

// Whether whole heads, as work items, keep every thread busy: as many heads
// for each thread, or enough that the last round's imbalance is small. Both
// passes then take a head per item (NOTE [forward per head]; backward's
// one-sweep path).
inline bool HeadsFillThreads(const Geometry& g) {
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return g.bh % threads == 0 || g.bh >= 4 * threads;
}

}  // namespace octet::cpu::attn
