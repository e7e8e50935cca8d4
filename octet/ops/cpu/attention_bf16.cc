// The fused CPU attention on BF16 dot products, forward and backward: what
// is packed where, the work items and the OpenMP loops (NOTE [bf16
// attention tiles] in attention_bf16.h). The arithmetic is in
// attention_bf16_tiles.cc.
#include <octet/ops/cpu/attention_bf16.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/error.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cpu/attention_bf16_tiles.h>
#include <octet/ops/cpu/attention_pack.h>
#include <octet/ops/cpu/attention_work.h>
#include <octet/ops/cpu/row_helpers.h>

namespace octet::cpu::attn {

#if defined(__x86_64__)
namespace {

// One head's packed blocks (layouts: attention_bf16_tiles.h).
struct PackLayout {
  PackLayout(const Geometry& g, int blocks) : dp(g.dp), block(g.nt * kTile * g.dp), size(blocks * block) {}
  uint16_t* At(uint16_t* base, int which, int64_t tile) const { return base + which * block + tile * kTile * dp; }
  int64_t dp, block, size;
};

// NOTE [amx attention products] (attention_bf16_tiles.h).
bool UseAmx() { return octet::internal::ActiveAttentionIsa() == octet::internal::AttentionIsa::kAmxBf16; }

enum FwdBlock { kFwdK, kFwdQt, kFwdV, kFwdBlocks };
enum BwdBlock { kK, kV, kQt, kDOt, kQPairs, kDOPairs, kKPairs, kBwdBlocks };

template <typename TIn>
void PackFwdTile(const Operand<TIn>& q, const Operand<TIn>& k, const Operand<TIn>& v, const Geometry& g,
                 const PackLayout& lay, uint16_t* base, uint16_t* tmp, int64_t bh, int64_t tile,
                 const uint16_t* lut) {
  const int64_t t0 = tile * kTile, n = g.TileRows(tile);
  PlainTile(k.Row(bh, t0), k.st, k.sd, n, g.d, g.dp, lut, lay.At(base, kFwdK, tile));
  PlainTile(q.Row(bh, t0), q.st, q.sd, n, g.d, g.dp, lut, tmp);
  TransposePairs(tmp, g.dp, lay.At(base, kFwdQt, tile));
  PlainTile(v.Row(bh, t0), v.st, v.sd, n, g.d, g.dp, lut, tmp);
  InterleaveRowPairs(tmp, g.dp, lay.At(base, kFwdV, tile));
}

struct FwdWorkspace {
  FwdWorkspace(const Geometry& g, int64_t pack_size)
      : pack(pack_size), tmp(kTile * g.dp), pv(kTile * kTile), st(kTile * kTile), o(kTile * g.dp), m(kTile),
        l(kTile) {}
  Buffer<uint16_t> pack, tmp, pv;
  Buffer<float> st, o, m, l;
};

}  // namespace

template <typename TIn>
void ForwardBf16Dot(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, double scale, const Tensor& out_t,
                    const Tensor& lse_t, const uint16_t* lut) {
  const Geometry g(q_t, kBf16Pad);
  const Operand<TIn> q(q_t), k(k_t), v(v_t);
  const OutOperand<bfloat16> out(out_t);
  float* lse = lse_t.data<float>();  // (B,H,T)
  const PackLayout lay(g, kFwdBlocks);
  const float c = static_cast<float>(scale * kLog2e);
  const bool amx = UseAmx();

  auto query_tile = [&](FwdWorkspace& ws, uint16_t* base, int64_t bh, int64_t qtile) {
    const int64_t q0 = qtile * kTile, qn = g.TileRows(qtile);
    std::fill(ws.m.get(), ws.m.get() + kTile, -std::numeric_limits<float>::infinity());
    std::fill(ws.l.get(), ws.l.get() + kTile, 0.0f);
    std::fill(ws.o.get(), ws.o.get() + qn * g.dp, 0.0f);
    FwdPairTile t{};
    t.amx = amx;
    t.qv = lay.At(base, kFwdQt, qtile);
    t.dp = g.dp;
    t.qn = qn;
    t.c = c;
    t.st = ws.st.get();
    t.pv = ws.pv.get();
    t.o = ws.o.get();
    t.m = ws.m.get();
    t.l = ws.l.get();
    for (int64_t ktile = 0; ktile <= qtile; ++ktile) {
      t.k = lay.At(base, kFwdK, ktile);
      t.vv = lay.At(base, kFwdV, ktile);
      t.kn = g.TileRows(ktile);
      t.diagonal = ktile == qtile;
      FwdPairTileFn(t);
    }
    StoreQueryTile(ws.o.get(), ws.m.get(), ws.l.get(), g, out, lse, bh, q0, qn, StoreRowsBf16);
  };

  if (HeadsFillThreads(g)) {  // NOTE [forward per head]
    ParallelItems(
        g.bh, [&] { return FwdWorkspace(g, lay.size); },
        [&](FwdWorkspace& ws, int64_t bh) {
          uint16_t* base = ws.pack.get();
          for (int64_t tile = 0; tile < g.nt; ++tile) PackFwdTile(q, k, v, g, lay, base, ws.tmp.get(), bh, tile, lut);
          for (int64_t qtile = g.nt - 1; qtile >= 0; --qtile) query_tile(ws, base, bh, qtile);
        });
    return;
  }
  // Few heads: every head packed first (its tiles in parallel), then (head, query tile) items.
  Buffer<uint16_t> packs(g.bh * lay.size);
  ParallelItems(
      g.bh * g.nt, [&] { return Buffer<uint16_t>(kTile * g.dp); },
      [&](Buffer<uint16_t>& tmp, int64_t item) {
        const int64_t bh = item / g.nt;
        PackFwdTile(q, k, v, g, lay, packs.get() + bh * lay.size, tmp.get(), bh, item % g.nt, lut);
      });
  ParallelItems(
      g.bh * g.nt, [&] { return FwdWorkspace(g, 0); },
      [&](FwdWorkspace& ws, int64_t item) {
        const int64_t qtile = g.nt - 1 - item / g.bh, bh = item % g.bh;  // largest first
        query_tile(ws, packs.get() + bh * lay.size, bh, qtile);
      });
}

namespace {

template <typename TIn>
struct BwdInputs {
  BwdInputs(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t, const Tensor& dout_t,
            const Tensor& lse_t, const uint16_t* lut_)
      : q(q_t), k(k_t), v(v_t), dout(dout_t), out(out_t), lse(lse_t.data<float>()), lut(lut_) {}
  Operand<TIn> q, k, v;
  Operand<bfloat16> dout, out;
  const float* lse;
  const uint16_t* lut;
};

// Packs tile `tile` of head bh; stats: the head's lse*log2(e) (Tp) then D (Tp).
template <typename TIn>
void PackBwdTile(const BwdInputs<TIn>& in, const Geometry& g, const PackLayout& lay, uint16_t* base, float* stats,
                 uint16_t* tmp, int64_t bh, int64_t tile) {
  const int64_t t0 = tile * kTile, n = g.TileRows(tile);
  uint16_t* kr = lay.At(base, kK, tile);
  PlainTile(in.k.Row(bh, t0), in.k.st, in.k.sd, n, g.d, g.dp, in.lut, kr);
  InterleaveRowPairs(kr, g.dp, lay.At(base, kKPairs, tile));
  PlainTile(in.v.Row(bh, t0), in.v.st, in.v.sd, n, g.d, g.dp, in.lut, lay.At(base, kV, tile));
  PlainTile(in.q.Row(bh, t0), in.q.st, in.q.sd, n, g.d, g.dp, in.lut, tmp);
  TransposePairs(tmp, g.dp, lay.At(base, kQt, tile));
  InterleaveRowPairs(tmp, g.dp, lay.At(base, kQPairs, tile));
  PlainTile<bfloat16>(in.dout.Row(bh, t0), in.dout.st, in.dout.sd, n, g.d, g.dp, nullptr, tmp);
  TransposePairs(tmp, g.dp, lay.At(base, kDOt, tile));
  InterleaveRowPairs(tmp, g.dp, lay.At(base, kDOPairs, tile));
  // D_i from dO's bf16 rows (the products of bf16 are exact in f32).
  const int64_t tp = g.nt * kTile;
  TileRowStats(in.lse, in.out, g, bh, t0, n,
               [&](int64_t i) { return reinterpret_cast<const bfloat16*>(tmp + i * g.dp); }, stats + t0,
               stats + tp + t0);}

struct BwdWorkspace {
  BwdWorkspace(const Geometry& g, int64_t pack_size, int64_t dq_rows)
      : pack(pack_size), tmp(kTile * g.dp), pt(kTile * kTile), dst16(kTile * kTile), dsv(kTile * kTile),
        stats(pack_size > 0 ? 2 * g.nt * kTile : 0), st(kTile * kTile), dst(kTile * kTile), dk(kTile * g.dp),
        dv(kTile * g.dp), dq(dq_rows * g.dp) {}
  Buffer<uint16_t> pack, tmp, pt, dst16, dsv;
  Buffer<float> stats, st, dst, dk, dv, dq;
};

BwdPairTile MakeTile(const Geometry& g, const PackLayout& lay, uint16_t* base, const float* stats, int64_t qtile,
                     int64_t ktile, float c, bool amx, BwdWorkspace& ws) {
  BwdPairTile t{};
  t.amx = amx;
  t.k = lay.At(base, kK, ktile);
  t.v = lay.At(base, kV, ktile);
  t.kp = lay.At(base, kKPairs, ktile);
  t.qv = lay.At(base, kQt, qtile);
  t.dov = lay.At(base, kDOt, qtile);
  t.qp = lay.At(base, kQPairs, qtile);
  t.dop = lay.At(base, kDOPairs, qtile);
  t.lse2 = stats + qtile * kTile;
  t.di = stats + g.nt * kTile + qtile * kTile;
  t.dp = g.dp;
  t.qn = g.TileRows(qtile);
  t.kn = g.TileRows(ktile);
  t.diagonal = qtile == ktile;
  t.c = c;
  t.st = ws.st.get();
  t.dst = ws.dst.get();
  t.pt = ws.pt.get();
  t.dst16 = ws.dst16.get();
  t.dsv = ws.dsv.get();
  return t;
}

}  // namespace

template <typename TIn>
void BackwardBf16Dot(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t,
                     const Tensor& dout_t, const Tensor& lse_t, double scale, const Tensor& dq_t, const Tensor& dk_t,
                     const Tensor& dv_t, const uint16_t* lut) {
  const Geometry g(q_t, kBf16Pad);
  const BwdInputs<TIn> in(q_t, k_t, v_t, out_t, dout_t, lse_t, lut);
  const PackLayout lay(g, kBwdBlocks);
  const int64_t stats_size = 2 * g.nt * kTile;
  const float c = static_cast<float>(scale * kLog2e);
  const float s = static_cast<float>(scale);
  const OutOperand<bfloat16> dq(dq_t), dk(dk_t), dv(dv_t);  // each may be undefined
  const bool want_kv = dk || dv;
  const bool amx = UseAmx();

  // Accumulates the dK/dV of key tile `ktile` over query tiles ktile.. and stores them.
  auto key_tile = [&](BwdWorkspace& ws, uint16_t* base, const float* stats, int64_t bh, int64_t ktile,
                      float* dq_head) {
    std::fill(ws.dk.get(), ws.dk.get() + kTile * g.dp, 0.0f);
    std::fill(ws.dv.get(), ws.dv.get() + kTile * g.dp, 0.0f);
    for (int64_t qtile = ktile; qtile < g.nt; ++qtile) {
      BwdPairTile t = MakeTile(g, lay, base, stats, qtile, ktile, c, amx, ws);
      t.dk = dk ? ws.dk.get() : nullptr;
      t.dv = dv ? ws.dv.get() : nullptr;
      t.dq = dq_head ? dq_head + qtile * kTile * g.dp : nullptr;
      BwdPairTileFn(t);
    }
    const int64_t kn = g.TileRows(ktile), k0 = ktile * kTile;
    if (dk) StoreRowsBf16(ws.dk.get(), g.dp, kn, g.d, s, dk, bh, k0);
    if (dv) StoreRowsBf16(ws.dv.get(), g.dp, kn, g.d, 1.0f, dv, bh, k0);
  };

  if (dq && want_kv && HeadsFillThreads(g)) {
    // One work item per head: all three gradients in one sweep.
    ParallelItems(
        g.bh, [&] { return BwdWorkspace(g, lay.size, g.nt * kTile); },
        [&](BwdWorkspace& ws, int64_t bh) {
          uint16_t* base = ws.pack.get();
          float* stats = ws.stats.get();
          for (int64_t tile = 0; tile < g.nt; ++tile) PackBwdTile(in, g, lay, base, stats, ws.tmp.get(), bh, tile);
          float* dq_head = ws.dq.get();
          std::fill(dq_head, dq_head + g.nt * kTile * g.dp, 0.0f);
          for (int64_t ktile = 0; ktile < g.nt; ++ktile) key_tile(ws, base, stats, bh, ktile, dq_head);
          StoreRowsBf16(dq_head, g.dp, g.t, g.d, s, dq, bh, 0);
        });
    return;
  }

  // Few heads: pack every head first, then dK/dV over key tiles and dQ over query tiles.
  Buffer<uint16_t> packs(g.bh * lay.size);
  Buffer<float> stats(g.bh * stats_size);
  ParallelItems(
      g.bh * g.nt, [&] { return Buffer<uint16_t>(kTile * g.dp); },
      [&](Buffer<uint16_t>& tmp, int64_t item) {
        const int64_t bh = item / g.nt;
        PackBwdTile(in, g, lay, packs.get() + bh * lay.size, stats.get() + bh * stats_size, tmp.get(), bh,
                    item % g.nt);
      });
  if (want_kv) {
    ParallelItems(
        g.bh * g.nt, [&] { return BwdWorkspace(g, 0, 0); },
        [&](BwdWorkspace& ws, int64_t item) {
          const int64_t ktile = item / g.bh, bh = item % g.bh;  // most query tiles first
          key_tile(ws, packs.get() + bh * lay.size, stats.get() + bh * stats_size, bh, ktile, nullptr);
        });
  }
  if (dq) {
    ParallelItems(
        g.bh * g.nt, [&] { return BwdWorkspace(g, 0, kTile); },
        [&](BwdWorkspace& ws, int64_t item) {
          const int64_t qtile = g.nt - 1 - item / g.bh, bh = item % g.bh;  // most key tiles first
          uint16_t* base = packs.get() + bh * lay.size;
          float* acc = ws.dq.get();
          std::fill(acc, acc + kTile * g.dp, 0.0f);
          for (int64_t ktile = 0; ktile <= qtile; ++ktile) {
            BwdPairTile t = MakeTile(g, lay, base, stats.get() + bh * stats_size, qtile, ktile, c, amx, ws);
            t.dq = acc;
            BwdPairTileFn(t);
          }
          StoreRowsBf16(acc, g.dp, g.TileRows(qtile), g.d, s, dq, bh, qtile * kTile);
        });
  }
}

#else  // not x86-64: the dispatcher never selects kAvx512Bf16.

template <typename TIn>
void ForwardBf16Dot(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                    const uint16_t*) {
  OCTET_CHECK(false, "causal_attention: BF16 dot-product tiles need an x86-64 CPU with AVX-512 BF16");
}
template <typename TIn>
void BackwardBf16Dot(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     double, const Tensor&, const Tensor&, const Tensor&, const uint16_t*) {
  OCTET_CHECK(false, "causal_attention: BF16 dot-product tiles need an x86-64 CPU with AVX-512 BF16");
}

#endif

template void ForwardBf16Dot<bfloat16>(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                                       const Tensor&, const uint16_t*);
template void ForwardBf16Dot<Fp8Code>(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                                      const Tensor&, const uint16_t*);
template void BackwardBf16Dot<bfloat16>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, double, const Tensor&, const Tensor&, const Tensor&,
                                        const uint16_t*);
template void BackwardBf16Dot<Fp8Code>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, double, const Tensor&, const Tensor&, const Tensor&,
                                       const uint16_t*);

}  // namespace octet::cpu::attn
