// Tile functions of the fused CPU attention kernels (internal to
// ops/cpu/attention_cpu.cc and attention_tiles.cc): the work on one (query
// tile, key tile) pair, forward and backward, on packed compute-type (A =
// float, or double for f64 inputs) operands. See NOTE [flash attention on
// CPU] in attention_cpu.cc for the algorithm and NOTE [attention isa
// dispatch] in attention_tiles.cc for how they are compiled.
#pragma once

#include <cstdint>

namespace octet::cpu::attn {

// Queries per tile == keys per tile, so only diagonal tiles need the causal mask.
inline constexpr int64_t kTile = 64;

// Row lengths of packed head-dim rows are padded to a multiple of this many
// elements (64 bytes, the widest vector), so every vector width divides them.
template <typename A>
inline constexpr int64_t kPadElems = static_cast<int64_t>(64 / sizeof(A));

// Shapes below: kn keys and qn queries in this tile pair (<= kTile), D the
// head size, Dp = D rounded up to kPadElems<A>.
template <typename A>
struct FwdTile {
  const A* qt;      // (D, kTile) queries transposed, times scale*log2(e); 0 past qn
  const A* k;       // (kn, D) keys, element strides k_rs, k_cs
  int64_t k_rs, k_cs;
  const A* v;       // (kn, Dp) values, row stride v_rs, unit column stride
  int64_t v_rs;
  int64_t d, dp, qn, kn;
  bool diagonal;    // the key tile is the query tile: mask key > query
  A* st;            // (kTile, kTile) workspace: scores, keys x queries
  A* o;             // (kTile, Dp) unnormalised output rows (qn used), zero before the first tile
  A* m;             // (kTile) running max, log2 domain, -inf before the first tile
  A* l;             // (kTile) running sum of exp2(score - m), 0 before the first tile
};

template <typename A>
struct BwdTile {
  const A* qt;      // (D, kTile) queries transposed; 0 past qn
  const A* dot;     // (D, kTile) output gradient transposed; 0 past qn
  const A* qr;      // (qn, Dp) queries, row stride q_rs, unit column stride
  const A* dor;     // (qn, Dp) output gradient, row stride do_rs
  const A* lse2;    // (kTile) log-sum-exp * log2(e); +inf past qn
  const A* di;      // (kTile) rowsum(dO o O); 0 past qn
  const A* kr;      // (kn, Dp) keys, row stride k_rs
  const A* vr;      // (kn, Dp) values, row stride v_rs
  int64_t q_rs, do_rs, k_rs, v_rs;
  int64_t d, dp, qn, kn;
  bool diagonal;
  A c;              // scale * log2(e)
  A* pt;            // (kTile, kTile) workspace: P^T
  A* dst;           // (kTile, kTile) workspace: dP^T, then dS^T
  A* dk;            // (kTile, Dp) accumulators (unscaled), each may be null
  A* dv;
  A* dq;
};

template <typename A>
struct TileFns {
  void (*fwd)(const FwdTile<A>&);  // one online-softmax step: updates m, l, o
  void (*bwd)(const BwdTile<A>&);  // adds this pair's share into dk, dv, dq
};

// The tile functions of internal::ActiveAttentionIsa(). A: float or double.
template <typename A>
TileFns<A> ActiveTileFns();

}  // namespace octet::cpu::attn
