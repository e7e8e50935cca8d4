// Work decomposition shared by the CPU attention drivers (internal to
// ops/cpu/attention_cpu.cc, the f32/f64 tiles, and attention_bf16.cc, the
// BF16 dot-product tiles): aligned scratch, the geometry of a (B,H,T,D)
// problem cut into kTile-row tiles, the OpenMP loop over work items, and
// the per-row statistics both drivers write and read.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include <cmath>
#include <limits>

#include <octet/core/tensor.h>
#include <octet/ops/cpu/attention_pack.h>
#include <octet/ops/cpu/attention_tiles.h>
#include <octet/ops/cpu/row_helpers.h>

namespace octet::cpu::attn {

inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kLn2 = 0.6931471805599453;

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

// The end of a forward query tile: rows q0 + i (i < qn) of head bh of out
// are o_i / l_i, and lse (B,H,T) holds their natural log-sum-exp (m_i and
// l_i are in the log2 domain). store_rows: StoreRows or a function with its
// signature and results (StoreRowsBf16).
template <typename A, typename TOut, typename StoreRowsFn>
void StoreQueryTile(const A* o, const A* m, const A* l, const Geometry& g, const OutOperand<TOut>& out, A* lse,
                    int64_t bh, int64_t q0, int64_t qn, StoreRowsFn&& store_rows) {
  A inv_l[kTile];
  for (int64_t i = 0; i < qn; ++i) {
    inv_l[i] = A(1) / l[i];
    lse[bh * g.t + q0 + i] = static_cast<A>((m[i] + std::log2(l[i])) * A(kLn2));
  }
  store_rows(o, g.dp, qn, g.d, A(1), out, bh, q0, inv_l);  // one call: NOTE [attention row addressing]
}

// What backward reads per query row of the tile at row t0 (n rows): lse2 =
// lse * log2(e) and di = rowsum(dO o O) (dout_row(i): row t0 + i of dO,
// contiguous); the padding rows [n, kTile) get +inf (so P = 0) and 0.
template <typename A, typename TOut, typename DoutRow>
void TileRowStats(const A* lse, const Operand<TOut>& out, const Geometry& g, int64_t bh, int64_t t0, int64_t n,
                  DoutRow&& dout_row, A* lse2, A* di) {
  std::vector<TOut> o_row(out.sd == 1 ? 0 : g.d);  // a row of O with strided columns, gathered
  const TOut* const o_first = n > 0 ? out.Row(bh, t0) : nullptr;  // NOTE [attention row addressing]
  for (int64_t i = 0; i < kTile; ++i) {
    if (i < n) {
      lse2[i] = lse[bh * g.t + t0 + i] * static_cast<A>(kLog2e);
      const TOut* o = o_first + i * out.st;
      if (out.sd != 1) {
        for (int64_t c = 0; c < g.d; ++c) o_row[c] = o[c * out.sd];
        o = o_row.data();
      }
      di[i] = LaneDot<A>(g.d, dout_row(i), o);
    } else {
      lse2[i] = std::numeric_limits<A>::infinity();
      di[i] = 0;
    }
  }
}

}  // namespace octet::cpu::attn
