// The block algorithm of the CUDA flash-attention kernels (float32 and
// float64 causal attention, ops/cuda/attention_flash.cu), written once as
// host-and-device code so the CPU tests run the very same arithmetic, index
// mapping and phase order (tests/ops/attention_flash_test.cc). Internal.
//
// NOTE [flash attention on CUDA]
// One thread block of kThreads = 256 threads seen as a 16 x 16 grid
// (ty = tid / 16, tx = tid % 16). A block owns one (batch*head, tile) and
// walks the tiles of the other side of the causal triangle; tiles are kTile
// rows (64 for float, 32 for double, so float64's shared memory stays within
// an H100's 227 KiB), queries and keys alike, so only the diagonal tile pair
// needs the causal mask. Head-dim rows live in shared memory padded to kDP
// (64 or 128) columns, zero past D, with a row stride of kDP + 4 (for float an
// odd number of 16-byte units: the row-strided float4 reads below hit
// distinct banks).
//   Thread (ty, tx) owns score rows ty + 16 i and score columns tx + 16 j
//   (i, j < kM = kTile/16), and head-dim columns 64 g + 4 tx + u (g < kDP/64,
//   u < 4) of its rows of an output accumulator. Two products only:
//   ScoresNT  acc[i][j]   = sum_c a[row i][c] b[col j][c]   (rows of both in smem)
//   AccumNN   acc[i][g][u] += sum_k a[row i][k] b[k][col g,u] (a a score tile)
// Rows of a score tile are reduced over the 16 threads of one half-warp that
// share ty (warp shuffles on the device).
//
// Forward (block = query tile): S = Q Kᵀ with Q pre-multiplied by
// scale·log2(e), causal mask, online softmax in the log2 domain (running max
// m, running sum l, the output accumulator rescaled by exp2(m_old - m_new)),
// P through shared memory, O += P V; finally O / l and lse = (m + log2 l)·ln2
// (natural log, the contract of ops/attention_kernels.h).
// Backward (FlashAttention-2, deterministic, no atomics): Di = rowsum(dO∘O)
// per query row first; then one block per key tile accumulates over the
// query tiles at or after it
//   Pᵀ = exp2(K Qᵀ·scale·log2(e) - lse·log2(e)),  dV += Pᵀ dO,
//   dSᵀ = Pᵀ∘(V dOᵀ - Di),                        dK += dSᵀ Q  (·scale at the end)
// and a second kernel, one block per query tile, recomputes P and dS over the
// key tiles at or before it for dQ += dS K (·scale at the end).
// These are the formulas of the CPU kernel (NOTE [flash attention on CPU],
// ops/cpu/attention_cpu.cc: log2-domain scores, the same lse and Di), not its
// code: its tile functions are GCC vector-extension code built per ISA, so
// what both backends share is this contract, and the CPU runs this file's
// code only in the tests.
//
// An execution policy `Ex` runs the phases: Ex::Each(f) calls f(tid, state)
// for the block's threads (each has its own registers `state`), Ex::Sync() is
// __syncthreads, Ex::RowReduce(op) combines state.red[i] over the 16 threads
// of each row (within one warp), Ex::Finish() ends the block. On the device
// one thread runs f for itself at once; the CPU tests defer the steps until
// the next Sync/Finish and then run them warp after warp (a valid schedule in
// which a missing barrier shows), so a lambda given to Each must capture only
// what lives until the next Sync or Finish.
#pragma once

#include <cstdint>

#include <octet/ops/attention_flash_tiles.h>

namespace octet::flash {

// ---------------------------------------------------------------------------
// Per-thread state (registers) of each kernel.

template <class G, typename A>
struct FwdState {
  A s[G::kM][G::kM];
  A o[G::kM][G::kG][4];
  A m[G::kM], l[G::kM], alpha[G::kM], red[G::kM];
};

template <class G, typename A>
struct BwdKvState {
  A s[G::kM][G::kM], dp[G::kM][G::kM];
  A dk[G::kM][G::kG][4], dv[G::kM][G::kG][4];
  A red[G::kM];  // unused (no row reductions in the backward)
};

template <class G, typename A>
struct BwdQState {
  A s[G::kM][G::kM], dp[G::kM][G::kM];
  A dq[G::kM][G::kG][4];
  A red[G::kM];
};

// ---------------------------------------------------------------------------
// The blocks. `block` in [0, BH * nt): which (head, tile) this block owns,
// largest amount of work first. smem: kFwdSmemElems / kBwd*SmemElems of A,
// 16-byte aligned.

template <class G, class Ex, typename T, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void FwdBlock(Ex& ex, const FwdParams<T, A>& p, int64_t block, A* smem) {
  constexpr int kTile = G::kTile, kM = G::kM;
  const int64_t bh = block % p.bh;
  const int qtile = p.nt - 1 - static_cast<int>(block / p.bh);
  const int64_t q0 = static_cast<int64_t>(qtile) * kTile;
  const int qn = static_cast<int>(p.t - q0 < kTile ? p.t - q0 : kTile);
  A* q_s = smem;                   // (kTile, kLd) queries * scale*log2(e)
  A* kv_s = q_s + G::kRowsElems;   // (kTile, kLd) keys, then values
  A* p_s = kv_s + G::kRowsElems;   // (kTile, kLdS) probabilities, queries x keys
  const T* qh = p.q.Head(bh);
  const T* kh = p.k.Head(bh);
  const T* vh = p.v.Head(bh);

  ex.Each([&](int tid, FwdState<G, A>& st) {
    LoadRows<G>(q_s, qh + q0 * p.q.st, p.q.st, p.q.sd, qn, p.d, p.qmul, tid);
    for (int i = 0; i < kM; ++i) {
      st.m[i] = -Inf<A>();
      st.l[i] = A(0);
    }
    Zero<G>(st.o);
  });
  for (int ktile = 0; ktile <= qtile; ++ktile) {
    const int64_t k0 = static_cast<int64_t>(ktile) * kTile;
    const int kn = static_cast<int>(p.t - k0 < kTile ? p.t - k0 : kTile);
    ex.Sync();  // the previous tile's readers of kv_s and p_s are done
    ex.Each([&](int tid, FwdState<G, A>&) { LoadRows<G>(kv_s, kh + k0 * p.k.st, p.k.st, p.k.sd, kn, p.d, A(1), tid); });
    ex.Sync();
    ex.Each([&](int tid, FwdState<G, A>& st) {
      const int ty = tid / kLanes, tx = tid % kLanes;
      ScoresNT<G>(q_s, kv_s, ty, tx, st.s);
      OCTET_FLASH_UNROLL
      for (int i = 0; i < kM; ++i) {
        A mx = -Inf<A>();
        OCTET_FLASH_UNROLL
        for (int j = 0; j < kM; ++j) {
          const int64_t key = k0 + tx + 16 * j;
          // Padding query rows (>= t) see every real key: finite, never stored.
          if (key > q0 + ty + 16 * i || key >= p.t) st.s[i][j] = -Inf<A>();
          mx = MaxOp{}(mx, st.s[i][j]);
        }
        st.red[i] = mx;
      }
    });
    ex.RowReduce(MaxOp{});
    ex.Each([&](int tid, FwdState<G, A>& st) {
      const int ty = tid / kLanes, tx = tid % kLanes;
      OCTET_FLASH_UNROLL
      for (int i = 0; i < kM; ++i) {
        const A m_new = MaxOp{}(st.m[i], st.red[i]);
        st.alpha[i] = Rescale(st.m[i], m_new);
        st.m[i] = m_new;
        A sum = A(0);
        OCTET_FLASH_UNROLL
        for (int j = 0; j < kM; ++j) {
          const A pv = Prob(st.s[i][j], m_new);
          p_s[(ty + 16 * i) * G::kLdS + tx + 16 * j] = pv;
          sum += pv;
        }
        st.red[i] = sum;
      }
    });
    ex.RowReduce(SumOp{});
    ex.Sync();  // p_s complete; every thread is done reading the keys
    ex.Each([&](int tid, FwdState<G, A>& st) {
      LoadRows<G>(kv_s, vh + k0 * p.v.st, p.v.st, p.v.sd, kn, p.d, A(1), tid);
      OCTET_FLASH_UNROLL
      for (int i = 0; i < kM; ++i) {
        st.l[i] = st.l[i] * st.alpha[i] + st.red[i];
        OCTET_FLASH_UNROLL
        for (int g = 0; g < G::kG; ++g)
          OCTET_FLASH_UNROLL
          for (int u = 0; u < 4; ++u) st.o[i][g][u] *= st.alpha[i];
      }
    });
    ex.Sync();
    ex.Each([&](int tid, FwdState<G, A>& st) {
      AccumNN<G>(p_s, kv_s, tid / kLanes, tid % kLanes, st.o);
    });
  }
  ex.Each([&](int tid, FwdState<G, A>& st) {
    const int ty = tid / kLanes, tx = tid % kLanes;
    T* oh = p.out.Head(bh);
    OCTET_FLASH_UNROLL
    for (int i = 0; i < kM; ++i) {
      const int64_t row = q0 + ty + 16 * i;
      if (row >= p.t) continue;
      const A inv = A(1) / st.l[i];
      OCTET_FLASH_UNROLL
      for (int g = 0; g < G::kG; ++g)
        OCTET_FLASH_UNROLL
        for (int u = 0; u < 4; ++u) {
          const int c = 64 * g + 4 * tx + u;
          if (c < p.d) oh[row * p.out.st + c * p.out.sd] = ConvertElement<T>(st.o[i][g][u] * inv);
        }
      if (tx == 0) p.lse[bh * p.t + row] = NaturalLse(st.m[i], st.l[i]);
    }
  });
  ex.Finish();
}

// dK and dV of one key tile (block: key tile block / BH, most work first).
template <class G, class Ex, typename T, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void BwdKvBlock(Ex& ex, const BwdParams<T, A>& p, int64_t block, A* smem) {
  constexpr int kTile = G::kTile, kM = G::kM;
  const int64_t bh = block % p.bh;
  const int ktile = static_cast<int>(block / p.bh);
  const int64_t k0 = static_cast<int64_t>(ktile) * kTile;
  const int kn = static_cast<int>(p.t - k0 < kTile ? p.t - k0 : kTile);
  const bool want_dk = p.dk.data != nullptr, want_dv = p.dv.data != nullptr;
  A* k_s = smem;
  A* v_s = k_s + G::kRowsElems;
  A* q_s = v_s + G::kRowsElems;
  A* do_s = q_s + G::kRowsElems;
  A* pt_s = do_s + G::kRowsElems;    // (kTile, kLdS) Pᵀ, keys x queries
  A* dst_s = pt_s + G::kScoreElems;  // (kTile, kLdS) dSᵀ
  A* lse2_s = dst_s + G::kScoreElems;
  A* di_s = lse2_s + kTile;
  const T* qh = p.q.Head(bh);
  const T* doh = p.dout.Head(bh);

  ex.Each([&](int tid, BwdKvState<G, A>& st) {
    LoadRows<G>(k_s, p.k.Head(bh) + k0 * p.k.st, p.k.st, p.k.sd, kn, p.d, A(1), tid);
    LoadRows<G>(v_s, p.v.Head(bh) + k0 * p.v.st, p.v.st, p.v.sd, kn, p.d, A(1), tid);
    Zero<G>(st.dk);
    Zero<G>(st.dv);
  });
  for (int qtile = ktile; qtile < p.nt; ++qtile) {
    const int64_t q0 = static_cast<int64_t>(qtile) * kTile;
    const int qn = static_cast<int>(p.t - q0 < kTile ? p.t - q0 : kTile);
    ex.Sync();  // the previous tile's readers of q_s, do_s, pt_s, dst_s are done
    ex.Each([&](int tid, BwdKvState<G, A>&) {
      LoadRows<G>(q_s, qh + q0 * p.q.st, p.q.st, p.q.sd, qn, p.d, A(1), tid);
      LoadRows<G>(do_s, doh + q0 * p.dout.st, p.dout.st, p.dout.sd, qn, p.d, A(1), tid);
      LoadRowStats<G>(lse2_s, di_s, p.lse, p.di, bh, q0, p.t, tid);
    });
    ex.Sync();
    ex.Each([&](int tid, BwdKvState<G, A>& st) {
      const int ty = tid / kLanes, tx = tid % kLanes;
      ScoresNT<G>(k_s, q_s, ty, tx, st.s);  // Sᵀ: keys x queries
      if (want_dk) ScoresNT<G>(v_s, do_s, ty, tx, st.dp);  // dPᵀ
      OCTET_FLASH_UNROLL
      for (int i = 0; i < kM; ++i)
        OCTET_FLASH_UNROLL
        for (int j = 0; j < kM; ++j) {
          const int64_t key = k0 + ty + 16 * i, query = q0 + tx + 16 * j;
          const int col = tx + 16 * j;
          const A pv = Visible(query, key, p.t) ? BwdProb(st.s[i][j], p.c, lse2_s[col]) : A(0);
          const int at = (ty + 16 * i) * G::kLdS + col;
          if (want_dv) pt_s[at] = pv;
          if (want_dk) dst_s[at] = BwdDs(pv, st.dp[i][j], di_s[col]);
        }
    });
    ex.Sync();
    ex.Each([&](int tid, BwdKvState<G, A>& st) {
      const int ty = tid / kLanes, tx = tid % kLanes;
      if (want_dv) AccumNN<G>(pt_s, do_s, ty, tx, st.dv);
      if (want_dk) AccumNN<G>(dst_s, q_s, ty, tx, st.dk);
    });
  }
  ex.Each([&](int tid, BwdKvState<G, A>& st) {
    const int ty = tid / kLanes, tx = tid % kLanes;
    if (want_dk) StoreRows<G>(st.dk, p.scale, p.dk.Head(bh), p.dk.st, p.dk.sd, k0, p.t, p.d, ty, tx);
    if (want_dv) StoreRows<G>(st.dv, A(1), p.dv.Head(bh), p.dv.st, p.dv.sd, k0, p.t, p.d, ty, tx);
  });
  ex.Finish();
}

// dQ of one query tile (block: query tile nt-1 - block / BH, most work first).
template <class G, class Ex, typename T, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void BwdQBlock(Ex& ex, const BwdParams<T, A>& p, int64_t block, A* smem) {
  constexpr int kTile = G::kTile, kM = G::kM;
  const int64_t bh = block % p.bh;
  const int qtile = p.nt - 1 - static_cast<int>(block / p.bh);
  const int64_t q0 = static_cast<int64_t>(qtile) * kTile;
  const int qn = static_cast<int>(p.t - q0 < kTile ? p.t - q0 : kTile);
  A* q_s = smem;
  A* do_s = q_s + G::kRowsElems;
  A* k_s = do_s + G::kRowsElems;
  A* v_s = k_s + G::kRowsElems;
  A* ds_s = v_s + G::kRowsElems;  // (kTile, kLdS) dS, queries x keys
  A* lse2_s = ds_s + G::kScoreElems;
  A* di_s = lse2_s + kTile;
  const T* kh = p.k.Head(bh);
  const T* vh = p.v.Head(bh);

  ex.Each([&](int tid, BwdQState<G, A>& st) {
    LoadRows<G>(q_s, p.q.Head(bh) + q0 * p.q.st, p.q.st, p.q.sd, qn, p.d, A(1), tid);
    LoadRows<G>(do_s, p.dout.Head(bh) + q0 * p.dout.st, p.dout.st, p.dout.sd, qn, p.d, A(1), tid);
    LoadRowStats<G>(lse2_s, di_s, p.lse, p.di, bh, q0, p.t, tid);
    Zero<G>(st.dq);
  });
  for (int ktile = 0; ktile <= qtile; ++ktile) {
    const int64_t k0 = static_cast<int64_t>(ktile) * kTile;
    const int kn = static_cast<int>(p.t - k0 < kTile ? p.t - k0 : kTile);
    ex.Sync();  // the previous tile's readers of k_s, v_s, ds_s are done
    ex.Each([&](int tid, BwdQState<G, A>&) {
      LoadRows<G>(k_s, kh + k0 * p.k.st, p.k.st, p.k.sd, kn, p.d, A(1), tid);
      LoadRows<G>(v_s, vh + k0 * p.v.st, p.v.st, p.v.sd, kn, p.d, A(1), tid);
    });
    ex.Sync();
    ex.Each([&](int tid, BwdQState<G, A>& st) {
      const int ty = tid / kLanes, tx = tid % kLanes;
      ScoresNT<G>(q_s, k_s, ty, tx, st.s);    // S: queries x keys
      ScoresNT<G>(do_s, v_s, ty, tx, st.dp);  // dP
      OCTET_FLASH_UNROLL
      for (int i = 0; i < kM; ++i) {
        const int row = ty + 16 * i;
        OCTET_FLASH_UNROLL
        for (int j = 0; j < kM; ++j) {
          const int64_t query = q0 + row, key = k0 + tx + 16 * j;
          const A pv = Visible(query, key, p.t) ? BwdProb(st.s[i][j], p.c, lse2_s[row]) : A(0);
          ds_s[row * G::kLdS + tx + 16 * j] = BwdDs(pv, st.dp[i][j], di_s[row]);
        }
      }
    });
    ex.Sync();
    ex.Each([&](int tid, BwdQState<G, A>& st) { AccumNN<G>(ds_s, k_s, tid / kLanes, tid % kLanes, st.dq); });
  }
  ex.Each([&](int tid, BwdQState<G, A>& st) {
    StoreRows<G>(st.dq, p.scale, p.dq.Head(bh), p.dq.st, p.dq.sd, q0, p.t, p.d, tid / kLanes, tid % kLanes);
  });
  ex.Finish();
}

}  // namespace octet::flash
