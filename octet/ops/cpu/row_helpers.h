// Row helpers for the CPU kernels that work one contiguous row at a time
// (norm, softmax, cross-entropy, embedding): widening a row of T into the
// compute type, narrowing it back, and lane-split row sums that the compiler
// vectorises without reassociating one long chain.
#pragma once

#include <octet/core/convert_internal.h>  // OCTET_CONVERT_X86_KERNELS, OCTET_TARGET_AVX512

#if defined(__FMA__) || OCTET_CONVERT_X86_KERNELS
#include <immintrin.h>  // FmaPart, SumLanesInOrder
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include <octet/core/bf16_simd_internal.h>
#include <octet/core/convert.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/functors.h>

namespace octet::cpu {

// Rows per ParallelFor grain so that one grain is about kParallelGrain elements.
inline int64_t RowGrain(int64_t row_length) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(row_length, 1));
}

// The row src[0, n) in the compute type A = AccType<T>: src itself when T is A,
// else widened into buf (n elements) and buf is returned.
template <typename T, typename A = AccType<T>>
const A* LoadRow(const T* src, int64_t n, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    return src;
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    Bf16ToFloatRow(reinterpret_cast<const uint16_t*>(src), buf, n);
    return buf;
  } else if constexpr (std::is_same_v<T, float16>) {
    F16ToFloatRow(reinterpret_cast<const uint16_t*>(src), buf, n);
    return buf;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = ConvertElement<A>(src[i]);
    return buf;
  }
}

// dst[i] = T(src[i]) (round to nearest even for bf16/f16).
template <typename T, typename A = AccType<T>>
void StoreRow(const A* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    if (src != dst)
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    FloatToBf16Row(src, reinterpret_cast<uint16_t*>(dst), n);
  } else if constexpr (std::is_same_v<T, float16>) {
    FloatToF16Row(src, reinterpret_cast<uint16_t*>(dst), n);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = ConvertElement<T>(src[i]);
  }
}

// A row src[0, n) of T read in the compute type A = AccType<T>, for loops
// that index it: T == A is read in place; bf16 is widened on each read (the
// top half of an f32: a shift that vectorises inside the loop reading it,
// where a LoadRow pass first costs an extra pass over the row — measured
// 12-17 % of a bf16 LayerNorm forward); f16 is widened into buf (n
// elements) once by LoadRow.
template <typename T, typename A = AccType<T>>
class RowIn {
 public:
  // Whether rows are read where they are (no buf needed): T is A, or bf16.
  static constexpr bool kInPlace = std::is_same_v<T, A> || std::is_same_v<T, bfloat16>;

  RowIn(const T* src, int64_t n, A* buf) {
    if constexpr (kInPlace) {
      src_ = src;
    } else {
      buf_ = LoadRow(src, n, buf);
    }
  }
  // The row read in place (kInPlace only).
  const T* data() const
    requires kInPlace
  {
    return src_;
  }
  OCTET_INLINE A operator[](int64_t i) const {
    if constexpr (std::is_same_v<T, A>) {
      return src_[i];
    } else if constexpr (std::is_same_v<T, bfloat16>) {
      return Bf16BitsToFloat(src_[i].bits);
    } else {
      return buf_[i];
    }
  }

 private:
  const T* src_ = nullptr;
  const A* buf_ = nullptr;
};

// Where a kernel builds a row in the compute type before storing it: the
// destination itself when T is A, else the scratch buffer.
template <typename T, typename A = AccType<T>>
A* RowOut(T* dst, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    return dst;
  } else {
    return buf;
  }
}

inline constexpr int kRowLanes = 16;

// sum_i f(i) over [0, n) with kRowLanes independent accumulators.
template <typename A, typename F>
OCTET_INLINE A LaneSum(int64_t n, F&& f) {
  A acc[kRowLanes] = {};
  int64_t i = 0;
  for (; i + kRowLanes <= n; i += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l) acc[l] += f(i + l);
  A r = 0;
  for (int l = 0; l < kRowLanes; ++l) r += acc[l];
  for (; i < n; ++i) r += f(i);
  return r;
}

// kRowLanes lanes of the compute type as GCC vectors: lane l of an operation
// on every part is the l-th of kRowLanes scalar operations, so code written
// on these sums in the same order as a scalar lane loop, vectorised whatever
// the vectoriser makes of a loop. The parts are 32 bytes, native in both
// builds (NOTE [norm isa dispatch]): one 64-byte vector was spilled to the
// stack every step in the baseline (AVX2) build.
template <typename A>
struct Lanes {
  static constexpr int kPer = static_cast<int>(32 / sizeof(A));
  static constexpr int kParts = kRowLanes / kPer;
  typedef A Part __attribute__((vector_size(32)));
  Part p[kParts];
  // The sum of the lanes, lane 0 first.
  OCTET_INLINE A Sum() const {
    A r = 0;
    for (int l = 0; l < kRowLanes; ++l) r += p[l / kPer][l % kPer];
    return r;
  }
};

// x, rounded to its type, as an operand GCC cannot fuse into the add that
// follows (NOTE [unfused row statistics] in ops/cpu/norm_cpu.cc): an empty
// asm makes the value opaque, so -ffp-contract=fast sees no multiply to fuse.
template <typename A>
OCTET_INLINE A Unfused(A x) {
#if defined(__x86_64__)
  asm("" : "+x"(x));
#else
  asm("" : "+w"(x));
#endif
  return x;
}

// c + a * b in every lane of a 32-byte part, rounded once (std::fma per
// lane): explicit, so that no build depends on the compiler contracting.
template <typename P>
OCTET_INLINE P FmaPart(P a, P b, P c) {
#if defined(__FMA__)
  if constexpr (sizeof(a[0]) == 4) {
    return reinterpret_cast<P>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b),
                                               reinterpret_cast<__m256>(c)));
  } else {
    return reinterpret_cast<P>(_mm256_fmadd_pd(reinterpret_cast<__m256d>(a), reinterpret_cast<__m256d>(b),
                                               reinterpret_cast<__m256d>(c)));
  }
#else
  P r;
  for (int l = 0; l < static_cast<int>(32 / sizeof(a[0])); ++l) r[l] = std::fma(a[l], b[l], c[l]);
  return r;
#endif
}

// ExpFastFactors (NOTE [exp fused multiply-adds] in ops/functors.h) on every
// lane of a 32-byte part of floats: the same operations, so the same bits.
template <typename P>
OCTET_INLINE void ExpFastPart(P x, P& p, P& scale) {
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 xv = reinterpret_cast<__m256>(x);
  const __m256 xc = _mm256_max_ps(_mm256_set1_ps(functors::kExpFastLo),
                                  _mm256_min_ps(_mm256_set1_ps(functors::kExpFastHi), xv));
  using namespace functors::exp_fast;
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  const __m256 r =
      _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc));
  __m256 q = _mm256_set1_ps(kPoly[0]);
  for (int k = 1; k < kPolyTerms; ++k) q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(kPoly[k]));
  p = reinterpret_cast<P>(q);
  scale = reinterpret_cast<P>(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(126)), 23));
#else
  for (int l = 0; l < static_cast<int>(32 / sizeof(float)); ++l) functors::ExpFastFactors(x[l], p[l], scale[l]);
#endif
}

// v = p[0, kRowLanes) in the compute type A: vector loads when T is A, loads
// and shifts for bf16 (the top half of an f32), else element by element.
template <typename T, typename A>
OCTET_INLINE void LoadLanes(const T* p, Lanes<A>& v) {
  constexpr int kPer = Lanes<A>::kPer;
  for (int j = 0; j < Lanes<A>::kParts; ++j) {
    if constexpr (std::is_same_v<T, A>) {
      std::memcpy(&v.p[j], p + j * kPer, sizeof(v.p[j]));
    } else if constexpr (std::is_same_v<T, bfloat16> && std::is_same_v<A, float>) {
#if OCTET_CONVERT_X86_KERNELS && defined(__AVX2__)
      // __builtin_convertvector of 8 u16 took GCC 12 five instructions.
      const __m256 w = convert_internal::Bf16x8ToFloat(reinterpret_cast<const uint16_t*>(p + j * kPer));
      std::memcpy(&v.p[j], &w, sizeof(w));
#else
      for (int l = 0; l < kPer; ++l) v.p[j][l] = Bf16BitsToFloat(p[j * kPer + l].bits);
#endif
    } else {
      for (int l = 0; l < kPer; ++l) v.p[j][l] = ConvertElement<A>(p[j * kPer + l]);
    }
  }
}

// sum over i < n of a[i] * b[i] in the compute type A (a, b: A or bf16),
// with kRowLanes independent accumulators, each product added by a fused
// multiply-add. Left to the compiler in a scalar lane loop (acc += a * b
// under -ffp-contract=fast), whether a product is fused was its choice per
// build: the baseline and AVX-512 builds of a softmax backward summed
// different bits (NOTE [softmax isa dispatch] in ops/cpu/softmax_cpu.cc);
// written with std::fma per lane, GCC 12 did not vectorise the loop at all
// (16 scalar FMAs a step; perf, attention backward). So the lanes are
// Lanes, multiplied and added by FmaPart: the same roundings as std::fma per
// lane (the tail's), in vector FMAs.
template <typename A, typename TA, typename TB>
OCTET_INLINE A LaneDot(int64_t n, const TA* a, const TB* b) {
  Lanes<A> acc{};
  int64_t i = 0;
  for (; i + kRowLanes <= n; i += kRowLanes) {
    Lanes<A> va, vb;
    LoadLanes<TA, A>(a + i, va);
    LoadLanes<TB, A>(b + i, vb);
    for (int j = 0; j < Lanes<A>::kParts; ++j) acc.p[j] = FmaPart(va.p[j], vb.p[j], acc.p[j]);
  }
  A r = acc.Sum();
  for (; i < n; ++i) r = std::fma(ConvertElement<A>(a[i]), ConvertElement<A>(b[i]), r);
  return r;
}

// NOTE [MaxStep]: `b > a ? b : a`, the scalar step of RowMax. GCC 12
// compiles that select on floats to a compare and an integer cmov, moving
// both values through general registers: in the 15 dependent steps of
// RowMax's lane combine it was a quarter of the cross-entropy forward's time
// on 256-wide rows (perf, 2026-11-28). vmaxss with b as its first source is
// exactly that select (a when either is NaN or both are equal), in one
// instruction; vmaxsd likewise for doubles. octet_norm_bench
// BM_CrossEntropyFwdBwd (2048, 256), three alternating runs: f32
// 0.196-0.200 -> 0.151-0.158 ms, bf16 0.244-0.248 -> 0.196-0.213. The
// RowHelpers tests hold the choice among NaNs and signed zeros.
template <typename A>
OCTET_INLINE A MaxStep(A a, A b) {
#if defined(__AVX__)
  // Inline assembly, not _mm_max_ss: GCC folds that builtin as an IEEE-unsafe
  // MAX_EXPR, free to swap its operands (with constant arguments it returned
  // the NaN that maxss would have skipped; RowHelpers.MaxStepIsTheScalarSelect).
  A r;
  if constexpr (std::is_same_v<A, float>) {
    asm("vmaxss %[a], %[b], %[r]" : [r] "=x"(r) : [a] "x"(a), [b] "x"(b));  // b > a ? b : a
    return r;
  } else if constexpr (std::is_same_v<A, double>) {
    asm("vmaxsd %[a], %[b], %[r]" : [r] "=x"(r) : [a] "x"(a), [b] "x"(b));
    return r;
  }
#endif
  return b > a ? b : a;
}

// max_i p[i] over a non-empty row, in the compute type A (p: A, or bf16
// widened in registers: A = AccType<T>). NaNs are skipped unless p[0] is NaN: callers
// that go on to sum exp(p[i] - max) get NaN from the NaN elements themselves.
// The kRowLanes lanes are Lanes parts: written as a scalar lane loop, GCC 12
// kept 16 scalar maxss a step in both builds (perf annotate, cross-entropy
// forward, 2026-11-28: over half of the forward's time). Each lane makes the
// scalar loop's choice (`v > m ? v : m`) and the lanes combine in its order,
// lane 0 first: the same bits. NOTE [max from the source row] below
// says why a bf16 row is read as it is.
template <typename T, typename A = AccType<T>>
OCTET_INLINE A RowMax(const T* p, int64_t n) {
  constexpr int kPer = Lanes<A>::kPer;
  Lanes<A> acc;
  const A first = ConvertElement<A>(p[0]);
  for (int l = 0; l < kRowLanes; ++l) acc.p[l / kPer][l % kPer] = first;
  int64_t i = 0;
  for (; i + kRowLanes <= n; i += kRowLanes) {
    Lanes<A> v;
    LoadLanes<T, A>(p + i, v);
    for (int j = 0; j < Lanes<A>::kParts; ++j) acc.p[j] = v.p[j] > acc.p[j] ? v.p[j] : acc.p[j];
  }
  A r = acc.p[0][0];
  for (int l = 1; l < kRowLanes; ++l) {
    const A a = acc.p[l / kPer][l % kPer];
    r = MaxStep(r, a);
  }
  for (; i < n; ++i) r = MaxStep(r, ConvertElement<A>(p[i]));
  return r;
}

// The max of a softmax or cross-entropy row (softmax_cpu.cc,
// cross_entropy_cpu.cc).
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

#if OCTET_CONVERT_X86_KERNELS
// The 16 lanes of v added in order from +0, lane 0 first: Lanes<float>::Sum
// and LaneSum's combine, for the AVX-512 kernels that keep a row's lane sums
// in one register (NOTE [short bf16 rows in registers] in norm_bf16_rows.cc,
// NOTE [cross-entropy rows in registers] in cross_entropy_cpu.cc).
OCTET_TARGET_AVX512 OCTET_INLINE float SumLanesInOrder(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  float r = 0;
  for (int i = 0; i < 16; ++i) r += l[i];
  return r;
}
#endif

}  // namespace octet::cpu
