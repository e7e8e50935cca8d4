// Vector helpers of the CPU attention tiles (internal to attention_tiles.cc
// and attention_bf16.cc): GCC vector-extension types of a given width, loads,
// stores, a vectorised exp2, and the causal parts of a product. Everything is
// always_inline, so it compiles for the instruction set of the
// target-attributed function it lands in (NOTE [attention isa dispatch] in
// attention_tiles.cc).
#pragma once

// The vectors are wider than the baseline ISA on purpose: the functions they
// are used in carry target attributes (GCC warns of the ABI of such values).
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <octet/core/macros.h>

namespace octet::cpu::attn {

// Vectors of kBytes bytes of A (GCC vector extensions).

template <typename A, int kBytes>
struct Simd {
  using Int = std::conditional_t<sizeof(A) == 4, int32_t, int64_t>;
  typedef A V __attribute__((vector_size(kBytes)));
  typedef Int I __attribute__((vector_size(kBytes)));
  static constexpr int kLanes = kBytes / static_cast<int>(sizeof(A));
};

template <typename V>
OCTET_INLINE V LoadV(const void* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V>
OCTET_INLINE void StoreV(void* p, const V& v) {
  __builtin_memcpy(p, &v, sizeof(V));
}
template <typename V, typename A>
OCTET_INLINE V Splat(A x) {
  return V{} + x;
}
template <typename V>
OCTET_INLINE V MaxV(const V& a, const V& b) {
  return a > b ? a : b;
}

// 2^x, lane-wise. Exactly 0 for x < -126 (and -inf); x is clamped to 127.
// float: 2^x = 2^n * 2^f with n = round(x), |f| <= 1/2, and 2^f from its
// degree-7 Taylor polynomial in f*ln2 (relative error < 1e-8, below float
// rounding). double (tests and references): lane-wise std::exp2.
template <typename S>
OCTET_INLINE typename S::V Exp2(typename S::V x) {
  using V = typename S::V;
  using I = typename S::I;
  if constexpr (sizeof(x[0]) == 8) {
    for (int i = 0; i < S::kLanes; ++i) x[i] = std::exp2(x[i]);
    return x;
  } else {
    const V lo = Splat<V>(-126.0f), hi = Splat<V>(127.0f);
    const I under = x < lo;
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    const V magic = Splat<V>(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    const V t = x + magic;
    I n;
    __builtin_memcpy(&n, &t, sizeof(n));
    n -= 0x4B400000;  // the bits of magic
    const V f = x - (t - magic);
    V p = Splat<V>(1.525273380405984e-05f);
    p = p * f + 1.5403530393381608e-04f;
    p = p * f + 1.3333558146428443e-03f;
    p = p * f + 9.618129107628477e-03f;
    p = p * f + 5.550410866482158e-02f;
    p = p * f + 2.402265069591007e-01f;
    p = p * f + 6.931471805599453e-01f;
    p = p * f + 1.0f;
    const I bits = (n + 127) << 23;
    V pow2n;
    __builtin_memcpy(&pow2n, &bits, sizeof(pow2n));
    const V r = p * pow2n;
    return under ? Splat<V>(0.0f) : r;
  }
}

// The online softmax's update at the end of a key tile, for NQ vectors of
// queries: l = l * alpha + sum, and each of the first qn unnormalised output
// rows (dp elements, a multiple of the lanes) scaled by its alpha (rows
// whose alpha is 1 are left alone).
template <typename S, int NQ, typename A>
OCTET_INLINE void RescaleRows(const typename S::V (&alpha)[NQ], const typename S::V (&sum)[NQ], A* l, A* o,
                              int64_t qn, int64_t dp) {
  using V = typename S::V;
  constexpr int L = S::kLanes;
  alignas(64) A al[NQ * L];
#pragma GCC unroll 16
  for (int v = 0; v < NQ; ++v) {
    StoreV(l + v * L, LoadV<V>(l + v * L) * alpha[v] + sum[v]);
    StoreV(al + v * L, alpha[v]);
  }
  for (int64_t i = 0; i < qn; ++i) {
    if (al[i] == A(1)) continue;
    const V a = Splat<V>(al[i]);
    for (int64_t c = 0; c < dp; c += L) StoreV(o + i * dp + c, LoadV<V>(o + i * dp + c) * a);
  }
}

// Which part of a diagonal (query tile == key tile) product is needed.
enum class Tri {
  kFull,
  kColsFromRow,      // c[r][col] only for col >= r (scores, keys x queries)
  kContractFromRow,  // row r sums k >= r only (dV, dK: a[r][k] = 0 for k < r)
  kContractToRow,    // row r sums k <= r only (O, dQ: a[r][k] = 0 for k > r)
};

}  // namespace octet::cpu::attn
