// CPU kernels of the softmax & loss family.
//
// Softmax over the last dim (inner == 1) works one row at a time: widen the
// row, take its max, write exp(x - max) while summing it, then scale. Softmax
// over another dim works on blocks of kColBlock adjacent columns of one
// (n, inner) slab, so every pass reads contiguous memory. Exponentials use
// functors::Exp (NOTE [fast exp] in ops/functors.h), which vectorises.
//
// Cross-entropy: NOTE [fused cross-entropy] below.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

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

// NOTE [max from the source row]: a bf16 row is widened into f32 scratch by
// the row converter (LoadRow), whose 64-byte stores the row's max then read
// back at once as 32-byte halves (RowMax's Lanes parts): the upper halves
// did not forward from the store buffer, and RowMax took twice the time it
// takes over an f32 row (perf annotate, cross-entropy forward on (2048,
// 256) bf16, Zen 5: its vmaxps and loads 2600 samples against 1300 for
// f32). Converter stores of 32 bytes moved the stall to the exponential's
// 64-byte loads. So the max reads the bf16 row itself, widening 16 values
// in registers (RowMax of a bf16 row), while the converter's stores drain;
// the exponentials then read the scratch row. Exact either way (widening a
// bf16 is exact), so the same bits. Only short rows need it: on a long row
// the first stores have drained before the max reaches them, and widening
// again costs more than reading the f32 copy from L1 ((2048, 4096) bf16
// cross-entropy 3-6 % slower read from the source, three alternating runs).
// MaxRow reads a bf16 source row up to kShortRow elements, the widened row
// otherwise (for f32, LoadRow's widened row is the source itself). The
// softmax backward's LaneDot reads two freshly widened rows the same way;
// reading its bf16 rows instead measured no change (Softmax forward +
// backward, 20000 calls on (2048, 256)), so it does not.
inline constexpr int64_t kShortRow = 1024;

template <typename T, typename A>
OCTET_INLINE A MaxRow(const T* src, const A* widened, int64_t n) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (n <= kShortRow) return RowMax(src, n);
  }
  return RowMax(widened, n);
}

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

// ---- cross-entropy ----------------------------------------------------------

// NOTE [fused cross-entropy]: forward reads each logits row once into the
// compute type (in cache), takes max and sum(exp(x - max)) to get
// lse = logsumexp(row), and writes loss = lse - x[target] and lse. Only lse
// (N numbers) is saved besides the logits; backward recomputes
// softmax = exp(x - lse) element by element and writes
// dlogits = (softmax - onehot) * g directly, so no (N, V) probability tensor
// ever exists. Targets are validated in a serial pass before any row work so
// an error can be reported (not thrown from inside an OpenMP region).

template <typename I>
CrossEntropyFwdResult ValidateTargets(const I* t, int64_t n, int64_t v, int64_t ignore_index) {
  CrossEntropyFwdResult r;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ti = static_cast<int64_t>(t[i]);
    if (ti == ignore_index) continue;
    if (ti < 0 || ti >= v) {
      r.bad_position = i;
      r.bad_value = ti;
      return r;
    }
    ++r.count;
  }
  return r;
}

// Rows [r0, r1) of the cross-entropy forward (NOTE [fused cross-entropy]):
// loss and logsumexp of each row; xbuf: (v) scratch.
template <typename T, typename I, typename A = AccType<T>>
OCTET_INLINE void CeFwdRange(const T* x, const I* t, int64_t v, int64_t ignore_index, A* lp, A* sp, int64_t r0,
                             int64_t r1, A* xbuf) {
  for (int64_t row = r0; row < r1; ++row) {
    // Widened once by the row converter, not on each read (RowIn): GCC does
    // not vectorise the bf16 widening inside these lane sums 16 wide
    // (octet_norm_bench CrossEntropyFwdBwd bf16, AVX-512 build: 5.1 ms with
    // RowIn, against 3.8 for f32). Nor does widening it with the max in one
    // pass help: 2.2 -> 3.0-3.3 ms (2026-11-28), against the row converter.
    const A* xr = LoadRow(x + row * v, v, xbuf);
    const A m = MaxRow(x + row * v, xr, v);  // NOTE [max from the source row]
    const A log_s = std::log(LaneSum<A>(v, [&](int64_t i) { return Exp(xr[i] - m); }));
    const int64_t ti = static_cast<int64_t>(t[row]);
    sp[row] = m + log_s;
    lp[row] = ti == ignore_index ? A(0) : log_s - (xr[ti] - m);
  }
}

// Rows [r0, r1) of the cross-entropy backward: dlogits = (softmax - onehot)
// * g, softmax recomputed from lse; xbuf, dbuf: (v) scratch. A T other than
// A is built and narrowed kCeChunk columns at a time, so the narrowing's
// stores to memory overlap the next chunk's exponentials instead of
// following the whole row (bf16 octet_norm_bench CrossEntropyFwdBwd, Zen 5,
// 2026-11-28, three alternating rounds: 2.23-2.42 -> 1.99-2.38 ms; f32
// 1.87-2.16 in the same runs).
inline constexpr int64_t kCeChunk = 256;

template <typename T, typename I, typename A = AccType<T>>
OCTET_INLINE void CeBwdRange(const T* x, const I* t, const A* sp, const A* gp, int64_t gstride, double scale,
                             int64_t v, int64_t ignore_index, T* dp, int64_t r0, int64_t r1, A* xbuf, A* dbuf) {
  constexpr int64_t kChunk = std::is_same_v<T, A> ? std::numeric_limits<int64_t>::max() : kCeChunk;
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t ti = static_cast<int64_t>(t[row]);
    T* drow = dp + row * v;
    if (ti == ignore_index) {
      A* dr = RowOut(drow, dbuf);
      for (int64_t i = 0; i < v; ++i) dr[i] = 0;
      StoreRow(dr, drow, v);
      continue;
    }
    const A g = static_cast<A>(static_cast<double>(gp[row * gstride]) * scale);
    const RowIn<T> xr(x + row * v, v, xbuf);
    const A l = sp[row];
    for (int64_t c0 = 0, w = 0; c0 < v; c0 += w) {
      w = std::min(kChunk, v - c0);
      A* dr = RowOut(drow + c0, dbuf);
      for (int64_t i = 0; i < w; ++i) dr[i] = Exp(xr[c0 + i] - l) * g;
      if (ti >= c0 && ti < c0 + w) dr[ti - c0] -= g;
      StoreRow(dr, drow + c0, w);
    }
  }
}

template <typename T, typename I>
CrossEntropyFwdResult CrossEntropyFwdTyped(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                           const Tensor& loss, const Tensor& lse) {
  using A = AccType<T>;
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  const I* t = targets.data<I>();
  const CrossEntropyFwdResult r = ValidateTargets(t, n, v, ignore_index);
  if (r.bad_position >= 0) return r;
  const T* x = logits.data<T>();
  A* lp = loss.data<A>();
  A* sp = lse.data<A>();
  const auto range = IsaBuild<&CeFwdRange<T, I, A>>();
  ParallelFor(n, RowGrain(v), [&](int64_t r0, int64_t r1) {
    std::vector<A> xbuf(v);
    range(x, t, v, ignore_index, lp, sp, r0, r1, xbuf.data());
  });
  return r;
}

template <typename T, typename I>
void CrossEntropyBwdTyped(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                          double scale, int64_t ignore_index, const Tensor& dlogits) {
  using A = AccType<T>;
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  const I* t = targets.data<I>();
  const T* x = logits.data<T>();
  const A* sp = lse.data<A>();
  const A* gp = dloss.data<A>();
  const int64_t gstride = dloss.stride(0);
  T* dp = dlogits.data<T>();
  const auto range = IsaBuild<&CeBwdRange<T, I, A>>();
  ParallelFor(n, RowGrain(v), [&](int64_t r0, int64_t r1) {
    std::vector<A> xbuf(v), dbuf(v);
    range(x, t, sp, gp, gstride, scale, v, ignore_index, dp, r0, r1, xbuf.data(), dbuf.data());
  });
}

CrossEntropyFwdResult CrossEntropyFwdCpu(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                         const Tensor& loss, const Tensor& lse,
                                         bool /*prechecked: the host check is free*/) {
  CrossEntropyFwdResult result;
  DispatchFloat(logits.dtype(), "cross_entropy", [&]<typename T>() {
    Dispatch<DType::kInt64, DType::kInt32>(targets.dtype(), "cross_entropy", [&]<typename I>() {
      result = CrossEntropyFwdTyped<T, I>(logits, targets, ignore_index, loss, lse);
    });
  });
  return result;
}

void CrossEntropyBwdCpu(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                        double scale, int64_t ignore_index, const Tensor& dlogits) {
  DispatchFloat(logits.dtype(), "cross_entropy backward", [&]<typename T>() {
    Dispatch<DType::kInt64, DType::kInt32>(targets.dtype(), "cross_entropy backward", [&]<typename I>() {
      CrossEntropyBwdTyped<T, I>(logits, targets, lse, dloss, scale, ignore_index, dlogits);
    });
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(softmax_fwd, DeviceType::kCPU, &SoftmaxFwdCpu);
OCTET_REGISTER_KERNEL(softmax_bwd, DeviceType::kCPU, &SoftmaxBwdCpu);
OCTET_REGISTER_KERNEL(cross_entropy_fwd, DeviceType::kCPU, &CrossEntropyFwdCpu);
OCTET_REGISTER_KERNEL(cross_entropy_bwd, DeviceType::kCPU, &CrossEntropyBwdCpu);

}  // namespace octet::cpu
