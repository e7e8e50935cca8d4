// CPU kernels of the attention family: fused causal attention, forward and
// backward (packing, work decomposition, OpenMP). The arithmetic on tiles is
// in attention_tiles.cc.
//
// NOTE [flash attention on CPU]
// The T x T score matrix is never formed. Queries and keys are cut into tiles
// of kTile (64) rows; a work item owns one (batch*head, query tile) and walks
// the key tiles 0..itself, keeping per query a running max m and a running
// sum l of exp(score - m) (online softmax), and an unnormalised output row
// that is rescaled by exp(m_old - m_new) whenever m grows. Scores are kept in
// the log2 domain (q is pre-multiplied by scale*log2(e)) so the exponential
// is one exp2. The per-row log-sum-exp (natural log) is saved for backward.
//
// Scores are computed transposed, S^T = K Q^T (keys x queries): then the
// softmax statistics of 64 queries are plain vertical vector max/sum over the
// key rows (no horizontal reductions), and every product of forward and
// backward has one shape, c (+)= a b where a is read by scalar broadcasts with
// any strides (transposed or not) and b/c are rows of vectors. Only the tile
// of queries is packed (transposed), once per work item; key/value tiles are
// read in place when the dtype is the compute type (any strides for K; unit
// column stride and D a multiple of 64 bytes for V), else converted into
// small tiles that stay in L1.
//
// Backward (flash-attention-2): per (query tile, key tile) pair, recompute
// P^T = exp2(S^T * scale*log2(e) - lse*log2(e)) from the saved log-sum-exp,
// dP^T = V dO^T, dS^T = P^T o (dP^T - D) with D_i = rowsum(dO_i o O_i), then
// dV += P^T dO, dK += dS^T Q, dQ += dS K (scale applied once at the end).
// Determinism: no two threads ever add into the same accumulator. When there
// are enough (batch, head) pairs one work item owns a whole head (all three
// gradients in one sweep, 5 products per tile pair); otherwise dK/dV are
// computed in one pass parallel over key tiles and dQ in a second pass
// parallel over query tiles (7 products per pair). Both visit the tile pairs
// of every accumulator in the same order with the same code, so the result
// has the same bits whatever the thread count or the path taken.
#include <omp.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include <octet/core/dtype_traits.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cpu/attention_tiles.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/cpu/transpose8x8.h>

namespace octet::cpu {
namespace {

using attn::BwdTile;
using attn::FwdTile;
using attn::kTile;
using attn::TileFns;

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

// ---------------------------------------------------------------------------
// Shared plumbing.

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

// A (B,H,T,D) tensor as a base pointer and element strides, P its element
// type (const for inputs), or none (null data) when undefined. Outputs may
// have any strides too: e.g. heads side by side in a (B,T,H*D) tensor (NOTE
// [attention in the qkv layout] in ops/attention.cc).
template <typename P>
struct HeadStrides {
  explicit HeadStrides(const Tensor& t) {
    if (!t.defined()) return;
    data = t.data<std::remove_const_t<P>>();
    sb = t.stride(0);
    sh = t.stride(1);
    st = t.stride(2);
    sd = t.stride(3);
    heads = t.size(1);
  }
  explicit operator bool() const { return data != nullptr; }
  // Row t0 of head bh (= b*H + h).
  P* Row(int64_t bh, int64_t t0) const { return data + (bh / heads) * sb + (bh % heads) * sh + t0 * st; }
  P* data = nullptr;
  int64_t sb = 0, sh = 0, st = 0, sd = 1, heads = 1;
};
template <typename T>
using Operand = HeadStrides<const T>;  // an input
template <typename T>
using OutOperand = HeadStrides<T>;  // an output

struct Geometry {
  explicit Geometry(const Tensor& q, int64_t lanes)
      : bh(q.size(0) * q.size(1)), t(q.size(2)), d(q.size(3)), dp((q.size(3) + lanes - 1) / lanes * lanes),
        nt((q.size(2) + kTile - 1) / kTile) {}
  int64_t bh, t, d, dp, nt;
  int64_t TileRows(int64_t tile) const { return std::min(kTile, t - tile * kTile); }
};

// dst[r*ldd + c] = mul * src[r*rs + c*cs] for r < rows, c < cols; zero for
// columns [cols, ldd) and rows [rows, rows_pad).
template <typename T, typename A>
void PackRows(const T* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, A mul, A* dst, int64_t ldd,
              int64_t rows_pad) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * rs;
    A* d = dst + r * ldd;
    if (cs == 1) {
      for (int64_t c = 0; c < cols; ++c) d[c] = mul * ConvertElement<A>(s[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c] = mul * ConvertElement<A>(s[c * cs]);
    }
    std::fill(d + cols, d + ldd, A(0));
  }
  std::fill(dst + rows * ldd, dst + rows_pad * ldd, A(0));
}

#if defined(__AVX2__)
// Eight f32 values of a row: src[0, 8) widened (bf16) or read (f32), times mul.
template <typename T>
OCTET_INLINE __m256 LoadEight(const T* src, __m256 mul) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_mul_ps(mul, _mm256_loadu_ps(src));
  } else {
    return _mm256_mul_ps(mul, convert_internal::Bf16x8ToFloat(reinterpret_cast<const uint16_t*>(src)));
  }
}
#endif

// dst[c*ldd + r] = mul * src[r*rs + c*cs] for r < rows, c < cols; zero for r in [rows, ldd).
// NOTE [transposed tiles]: f32 and bf16 rows with unit column stride are
// transposed in 8 x 8 blocks in registers (rows loaded as vectors, widened
// there); the element-by-element loop (strided loads, one conversion each)
// was a third of the time the backward spent filling its tiles (perf, small
// GPT at O2, Zen 5). The values are the same: one conversion and one
// multiply per element either way.
template <typename T, typename A>
void PackTransposed(const T* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, A mul, A* dst, int64_t ldd) {
  int64_t r8 = 0, c8 = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<A, float> && (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>)) {
    if (cs == 1) {
      r8 = rows / 8 * 8;
      c8 = cols / 8 * 8;
      const __m256 m = _mm256_set1_ps(mul);
      for (int64_t r = 0; r < r8; r += 8)
        for (int64_t c = 0; c < c8; c += 8) {
          __m256 v[8];
          for (int i = 0; i < 8; ++i) v[i] = LoadEight(src + (r + i) * rs + c, m);
          Transpose8x8InRegisters(v);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (c + i) * ldd + r, v[i]);
        }
    }
  }
#endif
  // What the blocks left: every column below row r8, and columns [c8, cols) above it.
  for (int64_t c = 0; c < cols; ++c) {
    const T* s = src + c * cs;
    A* d = dst + c * ldd;
    for (int64_t r = c < c8 ? r8 : 0; r < rows; ++r) d[r] = mul * ConvertElement<A>(s[r * rs]);
    std::fill(d + rows, d + ldd, A(0));
  }
}

// Stores rows (rows x Dp, compute type) times mul into rows t0.. of head bh of out.
template <typename T, typename A>
void StoreRows(const A* src, int64_t dp, int64_t rows, int64_t d, A mul, const OutOperand<T>& out, int64_t bh,
               int64_t t0) {
  for (int64_t r = 0; r < rows; ++r) {
    T* dst = out.Row(bh, t0 + r);
    const A* row = src + r * dp;
    if (out.sd == 1) {
      for (int64_t c = 0; c < d; ++c) dst[c] = ConvertElement<T>(row[c] * mul);
    } else {
      for (int64_t c = 0; c < d; ++c) dst[c * out.sd] = ConvertElement<T>(row[c] * mul);
    }
  }
}

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
bool HeadsFillThreads(const Geometry& g) {
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return g.bh % threads == 0 || g.bh >= 4 * threads;
}

// ---------------------------------------------------------------------------
// Forward.

template <typename A>
struct FwdWorkspace {
  // head_rows: the rows of a whole head's K and V when they are packed once
  // per head (NOTE [forward per head]), else 0.
  FwdWorkspace(const Geometry& g, int64_t head_rows)
      : qt(g.d * kTile), k(std::max(kTile, head_rows) * g.d), v(std::max(kTile, head_rows) * g.dp),
        st(kTile * kTile), o(kTile * g.dp), m(kTile), l(kTile) {}
  Buffer<A> qt, k, v, st, o, m, l;
};

// NOTE [forward per head]: a work item is one (batch*head, query tile), and
// converts the key and value tiles it reads (bf16 -> f32) itself: query
// tile i converts i + 1 key tiles, so a head of n tiles converted its K and V
// n(n+1)/2 times. When there are enough heads to keep every thread busy (as
// NOTE [flash attention on CPU]'s backward decides), an item is a whole head
// instead: its K and V are converted once, then its query tiles run in the
// same order with the same code, so the results are the same bits.
template <typename T>
void ForwardTyped(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, double scale, const Tensor& out_t,
                  const Tensor& lse_t) {
  using A = AccType<T>;
  const Geometry g(q_t, attn::kPadElems<A>);
  const Operand<T> q(q_t), k(k_t), v(v_t);
  const OutOperand<T> out(out_t);
  A* lse = lse_t.data<A>();  // (B,H,T)
  const TileFns<A> fns = attn::ActiveTileFns<A>();
  const A qmul = static_cast<A>(scale * kLog2e);
  // Keys/values are read in place when no conversion is needed.
  constexpr bool kDirect = std::is_same_v<T, A>;
  const bool v_direct = kDirect && v.sd == 1 && g.d == g.dp;
  const bool per_head = !kDirect && HeadsFillThreads(g);

  // Query tile `qtile` of head bh. head_k / head_v: the head's packed K (T x
  // D) and V (T x Dp) rows, or null to pack each key tile here.
  auto query_tile = [&](FwdWorkspace<A>& ws, int64_t bh, int64_t qtile, const A* head_k, const A* head_v) {
    const int64_t q0 = qtile * kTile, qn = g.TileRows(qtile);
    PackTransposed(q.Row(bh, q0), q.st, q.sd, qn, g.d, qmul, ws.qt.get(), kTile);
    std::fill(ws.m.get(), ws.m.get() + kTile, -std::numeric_limits<A>::infinity());
    std::fill(ws.l.get(), ws.l.get() + kTile, A(0));
    std::fill(ws.o.get(), ws.o.get() + qn * g.dp, A(0));  // rescaled by alpha = 0 on the first key tile
    FwdTile<A> t{};
    t.qt = ws.qt.get();
    t.d = g.d;
    t.dp = g.dp;
    t.qn = qn;
    t.st = ws.st.get();
    t.o = ws.o.get();
    t.m = ws.m.get();
    t.l = ws.l.get();
    for (int64_t ktile = 0; ktile <= qtile; ++ktile) {
      const int64_t k0 = ktile * kTile, kn = g.TileRows(ktile);
      if constexpr (kDirect) {
        t.k = k.Row(bh, k0);
        t.k_rs = k.st;
        t.k_cs = k.sd;
      } else {
        if (head_k != nullptr) {
          t.k = head_k + k0 * g.d;
        } else {
          PackRows(k.Row(bh, k0), k.st, k.sd, kn, g.d, A(1), ws.k.get(), g.d, kn);
          t.k = ws.k.get();
        }
        t.k_rs = g.d;
        t.k_cs = 1;
      }
      t.v = ws.v.get();
      t.v_rs = g.dp;
      if constexpr (kDirect) {
        if (v_direct) {
          t.v = v.Row(bh, k0);
          t.v_rs = v.st;
        }
      }
      if (head_v != nullptr)
        t.v = head_v + k0 * g.dp;
      else if (t.v == ws.v.get())
        PackRows(v.Row(bh, k0), v.st, v.sd, kn, g.d, A(1), ws.v.get(), g.dp, kn);
      t.kn = kn;
      t.diagonal = ktile == qtile;
      fns.fwd(t);
    }
    const A* o = ws.o.get();
    const A* m = ws.m.get();
    const A* l = ws.l.get();
    for (int64_t i = 0; i < qn; ++i) {
      StoreRows(o + i * g.dp, g.dp, 1, g.d, A(1) / l[i], out, bh, q0 + i);
      lse[bh * g.t + q0 + i] = static_cast<A>((m[i] + std::log2(l[i])) * A(kLn2));
    }
  };

  if (per_head) {  // NOTE [forward per head]
    ParallelItems(
        g.bh, [&] { return FwdWorkspace<A>(g, g.t); },
        [&](FwdWorkspace<A>& ws, int64_t bh) {
          PackRows(k.Row(bh, 0), k.st, k.sd, g.t, g.d, A(1), ws.k.get(), g.d, g.t);
          PackRows(v.Row(bh, 0), v.st, v.sd, g.t, g.d, A(1), ws.v.get(), g.dp, g.t);
          for (int64_t qtile = g.nt - 1; qtile >= 0; --qtile) query_tile(ws, bh, qtile, ws.k.get(), ws.v.get());
        });
    return;
  }
  ParallelItems(
      g.bh * g.nt, [&] { return FwdWorkspace<A>(g, 0); },
      [&](FwdWorkspace<A>& ws, int64_t item) {
        const int64_t qtile = g.nt - 1 - item / g.bh;  // largest first
        query_tile(ws, item % g.bh, qtile, nullptr, nullptr);
      });
}

void CausalAttentionFwdCpu(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                           const Tensor& lse) {
  DispatchFloat(q.dtype(), "causal_attention", [&]<typename T>() { ForwardTyped<T>(q, k, v, scale, out, lse); });
}

// ---------------------------------------------------------------------------
// Backward.

template <typename T>
struct BwdInputs {
  BwdInputs(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t, const Tensor& dout_t,
            const Tensor& lse_t)
      : q(q_t), k(k_t), v(v_t), dout(dout_t), out(out_t), lse(lse_t.data<AccType<T>>()) {}
  Operand<T> q, k, v, dout, out;
  const AccType<T>* lse;      // (B,H,T)
};

// What backward reads of one head, in the compute type: for each tile, Q^T
// and dO^T (D x kTile), lse*log2(e) and D = rowsum(dO o O); and rows of Q,
// dO, K, V (T x Dp, zero padded), each read in place instead when no
// conversion or padding is needed.
template <typename A>
struct HeadPack {
  template <typename T>
  HeadPack(const Geometry& g, const BwdInputs<T>& in)
      : nt(g.nt), tq(g.d * kTile), rows(g.nt * kTile), dp(g.dp), size(2 * nt * tq + 4 * rows * dp + 2 * rows) {
    const Operand<T>* ops[4] = {&in.q, &in.dout, &in.k, &in.v};
    for (int i = 0; i < 4; ++i) direct[i] = std::is_same_v<T, A> && ops[i]->sd == 1 && g.d == g.dp;
  }
  A* Qt(A* base, int64_t tile) const { return base + tile * tq; }
  A* DOt(A* base, int64_t tile) const { return base + (nt + tile) * tq; }
  A* Lse2(A* base, int64_t tile) const { return Block(base, 4) + tile * kTile; }
  A* Di(A* base, int64_t tile) const { return Block(base, 4) + rows + tile * kTile; }
  // Packed rows of operand `which` (0 q, 1 dout, 2 k, 3 v), from row 0 of the head.
  A* PackedRows(A* base, int which) const { return Block(base, which); }

  enum Which { kQ = 0, kDout = 1, kK = 2, kV = 3 };
  int64_t nt, tq, rows, dp, size;
  bool direct[4];

 private:
  // Start of the which-th (rows x Dp) block; which == 4 is the two per-row vectors.
  A* Block(A* base, int64_t which) const { return base + 2 * nt * tq + which * rows * dp; }
};

// Row 0 and row stride of the four row operands of one head.
template <typename A>
struct HeadRows {
  const A* p[4];
  int64_t rs[4];
};

template <typename T, typename A>
HeadRows<A> RowsOfHead(const BwdInputs<T>& in, const HeadPack<A>& hp, A* base, int64_t bh) {
  const Operand<T>* ops[4] = {&in.q, &in.dout, &in.k, &in.v};
  HeadRows<A> r;
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, A>) {
      if (hp.direct[i]) {
        r.p[i] = ops[i]->Row(bh, 0);
        r.rs[i] = ops[i]->st;
        continue;
      }
    }
    r.p[i] = hp.PackedRows(base, i);
    r.rs[i] = hp.dp;
  }
  return r;
}

template <typename T, typename A>
void FillHeadTile(const BwdInputs<T>& in, const Geometry& g, const HeadPack<A>& hp, A* base, int64_t bh,
                  int64_t tile) {
  const int64_t t0 = tile * kTile, n = g.TileRows(tile);
  PackTransposed(in.q.Row(bh, t0), in.q.st, in.q.sd, n, g.d, A(1), hp.Qt(base, tile), kTile);
  PackTransposed(in.dout.Row(bh, t0), in.dout.st, in.dout.sd, n, g.d, A(1), hp.DOt(base, tile), kTile);
  const Operand<T>* ops[4] = {&in.q, &in.dout, &in.k, &in.v};
  for (int i = 0; i < 4; ++i) {
    if (hp.direct[i]) continue;
    PackRows(ops[i]->Row(bh, t0), ops[i]->st, ops[i]->sd, n, g.d, A(1), hp.PackedRows(base, i) + t0 * g.dp, g.dp,
             kTile);
  }
  A* lse2 = hp.Lse2(base, tile);
  A* di = hp.Di(base, tile);
  const HeadRows<A> rows = RowsOfHead(in, hp, base, bh);
  std::vector<T> o_row(in.out.sd == 1 ? 0 : g.d);  // a row of O with strided columns, gathered
  for (int64_t i = 0; i < kTile; ++i) {
    if (i < n) {
      lse2[i] = in.lse[bh * g.t + t0 + i] * static_cast<A>(kLog2e);
      // D_i = rowsum(dO_i o O_i), dO_i from its row in the compute type
      // (packed above, or read in place): lanes of contiguous elements.
      const T* o = in.out.Row(bh, t0 + i);
      if (in.out.sd != 1) {
        for (int64_t c = 0; c < g.d; ++c) o_row[c] = o[c * in.out.sd];
        o = o_row.data();
      }
      const A* dout = rows.p[HeadPack<A>::kDout] + (t0 + i) * rows.rs[HeadPack<A>::kDout];
      di[i] = LaneDot<A>(g.d, dout, o);
    } else {
      lse2[i] = std::numeric_limits<A>::infinity();  // P = 0 for padding rows
      di[i] = 0;
    }
  }
}

template <typename A>
BwdTile<A> MakeBwdTile(const Geometry& g, const HeadPack<A>& hp, A* base, const HeadRows<A>& rows, int64_t qtile,
                       int64_t ktile, A c) {
  using P = HeadPack<A>;
  BwdTile<A> t{};
  t.qt = hp.Qt(base, qtile);
  t.dot = hp.DOt(base, qtile);
  t.lse2 = hp.Lse2(base, qtile);
  t.di = hp.Di(base, qtile);
  t.qr = rows.p[P::kQ] + qtile * kTile * rows.rs[P::kQ];
  t.dor = rows.p[P::kDout] + qtile * kTile * rows.rs[P::kDout];
  t.kr = rows.p[P::kK] + ktile * kTile * rows.rs[P::kK];
  t.vr = rows.p[P::kV] + ktile * kTile * rows.rs[P::kV];
  t.q_rs = rows.rs[P::kQ];
  t.do_rs = rows.rs[P::kDout];
  t.k_rs = rows.rs[P::kK];
  t.v_rs = rows.rs[P::kV];
  t.d = g.d;
  t.dp = g.dp;
  t.qn = g.TileRows(qtile);
  t.kn = g.TileRows(ktile);
  t.diagonal = qtile == ktile;
  t.c = c;
  return t;
}

template <typename A>
struct BwdWorkspace {
  BwdWorkspace(const Geometry& g, int64_t pack_size, int64_t dq_rows)
      : pack(pack_size), pt(kTile * kTile), dst(kTile * kTile), dk(kTile * g.dp), dv(kTile * g.dp),
        dq(dq_rows * g.dp) {}
  Buffer<A> pack, pt, dst, dk, dv, dq;
};

template <typename T>
void BackwardTyped(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t,
                   const Tensor& dout_t, const Tensor& lse_t, double scale, const Tensor& dq_t, const Tensor& dk_t,
                   const Tensor& dv_t) {
  using A = AccType<T>;
  const Geometry g(q_t, attn::kPadElems<A>);
  const BwdInputs<T> in(q_t, k_t, v_t, out_t, dout_t, lse_t);
  const HeadPack<A> hp(g, in);
  const TileFns<A> fns = attn::ActiveTileFns<A>();
  const A c = static_cast<A>(scale * kLog2e);
  const A s = static_cast<A>(scale);
  const OutOperand<T> dq(dq_t), dk(dk_t), dv(dv_t);  // each may be undefined
  const bool want_kv = dk || dv;

  // Accumulates the dK/dV of key tile `ktile` over query tiles ktile.. and stores them.
  auto key_tile = [&](BwdWorkspace<A>& ws, A* base, const HeadRows<A>& rows, int64_t bh, int64_t ktile,
                      A* dq_head) {
    std::fill(ws.dk.get(), ws.dk.get() + kTile * g.dp, A(0));
    std::fill(ws.dv.get(), ws.dv.get() + kTile * g.dp, A(0));
    for (int64_t qtile = ktile; qtile < g.nt; ++qtile) {
      BwdTile<A> t = MakeBwdTile(g, hp, base, rows, qtile, ktile, c);
      t.pt = ws.pt.get();
      t.dst = ws.dst.get();
      t.dk = dk ? ws.dk.get() : nullptr;
      t.dv = dv ? ws.dv.get() : nullptr;
      t.dq = dq_head ? dq_head + qtile * kTile * g.dp : nullptr;
      fns.bwd(t);
    }
    const int64_t kn = g.TileRows(ktile), k0 = ktile * kTile;
    if (dk) StoreRows(ws.dk.get(), g.dp, kn, g.d, s, dk, bh, k0);
    if (dv) StoreRows(ws.dv.get(), g.dp, kn, g.d, A(1), dv, bh, k0);
  };

  const bool per_head = dq && want_kv && HeadsFillThreads(g);
  if (per_head) {
    // One work item per head: all three gradients in one sweep.
    ParallelItems(
        g.bh, [&] { return BwdWorkspace<A>(g, hp.size, g.nt * kTile); },
        [&](BwdWorkspace<A>& ws, int64_t bh) {
          A* base = ws.pack.get();
          for (int64_t tile = 0; tile < g.nt; ++tile) FillHeadTile(in, g, hp, base, bh, tile);
          const HeadRows<A> rows = RowsOfHead(in, hp, base, bh);
          A* dq_head = ws.dq.get();
          std::fill(dq_head, dq_head + g.nt * kTile * g.dp, A(0));
          for (int64_t ktile = 0; ktile < g.nt; ++ktile) key_tile(ws, base, rows, bh, ktile, dq_head);
          StoreRows(dq_head, g.dp, g.t, g.d, s, dq, bh, 0);
        });
    return;
  }

  // Few heads: pack every head first, then dK/dV over key tiles and dQ over query tiles.
  Buffer<A> packs(g.bh * hp.size);
  ParallelItems(
      g.bh * g.nt, [] { return 0; },
      [&](int, int64_t item) {
        const int64_t bh = item / g.nt;
        FillHeadTile(in, g, hp, packs.get() + bh * hp.size, bh, item % g.nt);
      });
  if (want_kv) {
    ParallelItems(
        g.bh * g.nt, [&] { return BwdWorkspace<A>(g, 0, 0); },
        [&](BwdWorkspace<A>& ws, int64_t item) {
          const int64_t ktile = item / g.bh, bh = item % g.bh;  // most query tiles first
          A* base = packs.get() + bh * hp.size;
          key_tile(ws, base, RowsOfHead(in, hp, base, bh), bh, ktile, nullptr);
        });
  }
  if (dq) {
    ParallelItems(
        g.bh * g.nt, [&] { return BwdWorkspace<A>(g, 0, kTile); },
        [&](BwdWorkspace<A>& ws, int64_t item) {
          const int64_t qtile = g.nt - 1 - item / g.bh, bh = item % g.bh;  // most key tiles first
          A* base = packs.get() + bh * hp.size;
          const HeadRows<A> rows = RowsOfHead(in, hp, base, bh);
          A* acc = ws.dq.get();
          std::fill(acc, acc + kTile * g.dp, A(0));
          for (int64_t ktile = 0; ktile <= qtile; ++ktile) {
            BwdTile<A> t = MakeBwdTile(g, hp, base, rows, qtile, ktile, c);
            t.pt = ws.pt.get();
            t.dst = ws.dst.get();
            t.dq = acc;
            fns.bwd(t);
          }
          StoreRows(acc, g.dp, g.TileRows(qtile), g.d, s, dq, bh, qtile * kTile);
        });
  }
}

void CausalAttentionBwdCpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                           const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  DispatchFloat(q.dtype(), "causal_attention backward", [&]<typename T>() {
    BackwardTyped<T>(q, k, v, out, dout, lse, scale, dq, dk, dv);
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(causal_attention_fwd, DeviceType::kCPU, &CausalAttentionFwdCpu);
OCTET_REGISTER_KERNEL(causal_attention_bwd, DeviceType::kCPU, &CausalAttentionBwdCpu);

}  // namespace octet::cpu
