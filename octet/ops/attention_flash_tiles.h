// The geometry, parameters, scalar math and shared-memory tile products of
// the CUDA flash-attention block algorithm (NOTE [flash attention on CUDA]
// in ops/attention_flash.h, whose blocks use them): host-and-device code,
// run on the CPU by the tests. Internal.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include <octet/core/dtype_traits.h>
#include <octet/core/macros.h>

#if defined(__CUDACC__)
#define OCTET_FLASH_INLINE __forceinline__
#define OCTET_FLASH_UNROLL _Pragma("unroll")
#else
#define OCTET_FLASH_INLINE inline __attribute__((always_inline))
#define OCTET_FLASH_UNROLL _Pragma("GCC unroll 16")
#endif

namespace octet::flash {

inline constexpr int kThreads = 256;
inline constexpr int kLanes = 16;  // threads that share one score row (tx)
inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kLn2 = 0.6931471805599453;
// The head dims the kernels take; larger ones use the unfused fallback.
inline constexpr int64_t kMaxHeadDim = 128;

// The padded head dim (kDP) the kernels use for head dim d <= kMaxHeadDim.
inline constexpr int PaddedHeadDim(int64_t d) { return d <= 64 ? 64 : 128; }

template <typename A, int kDPIn>
struct Geom {
  static constexpr int kDP = kDPIn;
  static constexpr int kTile = sizeof(A) == 4 ? 64 : 32;
  static constexpr int kM = kTile / 16;  // score rows (and columns) per thread
  static constexpr int kG = kDP / 64;    // 64-column groups of the head dim
  static constexpr int kLd = kDP + 4;    // row stride of head-dim tiles
  static constexpr int kLdS = kTile + 4; // row stride of score tiles
  static constexpr int kRowsElems = kTile * kLd;
  static constexpr int kScoreElems = kTile * kLdS;
  static_assert(kDP % 64 == 0 && kTile % 16 == 0 && kTile % 4 == 0);
  static_assert(kLd % 4 == 0 && kLdS % 4 == 0, "16-byte aligned rows (4 floats, 2 doubles x 2)");
};

// Shared memory of each kernel, in elements of A.
template <class G>
inline constexpr int kFwdSmemElems = 2 * G::kRowsElems + G::kScoreElems;  // Q, K-then-V, P
template <class G>
inline constexpr int kBwdKvSmemElems = 4 * G::kRowsElems + 2 * G::kScoreElems + 2 * G::kTile;  // K V Q dO Pᵀ dSᵀ lse2 Di
template <class G>
inline constexpr int kBwdQSmemElems = 4 * G::kRowsElems + G::kScoreElems + 2 * G::kTile;  // Q dO K V dS lse2 Di

// One (B,H,T,D) tensor: base pointer and element strides.
template <typename P>
struct Strided {
  P* data = nullptr;
  int64_t sb = 0, sh = 0, st = 0, sd = 0;
  int64_t heads = 1;
  // Row 0 of head bh = b*H + h.
  OCTET_HOST_DEVICE OCTET_FLASH_INLINE P* Head(int64_t bh) const { return data + (bh / heads) * sb + (bh % heads) * sh; }
};

template <typename T, typename A>
struct FwdParams {
  Strided<const T> q, k, v;
  Strided<T> out;
  A* lse = nullptr;  // (BH, T) contiguous
  int64_t bh = 0, t = 0;
  int d = 0, nt = 0;  // head dim, tiles per head
  A qmul = 0;         // scale * log2(e)
};

template <typename T, typename A>
struct BwdParams {
  Strided<const T> q, k, v, out, dout;
  Strided<T> dq, dk, dv;  // data == nullptr: not wanted
  const A* lse = nullptr; // (BH, T)
  A* di = nullptr;        // (BH, T): rowsum(dO∘O), written by DiRow
  int64_t bh = 0, t = 0;
  int d = 0, nt = 0;
  A c = 0;      // scale * log2(e)
  A scale = 0;
};

// ---------------------------------------------------------------------------
// Scalar math.

OCTET_HOST_DEVICE OCTET_FLASH_INLINE float Exp2(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}
OCTET_HOST_DEVICE OCTET_FLASH_INLINE double Exp2(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp2(x);
#else
  return std::exp2(x);
#endif
}
OCTET_HOST_DEVICE OCTET_FLASH_INLINE float Log2(float x) {
#if defined(__CUDA_ARCH__)
  return log2f(x);
#else
  return std::log2(x);
#endif
}
OCTET_HOST_DEVICE OCTET_FLASH_INLINE double Log2(double x) {
#if defined(__CUDA_ARCH__)
  return ::log2(x);
#else
  return std::log2(x);
#endif
}
template <typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE A Inf() {
  return std::numeric_limits<A>::infinity();
}

struct MaxOp {
  template <typename A>
  OCTET_HOST_DEVICE OCTET_FLASH_INLINE A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};
struct SumOp {
  template <typename A>
  OCTET_HOST_DEVICE OCTET_FLASH_INLINE A operator()(A a, A b) const {
    return a + b;
  }
};

// Whether key `key` is visible to query `query` in a sequence of t.
OCTET_HOST_DEVICE OCTET_FLASH_INLINE bool Visible(int64_t query, int64_t key, int64_t t) {
  return key <= query && query < t;
}

// Online softmax: the factor that rescales what was accumulated under the
// running max m_old once the max is m_new (both log2 domain). m_old = -inf
// (nothing yet) gives 0; m_new = -inf (every score so far masked, which the
// causal tiling never produces) gives 1 rather than NaN.
template <typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE A Rescale(A m_old, A m_new) {
  return m_new == -Inf<A>() ? A(1) : Exp2(m_old - m_new);
}
// exp2(s - m) with the same guard: a masked s (-inf) gives 0.
template <typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE A Prob(A s, A m) {
  return Exp2(s - (m == -Inf<A>() ? A(0) : m));
}
// Natural-log log-sum-exp of a row from its log2-domain max and sum.
template <typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE A NaturalLse(A m, A l) {
  return (m + Log2(l)) * A(kLn2);
}
// Backward: the probability of a visible pair from its raw score s = q·k,
// c = scale·log2(e) and lse2 = lse·log2(e); and dS = P∘(dP - Di).
template <typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE A BwdProb(A s, A c, A lse2) {
  return Exp2(s * c - lse2);
}
template <typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE A BwdDs(A p, A dp, A di) {
  return p * (dp - di);
}

// Part of rowsum(dO∘O) for one row: the columns lane, lane + lanes, ...
template <typename T, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE A DiPart(const T* dout, int64_t dout_sd, const T* out, int64_t out_sd, int d,
                                             int lane, int lanes) {
  A s = 0;
  for (int c = lane; c < d; c += lanes)
    s += ConvertElement<A>(dout[c * dout_sd]) * ConvertElement<A>(out[c * out_sd]);
  return s;
}

// ---------------------------------------------------------------------------
// Shared-memory tiles.

template <typename A>
struct Quad {
  A x[4];
};

// Four consecutive elements at a 16-byte aligned address.
template <typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE Quad<A> Load4(const A* p) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(A) == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    return {{v.x, v.y, v.z, v.w}};
  } else {
    const double2 a = *reinterpret_cast<const double2*>(p);
    const double2 b = *reinterpret_cast<const double2*>(p + 2);
    return {{a.x, a.y, b.x, b.y}};
  }
#else
  return {{p[0], p[1], p[2], p[3]}};
#endif
}

// dst[r*kLd + c] = mul * src[r*rs + c*cs] for r < rows, c < d; zero for the
// rest of the kTile x kDP tile (padding rows and columns are read by the
// products and must be finite). This thread's share: elements tid, tid+256, ...
template <class G, typename T, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void LoadRows(A* dst, const T* src, int64_t rs, int64_t cs, int rows, int d,
                                                   A mul, int tid) {
  for (int e = tid; e < G::kTile * G::kDP; e += kThreads) {
    const int r = e / G::kDP, c = e % G::kDP;
    A x = A(0);
    if (r < rows && c < d) x = mul * ConvertElement<A>(src[r * rs + c * cs]);
    dst[r * G::kLd + c] = x;
  }
}

// acc[i][j] = sum_{c < kDP} a[(ty + 16i) kLd + c] * b[(tx + 16j) kLd + c].
template <class G, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void ScoresNT(const A* a, const A* b, int ty, int tx, A (&acc)[G::kM][G::kM]) {
  constexpr int kM = G::kM;
  OCTET_FLASH_UNROLL
  for (int i = 0; i < kM; ++i)
    OCTET_FLASH_UNROLL
    for (int j = 0; j < kM; ++j) acc[i][j] = A(0);
#if defined(__CUDACC__)
#pragma unroll 1
#endif
  for (int c = 0; c < G::kDP; c += 4) {
    Quad<A> av[G::kM], bv[G::kM];
    OCTET_FLASH_UNROLL
    for (int i = 0; i < kM; ++i) av[i] = Load4(a + (ty + 16 * i) * G::kLd + c);
    OCTET_FLASH_UNROLL
    for (int j = 0; j < kM; ++j) bv[j] = Load4(b + (tx + 16 * j) * G::kLd + c);
    OCTET_FLASH_UNROLL
    for (int u = 0; u < 4; ++u)
      OCTET_FLASH_UNROLL
      for (int i = 0; i < kM; ++i)
        OCTET_FLASH_UNROLL
        for (int j = 0; j < kM; ++j) acc[i][j] += av[i].x[u] * bv[j].x[u];
  }
}

// acc[i][g][u] += sum_{k < kTile} s[(ty + 16i) kLdS + k] * b[k kLd + 64g + 4tx + u].
template <class G, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void AccumNN(const A* s, const A* b, int ty, int tx,
                                                  A (&acc)[G::kM][G::kG][4]) {
  constexpr int kM = G::kM;
#if defined(__CUDACC__)
#pragma unroll 2
#endif
  for (int k = 0; k < G::kTile; k += 4) {
    Quad<A> av[G::kM];
    OCTET_FLASH_UNROLL
    for (int i = 0; i < kM; ++i) av[i] = Load4(s + (ty + 16 * i) * G::kLdS + k);
    OCTET_FLASH_UNROLL
    for (int kk = 0; kk < 4; ++kk) {
      OCTET_FLASH_UNROLL
      for (int g = 0; g < G::kG; ++g) {
        const Quad<A> bv = Load4(b + (k + kk) * G::kLd + 64 * g + 4 * tx);
        OCTET_FLASH_UNROLL
        for (int i = 0; i < kM; ++i)
          OCTET_FLASH_UNROLL
          for (int u = 0; u < 4; ++u) acc[i][g][u] += av[i].x[kk] * bv.x[u];
      }
    }
  }
}

template <class G, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void Zero(A (&acc)[G::kM][G::kG][4]) {
  OCTET_FLASH_UNROLL
  for (int i = 0; i < G::kM; ++i)
    OCTET_FLASH_UNROLL
    for (int g = 0; g < G::kG; ++g)
      OCTET_FLASH_UNROLL
      for (int u = 0; u < 4; ++u) acc[i][g][u] = A(0);
}

// Stores acc * mul into rows row0 + ty + 16i (< t) and columns < d of dst
// (row 0 of a head, strides rs/cs).
template <class G, typename T, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void StoreRows(const A (&acc)[G::kM][G::kG][4], A mul, T* dst, int64_t rs,
                                                    int64_t cs, int64_t row0, int64_t t, int d, int ty, int tx) {
  OCTET_FLASH_UNROLL
  for (int i = 0; i < G::kM; ++i) {
    const int64_t row = row0 + ty + 16 * i;
    if (row >= t) continue;
    OCTET_FLASH_UNROLL
    for (int g = 0; g < G::kG; ++g)
      OCTET_FLASH_UNROLL
      for (int u = 0; u < 4; ++u) {
        const int c = 64 * g + 4 * tx + u;
        if (c < d) dst[row * rs + c * cs] = ConvertElement<T>(acc[i][g][u] * mul);
      }
  }
}

// lse2[r] = lse·log2(e), di[r] = Di for the rows row0 + r < t of head bh;
// +inf and 0 past t (no probability mass, no contribution).
template <class G, typename A>
OCTET_HOST_DEVICE OCTET_FLASH_INLINE void LoadRowStats(A* lse2, A* di, const A* lse, const A* di_g, int64_t bh,
                                                       int64_t row0, int64_t t, int tid) {
  for (int r = tid; r < G::kTile; r += kThreads) {
    const int64_t row = row0 + r;
    const bool in = row < t;
    lse2[r] = in ? lse[bh * t + row] * A(kLog2e) : Inf<A>();
    di[r] = in ? di_g[bh * t + row] : A(0);
  }
}

}  // namespace octet::flash
