// The arithmetic of the fused CPU attention kernels in f32 (and f64): one
// register-blocked GEMM shape, and the forward and backward tile functions
// built from it (vector helpers: attention_simd.h).
//
// NOTE [attention isa dispatch]
// The library is compiled for a baseline (OCTET_CPU_ARCH). The tile functions
// (all the arithmetic) are compiled three times through always_inline bodies:
// under __attribute__((target(...))) for AVX-512 and for AVX2+FMA, and for
// the baseline ("generic"), each with its own vector width and register
// blocking, and chosen at run time from the CPU's features (ActiveTileFns).
// The math uses GCC vector extensions whose width matches the target's
// registers (64/32/16 bytes): wider-than-native vectors would be split, and
// GCC splits compares and selects of such vectors into scalar code.
// Packing, dispatch and the OpenMP loops (attention_cpu.cc) stay baseline
// code. A fourth level, kAvx512Bf16, runs bfloat16 attention on BF16 dot
// products (attention_bf16.cc, NOTE [bf16 attention tiles]) where the CPU
// GEMMs chose them too; f32 and f64 run the AVX-512 tiles under it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include <octet/core/convert.h>
#include <octet/core/macros.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu/attention_simd.h>
#include <octet/ops/cpu/attention_tiles.h>

#if defined(__x86_64__) || defined(__i386__)
#define OCTET_ATTN_X86 1
#else
#define OCTET_ATTN_X86 0
#endif

namespace octet {
namespace internal {

const char* Name(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::kGeneric: return "generic";
    case AttentionIsa::kAvx2: return "avx2";
    case AttentionIsa::kAvx512: return "avx512";
    case AttentionIsa::kAvx512Bf16: return "avx512bf16";
    case AttentionIsa::kAmxBf16: return "amxbf16";
  }
  return "?";
}

AttentionIsa DetectedAttentionIsa() {
  static const AttentionIsa isa = [] {
#if OCTET_ATTN_X86
    __builtin_cpu_init();
    const bool fma = __builtin_cpu_supports("fma");
    if (fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
      if (!__builtin_cpu_supports("avx512bf16")) return AttentionIsa::kAvx512;
      return AmxTilesPermitted() ? AttentionIsa::kAmxBf16 : AttentionIsa::kAvx512Bf16;
    }
    if (fma && __builtin_cpu_supports("avx2")) return AttentionIsa::kAvx2;
#endif
    return AttentionIsa::kGeneric;
  }();
  return isa;
}

namespace {
std::atomic<int> g_isa_override{-1};
}  // namespace

AttentionIsa ActiveAttentionIsa() {
  const int forced = g_isa_override.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<AttentionIsa>(std::min(forced, static_cast<int>(DetectedAttentionIsa())));
  AttentionIsa best = DetectedAttentionIsa();
  // OCTET_DISABLE_AVX512 (read by the converters) switches the AVX-512 paths off here too.
  if (best >= AttentionIsa::kAvx512 && !ActiveConverterIsa().avx512) return AttentionIsa::kAvx2;
  // And OCTET_DISABLE_AVX512_BF16 the BF16 ones (dot products and AMX).
  if (best >= AttentionIsa::kAvx512Bf16 && !ActiveConverterIsa().bf16) return AttentionIsa::kAvx512;
  // AMX where the GEMMs compute in BF16 too (OCTET_CPU_GEMM=fp32 keeps
  // bfloat16 attention on FP32 tiles); BF16 dot products where they beat FP32
  // FMAs (CpuGemmPathInfo::bf16_dot_kernels).
  if (best == AttentionIsa::kAmxBf16 && ActiveCpuGemmPath() == CpuGemmPath::kBf16Dot) return best;
  if (best == AttentionIsa::kAmxBf16) best = AttentionIsa::kAvx512Bf16;
  if (best == AttentionIsa::kAvx512Bf16 && !ActiveBf16DotKernels())
    best = AttentionIsa::kAvx512;
  return best;
}

void SetAttentionIsaForTesting(std::optional<AttentionIsa> isa) {
  g_isa_override.store(isa ? static_cast<int>(*isa) : -1, std::memory_order_relaxed);
}

}  // namespace internal

namespace cpu::attn {
namespace {

// ---------------------------------------------------------------------------
// The one GEMM shape: for r < R rows and NV vectors of columns,
//   c[r*ldc + 0..NV*L) (+)= sum_{k<n} a[r*ars + k*acs] * b[k*ldb + 0..NV*L).
// a is read by scalar broadcasts with arbitrary strides (so a transposed
// operand costs nothing); b and c are rows of vectors.

template <typename A, typename S, int R, int NV, bool kAccumulate>
OCTET_INLINE void OuterBlock(const A* a, int64_t ars, int64_t acs, int64_t n, const A* b, int64_t ldb, A* c,
                             int64_t ldc) {
  using V = typename S::V;
  constexpr int L = S::kLanes;
  V acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = kAccumulate ? LoadV<V>(c + r * ldc + v * L) : V{};
  for (int64_t k = 0; k < n; ++k) {
    V bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = LoadV<V>(b + k * ldb + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const A s = a[r * ars + k * acs];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) StoreV(c + r * ldc + v * L, acc[r][v]);
}

template <typename A, typename S, int R, int kMaxNV, bool kAccumulate>
OCTET_INLINE void OuterRows(int nv, const A* a, int64_t ars, int64_t acs, int64_t n, const A* b, int64_t ldb, A* c,
                            int64_t ldc) {
  static_assert(kMaxNV >= 1 && kMaxNV <= 4);
  if constexpr (kMaxNV >= 4) {
    if (nv == 4) return OuterBlock<A, S, R, 4, kAccumulate>(a, ars, acs, n, b, ldb, c, ldc);
  }
  if constexpr (kMaxNV >= 3) {
    if (nv == 3) return OuterBlock<A, S, R, 3, kAccumulate>(a, ars, acs, n, b, ldb, c, ldc);
  }
  if constexpr (kMaxNV >= 2) {
    if (nv == 2) return OuterBlock<A, S, R, 2, kAccumulate>(a, ars, acs, n, b, ldb, c, ldc);
  }
  OuterBlock<A, S, R, 1, kAccumulate>(a, ars, acs, n, b, ldb, c, ldc);
}

// Register blocking and vector width of one instruction set: kRows rows x
// kMaxNV vectors of accumulators, leaving registers for the b row and the
// broadcast (AVX-512: 16 of 32 zmm; AVX2 and SSE: 8 of 16).
template <int kRowsIn, int kMaxNVIn, int kBytesIn>
struct Blocking {
  static constexpr int kRows = kRowsIn;
  static constexpr int kMaxNV = kMaxNVIn;
  static constexpr int kBytes = kBytesIn;
};

// c (m x w) (+)= a (m x n, strides ars/acs) . b (n x w, row stride ldb).
// w is a multiple of the vector length; m and n are any sizes. With a Tri
// other than kFull, work that the causal mask makes useless is skipped at
// row-block / vector granularity (entries of c skipped by kColsFromRow are
// left unwritten).
template <typename A, typename Blk, bool kAccumulate>
OCTET_INLINE void Outer(const A* a, int64_t ars, int64_t acs, int64_t n, const A* b, int64_t ldb, A* c, int64_t ldc,
                        int64_t m, int64_t w, Tri tri = Tri::kFull) {
  using S = Simd<A, Blk::kBytes>;
  constexpr int L = S::kLanes;
  constexpr int RB = Blk::kRows;
  constexpr int NVB = Blk::kMaxNV;
  for (int64_t r0 = 0; r0 < m; r0 += RB) {
    const int64_t rows = std::min<int64_t>(RB, m - r0);
    int64_t k0 = 0, k1 = n, col0 = 0;
    if (tri == Tri::kColsFromRow) col0 = r0 / L * L;
    if (tri == Tri::kContractFromRow) k0 = std::min(r0, n);
    if (tri == Tri::kContractToRow) k1 = std::min(n, r0 + rows);
    const A* ar = a + r0 * ars + k0 * acs;
    for (int64_t c0 = col0; c0 < w; c0 += NVB * L) {
      const int nv = static_cast<int>(std::min<int64_t>(NVB, (w - c0) / L));
      const A* br = b + k0 * ldb + c0;
      A* cr = c + r0 * ldc + c0;
      if (rows == RB) {
        OuterRows<A, S, RB, NVB, kAccumulate>(nv, ar, ars, acs, k1 - k0, br, ldb, cr, ldc);
        continue;
      }
      if constexpr (RB > 3) {
        if (rows == 3) OuterRows<A, S, 3, NVB, kAccumulate>(nv, ar, ars, acs, k1 - k0, br, ldb, cr, ldc);
      }
      if constexpr (RB > 2) {
        if (rows == 2) OuterRows<A, S, 2, NVB, kAccumulate>(nv, ar, ars, acs, k1 - k0, br, ldb, cr, ldc);
      }
      if constexpr (RB > 1) {
        if (rows == 1) OuterRows<A, S, 1, NVB, kAccumulate>(nv, ar, ars, acs, k1 - k0, br, ldb, cr, ldc);
      }
    }
  }
}


// ---------------------------------------------------------------------------
// Tile bodies.

template <typename A, typename Blk>
OCTET_INLINE void FwdTileBody(const FwdTile<A>& t) {
  using S = Simd<A, Blk::kBytes>;
  using V = typename S::V;
  constexpr int L = S::kLanes;
  constexpr int NQ = kTile / L;
  // S^T (kn x kTile) = K (kn x D) . Q^T (D x kTile)
  Outer<A, Blk, false>(t.k, t.k_rs, t.k_cs, t.d, t.qt, kTile, t.st, kTile, t.kn, kTile,
                       t.diagonal ? Tri::kColsFromRow : Tri::kFull);
  if (t.diagonal) {
    for (int64_t j = 1; j < t.kn; ++j)
      for (int64_t i = 0; i < j; ++i) t.st[j * kTile + i] = -std::numeric_limits<A>::infinity();
  }
  // Online softmax, vectorised over the kTile queries (columns).
  V mnew[NQ], alpha[NQ], sum[NQ];
#pragma GCC unroll 16
  for (int v = 0; v < NQ; ++v) mnew[v] = LoadV<V>(t.m + v * L);
  for (int64_t j = 0; j < t.kn; ++j)
#pragma GCC unroll 16
    for (int v = 0; v < NQ; ++v) mnew[v] = MaxV(mnew[v], LoadV<V>(t.st + j * kTile + v * L));
#pragma GCC unroll 16
  for (int v = 0; v < NQ; ++v) {
    alpha[v] = Exp2<S>(LoadV<V>(t.m + v * L) - mnew[v]);
    StoreV(t.m + v * L, mnew[v]);
    sum[v] = V{};
  }
  for (int64_t j = 0; j < t.kn; ++j) {
#pragma GCC unroll 16
    for (int v = 0; v < NQ; ++v) {
      const V p = Exp2<S>(LoadV<V>(t.st + j * kTile + v * L) - mnew[v]);
      StoreV(t.st + j * kTile + v * L, p);
      sum[v] += p;
    }
  }
  RescaleRows<S, NQ>(alpha, sum, t.l, t.o, t.qn, t.dp);
  // O (qn x Dp) += P (qn x kn) . V (kn x Dp), with P[i][j] = st[j][i].
  Outer<A, Blk, true>(t.st, 1, kTile, t.kn, t.v, t.v_rs, t.o, t.dp, t.qn, t.dp,
                      t.diagonal ? Tri::kContractToRow : Tri::kFull);
}

template <typename A, typename Blk>
OCTET_INLINE void BwdTileBody(const BwdTile<A>& t) {
  using S = Simd<A, Blk::kBytes>;
  using V = typename S::V;
  constexpr int L = S::kLanes;
  constexpr int NQ = kTile / L;
  const Tri cols = t.diagonal ? Tri::kColsFromRow : Tri::kFull;
  Outer<A, Blk, false>(t.kr, t.k_rs, 1, t.d, t.qt, kTile, t.pt, kTile, t.kn, kTile, cols);    // S^T = K Q^T
  Outer<A, Blk, false>(t.vr, t.v_rs, 1, t.d, t.dot, kTile, t.dst, kTile, t.kn, kTile, cols);  // dP^T = V dO^T
  V lse2[NQ], di[NQ];
#pragma GCC unroll 16
  for (int v = 0; v < NQ; ++v) {
    lse2[v] = LoadV<V>(t.lse2 + v * L);
    di[v] = LoadV<V>(t.di + v * L);
  }
  const V c = Splat<V>(t.c);
  for (int64_t j = 0; j < t.kn; ++j) {
#pragma GCC unroll 16
    for (int v = 0; v < NQ; ++v) {
      A* ps = t.pt + j * kTile + v * L;
      A* ds = t.dst + j * kTile + v * L;
      const V p = Exp2<S>(LoadV<V>(ps) * c - lse2[v]);
      StoreV(ps, p);
      StoreV(ds, p * (LoadV<V>(ds) - di[v]));
    }
  }
  if (t.diagonal) {
    for (int64_t j = 1; j < t.kn; ++j)
      for (int64_t i = 0; i < j; ++i) t.pt[j * kTile + i] = t.dst[j * kTile + i] = A(0);
  }
  // dV (kn x Dp) += P^T (kn x qn) . dO (qn x Dp); dK += dS^T . Q; dQ (qn x Dp) += dS . K.
  const Tri from = t.diagonal ? Tri::kContractFromRow : Tri::kFull;
  const Tri to = t.diagonal ? Tri::kContractToRow : Tri::kFull;
  if (t.dv) Outer<A, Blk, true>(t.pt, kTile, 1, t.qn, t.dor, t.do_rs, t.dv, t.dp, t.kn, t.dp, from);
  if (t.dk) Outer<A, Blk, true>(t.dst, kTile, 1, t.qn, t.qr, t.q_rs, t.dk, t.dp, t.kn, t.dp, from);
  if (t.dq) Outer<A, Blk, true>(t.dst, 1, kTile, t.kn, t.kr, t.k_rs, t.dq, t.dp, t.qn, t.dp, to);
}

// ---------------------------------------------------------------------------
// One tile function per instruction set.

using BlockGeneric = Blocking<4, 2, 16>;
using BlockAvx2 = Blocking<4, 2, 32>;
using BlockAvx512 = Blocking<4, 4, 64>;

template <typename A>
void FwdTileGeneric(const FwdTile<A>& t) {
  FwdTileBody<A, BlockGeneric>(t);
}
template <typename A>
void BwdTileGeneric(const BwdTile<A>& t) {
  BwdTileBody<A, BlockGeneric>(t);
}
#if OCTET_ATTN_X86
template <typename A>
__attribute__((target("avx2,fma"))) void FwdTileAvx2(const FwdTile<A>& t) {
  FwdTileBody<A, BlockAvx2>(t);
}
template <typename A>
__attribute__((target("avx2,fma"))) void BwdTileAvx2(const BwdTile<A>& t) {
  BwdTileBody<A, BlockAvx2>(t);
}
template <typename A>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))) void FwdTileAvx512(const FwdTile<A>& t) {
  FwdTileBody<A, BlockAvx512>(t);
}
template <typename A>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))) void BwdTileAvx512(const BwdTile<A>& t) {
  BwdTileBody<A, BlockAvx512>(t);
}
#endif

}  // namespace

template <typename A>
TileFns<A> ActiveTileFns() {
  switch (internal::ActiveAttentionIsa()) {
#if OCTET_ATTN_X86
    case internal::AttentionIsa::kAvx512:
    case internal::AttentionIsa::kAvx512Bf16:
    case internal::AttentionIsa::kAmxBf16: return {&FwdTileAvx512<A>, &BwdTileAvx512<A>};
    case internal::AttentionIsa::kAvx2: return {&FwdTileAvx2<A>, &BwdTileAvx2<A>};
#endif
    default: return {&FwdTileGeneric<A>, &BwdTileGeneric<A>};
  }
}

template TileFns<float> ActiveTileFns<float>();
template TileFns<double> ActiveTileFns<double>();

}  // namespace cpu::attn
}  // namespace octet
