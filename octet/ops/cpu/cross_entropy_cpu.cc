// CPU kernels of the cross-entropy loss (NOTE [fused cross-entropy]): one
// pass over each logits row forward, one backward, no (N, V) probabilities.
// The row loops are compiled for the baseline and for AVX-512 (NOTE
// [softmax isa dispatch] in softmax_cpu.cc).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <octet/core/bf16_avx512_internal.h>
#include <octet/core/convert.h>
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

// sum over i < v of exp(x[i] - m), with LaneSum's lanes and order. For
// float each exponential's last product is fused into its lane's add,
// written out (NOTE [exp fused multiply-adds] in ops/functors.h): what GCC
// made of LaneSum at -O2, now the same in every build.
template <typename A>
OCTET_INLINE A ExpSum(const A* x, int64_t v, A m) {
  if constexpr (std::is_same_v<A, float>) {
    constexpr int kParts = Lanes<float>::kParts;
    Lanes<float> acc{};
    int64_t i = 0;
    for (; i + kRowLanes <= v; i += kRowLanes) {
      Lanes<float> xv;
      LoadLanes<float, float>(x + i, xv);
      for (int j = 0; j < kParts; ++j) {
        typename Lanes<float>::Part p, scale;
        ExpFastPart(xv.p[j] - m, p, scale);
        acc.p[j] = FmaPart(p, scale, acc.p[j]);
      }
    }
    float s = acc.Sum();
    for (; i < v; ++i) {
      float p, scale;
      functors::ExpFastFactors(x[i] - m, p, scale);
      s = std::fma(p, scale, s);
    }
    return s;
  } else {
    return LaneSum<A>(v, [&](int64_t i) { return Exp(x[i] - m); });
  }
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
    const A log_s = std::log(ExpSum(xr, v, m));
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

#if OCTET_CONVERT_X86_KERNELS
// NOTE [cross-entropy rows in registers]: GCC 12 compiled the forward's sum
// of exponentials 8 lanes wide for a bf16 row (two ymm accumulators) where
// the same loop over an f32 row got 16 (one zmm); the bf16 row was also
// widened into scratch first, and the backward narrowed its output in a
// pass of its own: the bf16 cross-entropy took 1.08x f32's time at (2048,
// 256) and (2048, 4096) (octet_norm_bench BM_CrossEntropyFwdBwd, AMX Xeon,
// 2026-11-29). On AVX-512 CPUs the forward of f32 and bf16 rows now runs
// intrinsic forms of the loops: the max (RowMax's per-lane choice and lane
// order), then the sum of exponentials 16 values at a time, a bf16 row
// widened in registers, rows of 64, 128 or 256 values loaded once and kept
// there. Where the CPU also has AVX-512 BF16 the bf16 backward computes 32
// values of exp(x - lse) * g, subtracts g at the target's lane and narrows
// them in registers. ExpFastx16 is ExpFastFactors (NOTE [exp fused
// multiply-adds] in ops/functors.h) and each exponential's last product is
// fused into its lane's add, as ExpSum writes it for the other builds, so
// the loss, logsumexp and dlogits are the baseline loop's bits in every
// build (CrossEntropy.IntrinsicRowsMatchTheBaselineLoop). Measured (same
// bench, medians of 3, three rounds, ms, f32 / bf16): (2048, 256)
// 0.289-0.312 / 0.329-0.338 before, 0.262-0.269 / 0.260-0.271 after;
// (2048, 4096) 2.95-3.26 / 3.00-3.53 before, 2.81-2.91 / 2.83-2.86 after.
// ExpSum alone on 32-byte lanes (the f32 row's 16 lanes as two ymm in the
// AVX-512 build) had made the f32 forward slower (3.39-3.56 ms at (2048,
// 4096)); the intrinsic rows took that back.

// ExpFast of 16 lanes, as its vectorised form computes them: the
// polynomial p (twice e^r) and the scale 2^(n-1); e^x = p * scale.
OCTET_TARGET_AVX512 OCTET_INLINE void ExpFastx16(__m512 x, __m512& p, __m512& scale) {
  const __m512 xc = _mm512_max_ps(_mm512_set1_ps(functors::kExpFastLo),
                                  _mm512_min_ps(_mm512_set1_ps(functors::kExpFastHi), x));
  using namespace functors::exp_fast;
  const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc));
  __m512 q = _mm512_set1_ps(kPoly[0]);
  for (int k = 1; k < kPolyTerms; ++k) q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(kPoly[k]));
  p = q;
  scale = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(126)), 23));
}

// RowMax's lane combine: lane 0, then MaxStep with lanes 1..15 in order.
OCTET_TARGET_AVX512 OCTET_INLINE float MaxLanesInOrder(__m512 acc) {
  alignas(64) float l[16];
  _mm512_store_ps(l, acc);
  float r = l[0];
  for (int i = 1; i < 16; ++i) r = MaxStep(r, l[i]);
  return r;
}

// A source row's elements as f32: f32 as they are, bf16 widened (exact).
OCTET_INLINE float ElementAsFloat(const float* p, int64_t i) { return p[i]; }
OCTET_INLINE float ElementAsFloat(const uint16_t* p, int64_t i) { return Bf16BitsToFloat(p[i]); }

// The loss and logsumexp of one row from its max m and sum s of exp(x - m).
template <typename S, typename I>
OCTET_INLINE void CeRowResult(const S* xs, const I* t, int64_t row, int64_t ignore_index, float m, float s, float* lp,
                              float* sp) {
  const float log_s = std::log(s);
  const int64_t ti = static_cast<int64_t>(t[row]);
  sp[row] = m + log_s;
  lp[row] = ti == ignore_index ? 0.0f : log_s - (ElementAsFloat(xs, ti) - m);
}

// A row of kBlocks x 16 values (NOTE [cross-entropy rows in registers]):
// loaded (a bf16 one widened) once, its max and its sum of exponentials
// taken from registers. S: float, or uint16_t for bf16 bits.
template <typename S, int kBlocks, typename I>
OCTET_TARGET_AVX512 void CeFwdRowsInRegisters(const S* x, const I* t, int64_t /*v*/, int64_t ignore_index, float* lp,
                                              float* sp, int64_t r0, int64_t r1) {
  using namespace convert_internal;
  constexpr int64_t v = 16 * kBlocks;
  for (int64_t row = r0; row < r1; ++row) {
    const S* xs = x + row * v;
    __m512 xv[kBlocks];
    for (int j = 0; j < kBlocks; ++j) xv[j] = LoadFloatx16(xs + 16 * j);
    __m512 mx = _mm512_set1_ps(ElementAsFloat(xs, 0));
    for (int j = 0; j < kBlocks; ++j) mx = _mm512_max_ps(xv[j], mx);  // RowMax's `v > acc ? v : acc`
    const float m = MaxLanesInOrder(mx);
    const __m512 vm = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int j = 0; j < kBlocks; ++j) {
      __m512 p, scale;
      ExpFastx16(_mm512_sub_ps(xv[j], vm), p, scale);
      acc = _mm512_fmadd_ps(p, scale, acc);
    }
    CeRowResult(xs, t, row, ignore_index, m, SumLanesInOrder(acc), lp, sp);
  }
}

// Rows [r0, r1) of any width (NOTE [cross-entropy rows in registers]): the
// max and then the sum, 16 values at a time, the tail as RowMax and ExpSum
// take it.
template <typename S, typename I>
OCTET_TARGET_AVX512 void CeFwdRowsAvx512(const S* x, const I* t, int64_t v, int64_t ignore_index, float* lp, float* sp,
                                         int64_t r0, int64_t r1) {
  using namespace convert_internal;
  const int64_t full = v - v % 16;
  for (int64_t row = r0; row < r1; ++row) {
    const S* xs = x + row * v;
    __m512 mx = _mm512_set1_ps(ElementAsFloat(xs, 0));
    for (int64_t i = 0; i < full; i += 16) mx = _mm512_max_ps(LoadFloatx16(xs + i), mx);
    float m = MaxLanesInOrder(mx);
    for (int64_t i = full; i < v; ++i) m = MaxStep(m, ElementAsFloat(xs, i));
    const __m512 vm = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < full; i += 16) {
      __m512 p, scale;
      ExpFastx16(_mm512_sub_ps(LoadFloatx16(xs + i), vm), p, scale);
      acc = _mm512_fmadd_ps(p, scale, acc);
    }
    float s = SumLanesInOrder(acc);
    for (int64_t i = full; i < v; ++i) {
      float p, scale;
      functors::ExpFastFactors(ElementAsFloat(xs, i) - m, p, scale);
      s = std::fma(p, scale, s);
    }
    CeRowResult(xs, t, row, ignore_index, m, s, lp, sp);
  }
}

// The forward's row function for v values a row of S.
template <typename S, typename I>
auto CeFwdRowsFor(int64_t v) -> void (*)(const S*, const I*, int64_t, int64_t, float*, float*, int64_t, int64_t) {
  switch (v) {
    case 64: return &CeFwdRowsInRegisters<S, 4, I>;
    case 128: return &CeFwdRowsInRegisters<S, 8, I>;
    case 256: return &CeFwdRowsInRegisters<S, 16, I>;
    default: return &CeFwdRowsAvx512<S, I>;
  }
}

// dlogits of the row's values [i, i + 16) (mask: the lanes that exist):
// exp(x - lse) * g, less g at the target's lane.
OCTET_TARGET_AVX512_BF16 OCTET_INLINE __m512 CeGradLanes(const uint16_t* xs, int64_t i, __mmask16 mask, __m512 vl,
                                                         __m512 vg, int64_t ti) {
  __m512 p, scale;
  ExpFastx16(_mm512_sub_ps(convert_internal::MaskLoadFloatx16(mask, xs + i), vl), p, scale);
  __m512 d = _mm512_mul_ps(_mm512_mul_ps(p, scale), vg);
  if (ti >= i && ti < i + 16) d = _mm512_mask_sub_ps(d, static_cast<__mmask16>(1u << (ti - i)), d, vg);
  return d;
}

// Rows [r0, r1) of the bf16 cross-entropy backward, dlogits = (softmax -
// onehot) * g, with CeBwdRange's arithmetic, each 32 values narrowed in
// registers (NOTE [cross-entropy rows in registers]).
template <typename I>
OCTET_TARGET_AVX512_BF16 void CeBwdRangeBf16Native(const bfloat16* x, const I* t, const float* sp, const float* gp,
                                                   int64_t gstride, double scale_d, int64_t v, int64_t ignore_index,
                                                   bfloat16* dp, int64_t r0, int64_t r1) {
  using namespace convert_internal;
  for (int64_t row = r0; row < r1; ++row) {
    const auto* xs = reinterpret_cast<const uint16_t*>(x + row * v);
    auto* out = reinterpret_cast<uint16_t*>(dp + row * v);
    const int64_t ti = static_cast<int64_t>(t[row]);
    if (ti == ignore_index) {
      std::fill(out, out + v, uint16_t{0});
      continue;
    }
    const float g = static_cast<float>(static_cast<double>(gp[row * gstride]) * scale_d);
    const __m512 vl = _mm512_set1_ps(sp[row]), vg = _mm512_set1_ps(g);
    int64_t i = 0;
    for (; i + 32 <= v; i += 32)
      _mm512_storeu_si512(out + i, FloatToBf16x32Native(CeGradLanes(xs, i, 0xFFFF, vl, vg, ti),
                                                        CeGradLanes(xs, i + 16, 0xFFFF, vl, vg, ti)));
    for (; i < v; i += 16) {
      const __mmask16 m = static_cast<__mmask16>(LowBits64(v - i));
      const __m512 d = _mm512_maskz_mov_ps(m, CeGradLanes(xs, i, m, vl, vg, ti));
      _mm256_mask_storeu_epi16(out + i, m, FloatToBf16x16Native(d));
    }
  }
}
#endif

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
#if OCTET_CONVERT_X86_KERNELS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>) {
    if (UseAvx512Kernels()) {  // NOTE [cross-entropy rows in registers]
      using S = std::conditional_t<std::is_same_v<T, float>, float, uint16_t>;
      const S* xs = reinterpret_cast<const S*>(x);
      const auto rows = CeFwdRowsFor<S, I>(v);
      ParallelFor(n, RowGrain(v), [&](int64_t r0, int64_t r1) { rows(xs, t, v, ignore_index, lp, sp, r0, r1); });
      return r;
    }
  }
#endif
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
#if OCTET_CONVERT_X86_KERNELS
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (CpuHasAvx512Bf16()) {  // NOTE [cross-entropy rows in registers]
      ParallelFor(n, RowGrain(v), [&](int64_t r0, int64_t r1) {
        CeBwdRangeBf16Native(x, t, sp, gp, gstride, scale, v, ignore_index, dp, r0, r1);
      });
      return;
    }
  }
#endif
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

OCTET_REGISTER_KERNEL(cross_entropy_fwd, DeviceType::kCPU, &CrossEntropyFwdCpu);
OCTET_REGISTER_KERNEL(cross_entropy_bwd, DeviceType::kCPU, &CrossEntropyBwdCpu);

}  // namespace octet::cpu
