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

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/scaling.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cpu/attention_bf16.h>
#include <octet/ops/cpu/attention_pack.h>
#include <octet/ops/cpu/attention_tiles.h>
#include <octet/ops/cpu/attention_work.h>
#include <octet/ops/cpu/row_helpers.h>

namespace octet::cpu {
namespace {

using attn::Buffer;
using attn::BwdTile;
using attn::Fp8Code;
using attn::Operand;
using attn::OutOperand;
using attn::PackRows;
using attn::PackTransposed;
using attn::StoreRows;
using attn::FwdTile;
using attn::Geometry;
using attn::HeadsFillThreads;
using attn::kTile;
using attn::ParallelItems;
using attn::TileFns;

using attn::kLn2;
using attn::kLog2e;

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
// TIn: q, k, v's element type (TOut, or Fp8Code read through `lut`: NOTE
// [fp8 attention operands]); TOut: out's.
template <typename TIn, typename TOut>
void ForwardTyped(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, double scale, const Tensor& out_t,
                  const Tensor& lse_t, const attn::Fp8Table<AccType<TOut>>* lut) {
  using A = AccType<TOut>;
  const Geometry g(q_t, attn::kPadElems<A>);
  const Operand<TIn> q(q_t), k(k_t), v(v_t);
  const OutOperand<TOut> out(out_t);
  A* lse = lse_t.data<A>();  // (B,H,T)
  const TileFns<A> fns = attn::ActiveTileFns<A>();
  const A qmul = static_cast<A>(scale * kLog2e);
  // Keys/values are read in place when no conversion is needed.
  constexpr bool kDirect = std::is_same_v<TIn, A>;
  const bool v_direct = kDirect && v.sd == 1 && g.d == g.dp;
  const bool per_head = !kDirect && HeadsFillThreads(g);

  // Query tile `qtile` of head bh. head_k / head_v: the head's packed K (T x
  // D) and V (T x Dp) rows, or null to pack each key tile here.
  auto query_tile = [&](FwdWorkspace<A>& ws, int64_t bh, int64_t qtile, const A* head_k, const A* head_v) {
    const int64_t q0 = qtile * kTile, qn = g.TileRows(qtile);
    PackTransposed(q.Row(bh, q0), q.st, q.sd, qn, g.d, qmul, ws.qt.get(), kTile, lut);
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
          PackRows(k.Row(bh, k0), k.st, k.sd, kn, g.d, A(1), ws.k.get(), g.d, kn, lut);
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
        PackRows(v.Row(bh, k0), v.st, v.sd, kn, g.d, A(1), ws.v.get(), g.dp, kn, lut);
      t.kn = kn;
      t.diagonal = ktile == qtile;
      fns.fwd(t);
    }
    attn::StoreQueryTile(ws.o.get(), ws.m.get(), ws.l.get(), g, out, lse, bh, q0, qn, StoreRows<TOut, A>);
  };

  if (per_head) {  // NOTE [forward per head]
    ParallelItems(
        g.bh, [&] { return FwdWorkspace<A>(g, g.t); },
        [&](FwdWorkspace<A>& ws, int64_t bh) {
          PackRows(k.Row(bh, 0), k.st, k.sd, g.t, g.d, A(1), ws.k.get(), g.d, g.t, lut);
          PackRows(v.Row(bh, 0), v.st, v.sd, g.t, g.d, A(1), ws.v.get(), g.dp, g.t, lut);
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

// The bf16 bits of the values of NOTE [fp8 attention operands]'s table for
// a bfloat16 output (exact: the table holds bf16 values).
std::array<uint16_t, 256> Fp8CodeBits(const Tensor& codes) {
  const auto values = attn::Fp8CodeTable<bfloat16>(codes.dtype(), ScaleInvValue(codes));
  std::array<uint16_t, 256> bits;
  for (int c = 0; c < 256; ++c) bits[c] = FloatToBf16Bits(values.values[c]);
  return bits;
}

// Whether bfloat16 attention runs on BF16 dot products (NOTE [bf16 attention tiles]).
// kAmxBf16 runs the same tiles with their products on AMX.
bool UseBf16Dot() { return octet::internal::ActiveAttentionIsa() >= octet::internal::AttentionIsa::kAvx512Bf16; }

void CausalAttentionFwdCpu(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                           const Tensor& lse) {
  if (out.dtype() == DType::kBFloat16 && UseBf16Dot()) {
    if (IsFp8(q.dtype())) {
      const auto lut = Fp8CodeBits(q);
      attn::ForwardBf16Dot<Fp8Code>(q, k, v, scale, out, lse, lut.data());
    } else {
      attn::ForwardBf16Dot<bfloat16>(q, k, v, scale, out, lse, nullptr);
    }
    return;
  }
  DispatchFloat(out.dtype(), "causal_attention", [&]<typename T>() {
    if (IsFp8(q.dtype())) {
      const auto lut = attn::Fp8CodeTable<T>(q.dtype(), ScaleInvValue(q));
      ForwardTyped<Fp8Code, T>(q, k, v, scale, out, lse, &lut);
    } else {
      ForwardTyped<T, T>(q, k, v, scale, out, lse, nullptr);
    }
  });
}

// ---------------------------------------------------------------------------
// Backward.

// TIn, TOut and lut as in ForwardTyped.
template <typename TIn, typename TOut>
struct BwdInputs {
  BwdInputs(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t, const Tensor& dout_t,
            const Tensor& lse_t, const attn::Fp8Table<AccType<TOut>>* lut_)
      : q(q_t), k(k_t), v(v_t), dout(dout_t), out(out_t), lse(lse_t.data<AccType<TOut>>()), lut(lut_) {}
  Operand<TIn> q, k, v;
  Operand<TOut> dout, out;
  const AccType<TOut>* lse;  // (B,H,T)
  const attn::Fp8Table<AccType<TOut>>* lut;
};

// What backward reads of one head, in the compute type: for each tile, Q^T
// and dO^T (D x kTile), lse*log2(e) and D = rowsum(dO o O); and rows of Q,
// dO, K, V (T x Dp, zero padded), each read in place instead when no
// conversion or padding is needed.
template <typename A>
struct HeadPack {
  template <typename TIn, typename TOut>
  HeadPack(const Geometry& g, const BwdInputs<TIn, TOut>& in)
      : nt(g.nt), tq(g.d * kTile), rows(g.nt * kTile), dp(g.dp), size(2 * nt * tq + 4 * rows * dp + 2 * rows) {
    const bool d_fits = g.d == g.dp;
    direct[kQ] = std::is_same_v<TIn, A> && in.q.sd == 1 && d_fits;
    direct[kDout] = std::is_same_v<TOut, A> && in.dout.sd == 1 && d_fits;
    direct[kK] = std::is_same_v<TIn, A> && in.k.sd == 1 && d_fits;
    direct[kV] = std::is_same_v<TIn, A> && in.v.sd == 1 && d_fits;
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

template <typename TIn, typename TOut, typename A>
HeadRows<A> RowsOfHead(const BwdInputs<TIn, TOut>& in, const HeadPack<A>& hp, A* base, int64_t bh) {
  HeadRows<A> r;
  // Operand i read in place (direct: its element type is A), else its packed rows.
  auto set = [&]<typename T>(int i, const Operand<T>& op) {
    if constexpr (std::is_same_v<T, A>) {
      if (hp.direct[i]) {
        r.p[i] = op.Row(bh, 0);
        r.rs[i] = op.st;
        return;
      }
    }
    r.p[i] = hp.PackedRows(base, i);
    r.rs[i] = hp.dp;
  };
  set(HeadPack<A>::kQ, in.q);
  set(HeadPack<A>::kDout, in.dout);
  set(HeadPack<A>::kK, in.k);
  set(HeadPack<A>::kV, in.v);
  return r;
}

template <typename TIn, typename TOut, typename A>
void FillHeadTile(const BwdInputs<TIn, TOut>& in, const Geometry& g, const HeadPack<A>& hp, A* base, int64_t bh,
                  int64_t tile) {
  const int64_t t0 = tile * kTile, n = g.TileRows(tile);
  PackTransposed(in.q.Row(bh, t0), in.q.st, in.q.sd, n, g.d, A(1), hp.Qt(base, tile), kTile, in.lut);
  PackTransposed(in.dout.Row(bh, t0), in.dout.st, in.dout.sd, n, g.d, A(1), hp.DOt(base, tile), kTile);
  // Rows of operand i (not read in place) packed from row t0.
  auto pack = [&]<typename T>(int i, const Operand<T>& op, const attn::Fp8Table<A>* lut) {
    if (!hp.direct[i])
      PackRows(op.Row(bh, t0), op.st, op.sd, n, g.d, A(1), hp.PackedRows(base, i) + t0 * g.dp, g.dp, kTile, lut);
  };
  pack(HeadPack<A>::kQ, in.q, in.lut);
  pack(HeadPack<A>::kDout, in.dout, nullptr);
  pack(HeadPack<A>::kK, in.k, in.lut);
  pack(HeadPack<A>::kV, in.v, in.lut);
  const HeadRows<A> rows = RowsOfHead(in, hp, base, bh);
  // D_i from dO's rows in the compute type (packed above, or read in place).
  const A* dout = rows.p[HeadPack<A>::kDout] + t0 * rows.rs[HeadPack<A>::kDout];
  attn::TileRowStats(in.lse, in.out, g, bh, t0, n,
                     [&](int64_t i) { return dout + i * rows.rs[HeadPack<A>::kDout]; }, hp.Lse2(base, tile),
                     hp.Di(base, tile));}

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

template <typename TIn, typename TOut>
void BackwardTyped(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t,
                   const Tensor& dout_t, const Tensor& lse_t, double scale, const Tensor& dq_t, const Tensor& dk_t,
                   const Tensor& dv_t, const attn::Fp8Table<AccType<TOut>>* lut) {
  using A = AccType<TOut>;
  const Geometry g(q_t, attn::kPadElems<A>);
  const BwdInputs<TIn, TOut> in(q_t, k_t, v_t, out_t, dout_t, lse_t, lut);
  const HeadPack<A> hp(g, in);
  const TileFns<A> fns = attn::ActiveTileFns<A>();
  const A c = static_cast<A>(scale * kLog2e);
  const A s = static_cast<A>(scale);
  const OutOperand<TOut> dq(dq_t), dk(dk_t), dv(dv_t);  // each may be undefined
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
  if (out.dtype() == DType::kBFloat16 && UseBf16Dot()) {
    if (IsFp8(q.dtype())) {
      const auto lut = Fp8CodeBits(q);
      attn::BackwardBf16Dot<Fp8Code>(q, k, v, out, dout, lse, scale, dq, dk, dv, lut.data());
    } else {
      attn::BackwardBf16Dot<bfloat16>(q, k, v, out, dout, lse, scale, dq, dk, dv, nullptr);
    }
    return;
  }
  DispatchFloat(out.dtype(), "causal_attention backward", [&]<typename T>() {
    if (IsFp8(q.dtype())) {
      const auto lut = attn::Fp8CodeTable<T>(q.dtype(), ScaleInvValue(q));
      BackwardTyped<Fp8Code, T>(q, k, v, out, dout, lse, scale, dq, dk, dv, &lut);
    } else {
      BackwardTyped<T, T>(q, k, v, out, dout, lse, scale, dq, dk, dv, nullptr);
    }
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(causal_attention_fwd, DeviceType::kCPU, &CausalAttentionFwdCpu);
OCTET_REGISTER_KERNEL(causal_attention_bwd, DeviceType::kCPU, &CausalAttentionBwdCpu);
// FP8 q, k, v are read through a table (NOTE [fp8 attention operands] in ops/cpu/attention_pack.h).
OCTET_REGISTER_KERNEL(attention_reads_fp8, DeviceType::kCPU, +[](Device) { return true; });

}  // namespace octet::cpu
