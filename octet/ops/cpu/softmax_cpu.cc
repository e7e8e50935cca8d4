// CPU kernels of softmax and log-softmax (cross-entropy: cross_entropy_cpu.cc).
//
// Softmax over the last dim (inner == 1) works one row at a time: widen the
// row, take its max, write exp(x - max) while summing it, then scale. Softmax
// over another dim works on blocks of kColBlock adjacent columns of one
// (n, inner) slab, so every pass reads contiguous memory. Exponentials use
// functors::Exp (NOTE [fast exp] in ops/functors.h), which vectorises.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <octet/core/convert.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/isa.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/functors.h>
#include <octet/ops/softmax_kernels.h>

namespace octet::cpu {
namespace {

using functors::Exp;

constexpr int64_t kColBlock = 64;

// NOTE [softmax isa dispatch]: as NOTE [pointwise isa dispatch] in
// ops/cpu/pointwise_cpu.cc, the row loops (softmax over the last dim and
// cross-entropy, forward and backward: an exponential an element) are
// compiled for the baseline and for AVX-512 from one always_inline body each
// (the *Range functions), chosen at run time (ops/cpu/isa.h).
// Their lane sums and maxima keep kRowLanes explicit accumulators, so both
// builds add in the same order; the one sum of products (softmax backward)
// fuses them explicitly (LaneDot), since the two builds contracted it
// differently. CrossEntropy.IsaBuildsGiveIdenticalBits checks the bits.
// Softmax over a middle dim stays baseline code.

// ---- softmax over the last dim ----------------------------------------------

// Rows [r0, r1) of a (rows, n) softmax; xbuf, ybuf: (n) scratch.
template <typename T, typename A = AccType<T>>
OCTET_INLINE void SoftmaxRange(const T* x, int64_t n, bool log, T* y, int64_t r0, int64_t r1, A* xbuf, A* ybuf) {
  for (int64_t r = r0; r < r1; ++r) {
    const A* xr = LoadRow(x + r * n, n, xbuf);
    A* yr = RowOut(y + r * n, ybuf);
    const A m = MaxRow(x + r * n, xr, n);  // NOTE [max from the source row]
    if (log) {
      // (x - m) - log(s), not x - (m + log(s)): the latter rounds m + log(s)
      // at the magnitude of m.
      const A log_s = std::log(LaneSum<A>(n, [&](int64_t i) { return Exp(xr[i] - m); }));
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) - log_s;
    } else {
      // NOTE [softmax exp then sum]: the exponentials are written first, then
      // summed from the row in the same lane order (the same bits). Summed
      // in the loop that wrote them, GCC 12 kept the lane accumulators on
      // the stack, a store and a reload every 16 values; a driver timing
      // 20000 Softmax forward + backward calls on (2048, 256), three
      // alternating runs (Zen 5, 2 threads): f32 4.25-4.28 -> 3.60-3.94 s,
      // bf16 6.24-6.55 -> 5.51-5.62 s.
      for (int64_t i = 0; i < n; ++i) yr[i] = Exp(xr[i] - m);
      const A s = LaneSum<A>(n, [&](int64_t i) { return yr[i]; });
      const A inv = A(1) / s;
      for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
    }
    StoreRow(yr, y + r * n, n);
  }
}

template <typename T>
void SoftmaxRows(const T* x,  // (rows,n)
                 int64_t rows, int64_t n, bool log,
                 T* y) {  // (rows,n)
  using A = AccType<T>;
  const auto range = IsaBuild<&SoftmaxRange<T, A>>();
  ParallelFor(rows, RowGrain(n), [&](int64_t r0, int64_t r1) {
    std::vector<A> xbuf(n), ybuf(n);
    range(x, n, log, y, r0, r1, xbuf.data(), ybuf.data());
  });
}

// Rows [r0, r1) of a (rows, n) softmax backward; dybuf, ybuf, dxbuf: (n).
template <typename T, typename A = AccType<T>>
OCTET_INLINE void SoftmaxBwdRange(const T* dy, const T* y, int64_t n, bool log, T* dx, int64_t r0, int64_t r1,
                                  A* dybuf, A* ybuf, A* dxbuf) {
  for (int64_t r = r0; r < r1; ++r) {
    const A* dyr = LoadRow(dy + r * n, n, dybuf);
    const A* yr = LoadRow(y + r * n, n, ybuf);
    A* dxr = RowOut(dx + r * n, dxbuf);
    if (log) {
      const A s = LaneSum<A>(n, [&](int64_t i) { return dyr[i]; });
      for (int64_t i = 0; i < n; ++i) dxr[i] = dyr[i] - Exp(yr[i]) * s;
    } else {
      const A s = LaneDot<A>(n, dyr, yr);
      for (int64_t i = 0; i < n; ++i) dxr[i] = yr[i] * (dyr[i] - s);
    }
    StoreRow(dxr, dx + r * n, n);
  }
}

template <typename T>
void SoftmaxBwdRows(const T* dy, const T* y,  // (rows,n)
                    int64_t rows, int64_t n, bool log,
                    T* dx) {  // (rows,n)
  using A = AccType<T>;
  const auto range = IsaBuild<&SoftmaxBwdRange<T, A>>();
  ParallelFor(rows, RowGrain(n), [&](int64_t r0, int64_t r1) {
    std::vector<A> dybuf(n), ybuf(n), dxbuf(n);
    range(dy, y, n, log, dx, r0, r1, dybuf.data(), ybuf.data(), dxbuf.data());
  });
}

// ---- softmax over a middle dim ----------------------------------------------

// Runs body(o, j0, w) for every (outer index, column block) of an
// (outer, n, inner) tensor; blocks are kColBlock columns wide (w <= kColBlock).
template <typename F>
void ForColumnBlocks(int64_t outer, int64_t n, int64_t inner, F&& body) {
  const int64_t nblk = (inner + kColBlock - 1) / kColBlock;
  ParallelFor(outer * nblk, std::max<int64_t>(1, kParallelGrain / (n * kColBlock)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t o = b / nblk, j0 = (b % nblk) * kColBlock;
      body(o, j0, std::min(kColBlock, inner - j0));
    }
  });
}

template <typename T>
void SoftmaxCols(const T* x, int64_t outer, int64_t n, int64_t inner, bool log, T* y) {
  using A = AccType<T>;
  ForColumnBlocks(outer, n, inner, [&](int64_t o, int64_t j0, int64_t w) {
    const T* xs = x + o * n * inner + j0;
    T* ys = y + o * n * inner + j0;
    A m[kColBlock], s[kColBlock];
    for (int64_t j = 0; j < w; ++j) {
      m[j] = ConvertElement<A>(xs[j]);
      s[j] = 0;
    }
    // NaNs are skipped here and come back through exp(NaN - m), see RowMax.
    for (int64_t k = 1; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) {
        const A v = ConvertElement<A>(xs[k * inner + j]);
        m[j] = v > m[j] ? v : m[j];
      }
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) s[j] += Exp(ConvertElement<A>(xs[k * inner + j]) - m[j]);
    // y = exp(x - m) / s, recomputing the exponential rather than storing it
    // in y first (a bf16 y would round it before the division).
    for (int64_t j = 0; j < w; ++j) s[j] = log ? std::log(s[j]) : A(1) / s[j];
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) {
        const A v = ConvertElement<A>(xs[k * inner + j]);
        ys[k * inner + j] = ConvertElement<T>(log ? (v - m[j]) - s[j] : Exp(v - m[j]) * s[j]);
      }
  });
}

template <typename T>
void SoftmaxBwdCols(const T* dy, const T* y, int64_t outer, int64_t n, int64_t inner, bool log, T* dx) {
  using A = AccType<T>;
  ForColumnBlocks(outer, n, inner, [&](int64_t o, int64_t j0, int64_t w) {
    const int64_t base = o * n * inner + j0;
    A s[kColBlock] = {};
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) {
        const A g = ConvertElement<A>(dy[base + k * inner + j]);
        s[j] += log ? g : g * ConvertElement<A>(y[base + k * inner + j]);
      }
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t i = base + k * inner + j;
        const A g = ConvertElement<A>(dy[i]), yv = ConvertElement<A>(y[i]);
        dx[i] = ConvertElement<T>(log ? g - Exp(yv) * s[j] : yv * (g - s[j]));
      }
  });
}

void SoftmaxFwdCpu(const Tensor& x, bool log, const Tensor& y) {
  const int64_t outer = x.shape()[0], n = x.shape()[1], inner = x.shape()[2];
  DispatchFloat(x.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    if (inner == 1) {
      SoftmaxRows(x.data<T>(), outer, n, log, y.data<T>());
    } else {
      SoftmaxCols(x.data<T>(), outer, n, inner, log, y.data<T>());
    }
  });
}

void SoftmaxBwdCpu(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx) {
  const int64_t outer = y.shape()[0], n = y.shape()[1], inner = y.shape()[2];
  DispatchFloat(y.dtype(), log ? "log_softmax backward" : "softmax backward", [&]<typename T>() {
    if (inner == 1) {
      SoftmaxBwdRows(dy.data<T>(), y.data<T>(), outer, n, log, dx.data<T>());
    } else {
      SoftmaxBwdCols(dy.data<T>(), y.data<T>(), outer, n, inner, log, dx.data<T>());
    }
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(softmax_fwd, DeviceType::kCPU, &SoftmaxFwdCpu);
OCTET_REGISTER_KERNEL(softmax_bwd, DeviceType::kCPU, &SoftmaxBwdCpu);

}  // namespace octet::cpu
