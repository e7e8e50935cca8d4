// CPU kernels of the norm family. One template serves LayerNorm (kCenter =
// true) and RMSNorm (kCenter = false, mean fixed at 0). Rows are independent
// and split across OpenMP threads; each row is widened to the compute type
// once and stays in cache for the passes over it.
#include <cmath>
#include <type_traits>
#include <vector>

#include <octet/core/bf16_avx512_internal.h>
#include <octet/core/convert.h>
#include <octet/core/convert_internal.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/isa.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/norm_avx2_rows.h>
#include <octet/ops/cpu/norm_bf16_rows.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/norm_kernels.h>

namespace octet::cpu {
namespace {

// NOTE [deterministic parameter gradients]: dweight and dbias are sums over
// all N rows. The rows are cut into a fixed number of blocks (at most
// kParamBlocks, a function of N only, not of the thread count); each block
// accumulates its own (C) partial sums in the compute type, and the partials
// are then added in block order. No atomics, and the result is bitwise the
// same for any OMP_NUM_THREADS.
constexpr int64_t kParamBlocks = 32;

// The affine parameter in the compute type, or `fill` everywhere when absent.
template <typename T, typename A = AccType<T>>
std::vector<A> ParamOrFill(const Tensor& p, int64_t c, A fill) {
  std::vector<A> v(c, fill);
  if (p.defined()) {
    const T* src = p.data<T>();
    for (int64_t i = 0; i < c; ++i) v[i] = ConvertElement<A>(src[i]);
  }
  return v;
}

// The FP8 output of LayerNormFp8 (NOTE [layer norm to fp8] in ops/norm.cc):
// each row, computed in the compute type, is rounded to f32 once and
// quantized with QuantizeRow (the row converter of Quantize's CPU kernel).
struct Fp8RowOut {
  uint8_t* q = nullptr;       // (N,C) FP8 bytes
  float scale = 1.0f;
  DType dtype = DType::kFloat8E4M3;
  Fp8Saturation sat = Fp8Saturation::kSatFinite;
  float* row_amax = nullptr;  // (N): max |y| of each row
};

// NOTE [native bf16 norm output] and NOTE [short bf16 rows in registers]
// (ops/cpu/norm_bf16_rows.cc): on CPUs with AVX-512 BF16, bf16 rows are
// computed and narrowed in registers by the kernels of norm_bf16_rows.h,
// with the generic loops' arithmetic.

// What NormFwdRows reads and writes (NormFwd's arguments as pointers).
template <typename T, typename A = AccType<T>>
struct FwdArgs {
  int64_t c;
  const A* w;      // (C)
  const A* b;      // (C)
  const T* x;      // (N,C)
  const T* res;    // (N,C) or null
  T* sum;          // (N,C) or null (with res)
  T* y;            // (N,C), or null with fp8
  A* mean;         // (N), kCenter only
  A* rstd;         // (N)
  A eps, inv_c;
  const Fp8RowOut* fp8;
  bool native_bf16_out;  // NOTE [native bf16 norm output]
  bool avx2_rows;        // NOTE [bf16 dx rows narrowed in AVX2 registers]
};

// NOTE [paired row statistics]: the mean and the variance of a row are sums
// over 16 lanes, one chain of dependent vector adds (or FMAs) each; a row of
// a few hundred elements is bound by that chain's latency more than by its
// arithmetic, and bf16 rows, whose elements are also widened on the way, lose
// most. Rows read in place (f32, f64, bf16) are therefore taken two at a
// time, both rows' chains in one loop. The lanes are GCC vectors (Lanes in
// row_helpers.h; GCC 12 does not vectorise two lane-sum loops fused into
// one), and a lone row runs the same template with one row: every row is
// summed by the same operations in the same order (lane l takes elements l,
// l + 16, ...; the lanes are then added in order, then the tail; the
// variance's products are explicit FMAs), so a row's statistics do not
// depend on whether it was paired, nor on the thread count
// (Norm.RowsGiveTheSameBitsAloneAsInABatch). octet_norm_bench, 4096 x 768,
// two threads, Zen 5, five alternating runs, medians, f32 / bf16 in ms:
// LayerNorm forward 0.333 / 0.430 -> 0.310 / 0.349, LayerNormFp8 0.529 /
// 0.552 -> 0.460 / 0.459, AddLayerNorm bf16 0.635 -> 0.556; in the AVX2
// build (OCTET_DISABLE_AVX512=1) LayerNorm forward 0.364 / 0.561 -> 0.326 /
// 0.471. bf16 is still behind f32 in the plain forward: its output is
// rounded by a second pass (rounding it in the loop with FloatToBf16Bits's
// integer arithmetic was slower: 0.41 ms). On short rows that pass is most
// of the difference: at the default GPT's (2048, 128) the bf16 forward takes
// 1.26-1.51x f32's time (octet_norm_bench BM_LayerNormFwd, 2026-11-28), and
// with the narrowing and its store skipped (a timing hack, no output) it
// matched f32. Tried then, none faster at (2048, 128), (1024, 768) or
// (4096, 768): widening each row once into f32 scratch and running the f32
// statistics on it (1.03-1.18x slower than this), narrowing a pair of rows
// in one call, and rounding inside the output loop again. What did pay:
// narrowing in registers (NOTE [native bf16 norm output]).

// NOTE [unfused row statistics]: a row's mean and variance are its lane sum
// times 1/C, rounded; 1 / sqrt(var + eps) then adds eps to the rounded
// variance. Under -ffp-contract=fast GCC was free to fuse that multiply into
// the add (fma(s, 1/C, eps)), and it did so where the statistics of a lone
// row stay in registers (RowStats<1>, the last row of an odd range) but not
// for a pair, whose statistics go through a small array: a row's rstd could
// differ by an ulp between a batch and the same row alone. Seen first as 2
// bf16 outputs in ~800 k (RMSNorm, width 192) when the sixteen-row batches
// of norm_bf16_rows.cc were compared with the generic loop, then in
// Norm.RowsGiveTheSameBitsAloneAsInABatch at 19 rows (f32 and f64, width
// 777; at 7 rows the fused rows happened to round the same). Unfused
// (row_helpers.h) makes the rounded statistic opaque, so no build fuses it;
// the vector kernels use the rounding forms of the multiply and the add.

// The mean (kCenter; else 0) and variance of kRows rows of c elements, read
// in place (NOTE [paired row statistics]).
template <int kRows, bool kCenter, typename T, typename A>
OCTET_INLINE void RowStats(const T* const* rows, int64_t c, A inv_c, A* mu, A* var) {
  constexpr int kParts = Lanes<A>::kParts;
  const int64_t full = c - c % kRowLanes;
  for (int k = 0; k < kRows; ++k) mu[k] = 0;
  if constexpr (kCenter) {
    Lanes<A> acc[kRows] = {};
    for (int64_t i = 0; i < full; i += kRowLanes)
      for (int k = 0; k < kRows; ++k) {
        Lanes<A> x;
        LoadLanes<T, A>(rows[k] + i, x);
        for (int j = 0; j < kParts; ++j) acc[k].p[j] += x.p[j];
      }
    for (int k = 0; k < kRows; ++k) {
      A s = acc[k].Sum();
      for (int64_t i = full; i < c; ++i) s += ConvertElement<A>(rows[k][i]);
      mu[k] = Unfused(s * inv_c);  // NOTE [unfused row statistics]
    }
  }
  Lanes<A> acc[kRows] = {};
  for (int64_t i = 0; i < full; i += kRowLanes)
    for (int k = 0; k < kRows; ++k) {
      Lanes<A> x;
      LoadLanes<T, A>(rows[k] + i, x);
      for (int j = 0; j < kParts; ++j) {
        const typename Lanes<A>::Part d = x.p[j] - mu[k];
        acc[k].p[j] = FmaPart(d, d, acc[k].p[j]);
      }
    }
  for (int k = 0; k < kRows; ++k) {
    A s = acc[k].Sum();
    for (int64_t i = full; i < c; ++i) {
      const A d = ConvertElement<A>(rows[k][i]) - mu[k];
      s = std::fma(d, d, s);
    }
    var[k] = Unfused(s * inv_c);
  }
}

// Row r of x ready to normalise: x itself, or with a residual x + residual
// rounded to T (written to sum), so the result equals Add followed by
// LayerNorm. xbuf, rbuf, ybuf: (C) scratch.
template <typename T, typename A>
OCTET_INLINE const T* NormFwdInput(const FwdArgs<T, A>& a, int64_t r, A* xbuf, A* rbuf, A* ybuf) {
  const int64_t c = a.c;
  if (a.res == nullptr) return a.x + r * c;
  const RowIn<T> xin(a.x + r * c, c, xbuf), res(a.res + r * c, c, rbuf);
  A* h = RowOut(a.sum + r * c, ybuf);
  for (int64_t i = 0; i < c; ++i) h[i] = xin[i] + res[i];
  StoreRow(h, a.sum + r * c, c);
  return a.sum + r * c;
}

// Writes row r's output (y, or the FP8 codes and the row's amax) and its
// statistics from the row xr, its mean mu and variance var.
template <bool kCenter, typename T, typename A>
OCTET_INLINE void NormFwdOutput(const FwdArgs<T, A>& a, int64_t r, const RowIn<T>& xr, A mu, A var, A* ybuf,
                                float* fbuf) {
  const int64_t c = a.c;
  const A rs = A(1) / std::sqrt(var + a.eps);
  if constexpr (kCenter) a.mean[r] = mu;
  a.rstd[r] = rs;
#if OCTET_CONVERT_X86_KERNELS
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (a.native_bf16_out) {  // NOTE [native bf16 norm output]
      NormOutputRowBf16Native(xr.data(), mu, rs, a.w, a.b, a.y + r * c, c);
      return;
    }
  }
#endif
#if OCTET_NORM_AVX2_DX_ROWS
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (a.avx2_rows && a.fp8 == nullptr) {  // NOTE [bf16 dx rows narrowed in AVX2 registers]
      NormOutputRowBf16Avx2(xr.data(), mu, rs, a.w, a.b, a.y + r * c, c);
      return;
    }
  }
#endif
  A* yr = a.fp8 != nullptr ? ybuf : RowOut(a.y + r * c, ybuf);
  // The FMA is explicit (NOTE [native bf16 norm output]).
  for (int64_t i = 0; i < c; ++i) yr[i] = std::fma((xr[i] - mu) * rs, a.w[i], a.b[i]);
  if (a.fp8 != nullptr) {
    const float* yf = nullptr;
    if constexpr (std::is_same_v<A, float>) {
      yf = yr;
    } else {  // f64 x: the value is rounded to f32 before the multiply, as Quantize does
      for (int64_t i = 0; i < c; ++i) fbuf[i] = static_cast<float>(yr[i]);
      yf = fbuf;
    }
    a.fp8->row_amax[r] = QuantizeRow(yf, a.fp8->scale, a.fp8->dtype, a.fp8->sat, a.fp8->q + r * c, c);
  } else {
    StoreRow(yr, a.y + r * c, c);
  }
}

// Rows [r0, r1) of NormFwd; xbuf, rbuf, ybuf: (C) scratch, fbuf (C) with fp8
// when A is not float.
template <bool kCenter, typename T, typename A>
OCTET_INLINE void NormFwdRows(const FwdArgs<T, A>& a, int64_t r0, int64_t r1, A* xbuf, A* rbuf, A* ybuf,
                              float* fbuf) {
  const int64_t c = a.c;
  int64_t r = r0;
  if constexpr (RowIn<T>::kInPlace) {  // NOTE [paired row statistics]
    for (; r + 2 <= r1; r += 2) {
      const T* rows[2] = {NormFwdInput(a, r, xbuf, rbuf, ybuf), NormFwdInput(a, r + 1, xbuf, rbuf, ybuf)};
      A mu[2], var[2];
      RowStats<2, kCenter>(rows, c, a.inv_c, mu, var);
      for (int k = 0; k < 2; ++k)
        NormFwdOutput<kCenter>(a, r + k, RowIn<T>(rows[k], c, nullptr), mu[k], var[k], ybuf, fbuf);
    }
    if (r < r1) {
      const T* rows[1] = {NormFwdInput(a, r, xbuf, rbuf, ybuf)};
      A mu[1], var[1];
      RowStats<1, kCenter>(rows, c, a.inv_c, mu, var);
      NormFwdOutput<kCenter>(a, r, RowIn<T>(rows[0], c, nullptr), mu[0], var[0], ybuf, fbuf);
    }
  } else {
    for (; r < r1; ++r) {
      const RowIn<T> xr(NormFwdInput(a, r, xbuf, rbuf, ybuf), c, xbuf);
      A mu = 0;
      if constexpr (kCenter) mu = Unfused(LaneSum<A>(c, [&](int64_t i) { return xr[i]; }) * a.inv_c);
      const A var = Unfused(LaneSum<A>(c, [&](int64_t i) { return (xr[i] - mu) * (xr[i] - mu); }) * a.inv_c);
      NormFwdOutput<kCenter>(a, r, xr, mu, var, ybuf, fbuf);
    }
  }
}

// NOTE [norm isa dispatch]: as NOTE [pointwise isa dispatch] in
// ops/cpu/pointwise_cpu.cc, the row loops are compiled for the baseline and
// for AVX-512, chosen at run time. The lane sums keep kRowLanes explicit
// accumulators, so both builds add in the same order. The forward's
// variance fuses its products explicitly (FmaPart, NOTE [paired row
// statistics]); the backward's (g * xhat) are left to -ffp-contract=fast,
// which may fuse them in one build and not the other (it did so in a softmax
// backward: LaneDot in row_helpers.h); today both builds agree, and
// Norm.IsaBuildsGiveIdenticalBits is what holds them to it.

// y (or, with fp8 non-null, fp8->q) = the normalised rows of x.
template <bool kCenter, typename T>
void NormFwd(const Tensor& x,         // (N,C)
             const Tensor& residual,  // (N,C) or undefined
             const Tensor& weight,    // (C) or undefined
             const Tensor& bias,      // (C) or undefined
             double eps,
             const Tensor& sum,   // (N,C) or undefined (with residual)
             const Tensor& y,     // (N,C), or undefined with fp8
             const Tensor& mean,  // (N), kCenter only
             const Tensor& rstd,  // (N)
             const Fp8RowOut* fp8 = nullptr) {
  using A = AccType<T>;
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const std::vector<A> w = ParamOrFill<T>(weight, c, A(1));
  const std::vector<A> b = ParamOrFill<T>(bias, c, A(0));
  // NOTE [bf16 dx rows narrowed in AVX2 registers]: the output rows where
  // the AVX2 converters run (measured there), the dx rows wherever AVX2 is.
  const octet::internal::ConverterIsa isa = octet::internal::ActiveConverterIsa();
  const FwdArgs<T, A> args{.c = c,
                           .w = w.data(),
                           .b = b.data(),
                           .x = x.data<T>(),
                           .res = residual.defined() ? residual.data<T>() : nullptr,
                           .sum = sum.defined() ? sum.data<T>() : nullptr,
                           .y = fp8 == nullptr ? y.data<T>() : nullptr,
                           .mean = kCenter ? mean.data<A>() : nullptr,
                           .rstd = rstd.data<A>(),
                           .eps = static_cast<A>(eps),
                           .inv_c = A(1) / static_cast<A>(c),
                           .fp8 = fp8,
                           .native_bf16_out = std::is_same_v<T, bfloat16> && fp8 == nullptr && CpuHasAvx512Bf16(),
                           .avx2_rows = isa.avx2 && !isa.avx512};
#if OCTET_CONVERT_X86_KERNELS
  // NOTE [short bf16 rows in registers], NOTE [row statistics sixteen rows
  // at a time] (norm_bf16_rows.cc): short bf16 and f32 rows without a
  // residual or an FP8 output.
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float>) {
    const ShortNormFwdRowsFn<T> short_rows = fp8 == nullptr && args.res == nullptr && CpuHasAvx512Bf16() &&
                                                     UseAvx512Kernels()
                                                 ? ShortNormFwdRowsFor<T>(kCenter, c)
                                                 : nullptr;
    if (short_rows != nullptr) {
      const ShortNormFwdRows<T> rows{.c = c,
                                     .w = args.w,
                                     .b = args.b,
                                     .x = args.x,
                                     .y = args.y,
                                     .mean = args.mean,
                                     .rstd = args.rstd,
                                     .eps = args.eps,
                                     .inv_c = args.inv_c};
      ParallelFor(n, RowGrain(c), [&](int64_t r0, int64_t r1) { short_rows(rows, r0, r1); });
      return;
    }
  }
#endif
  const auto run = IsaBuild<&NormFwdRows<kCenter, T, A>>();  // NOTE [norm isa dispatch]
  ParallelFor(n, RowGrain(c), [&](int64_t r0, int64_t r1) {
    std::vector<A> xbuf(c), rbuf(c), ybuf(c);
    std::vector<float> fbuf(fp8 != nullptr && !std::is_same_v<A, float> ? c : 0);
    run(args, r0, r1, xbuf.data(), rbuf.data(), ybuf.data(), fbuf.data());
  });
}

// What NormBwdRows reads and writes (NormBwd's arguments as pointers).
template <typename T, typename A = AccType<T>>
struct BwdArgs {
  int64_t c;
  const A* w;     // (C)
  const T* x;     // (N,C)
  const T* dy;    // (N,C)
  const T* dsum;  // (N,C) or null: added to dx
  T* dx;          // (N,C) or null
  const A* mean;  // (N), kCenter only
  const A* rstd;  // (N)
  A inv_c;
  bool native_bf16_dx;  // NOTE [native bf16 norm output]
  bool avx2_rows;       // NOTE [bf16 dx rows narrowed in AVX2 registers]
};

// NOTE [explicit fused sums]: the backward's sum of g * xhat and its dweight
// terms dy * xhat were left to -ffp-contract=fast, which fuses each product
// into the sum it feeds at -O2 but not in the -O1 sanitizer build; the
// native bf16 rows (norm_bf16_rows.cc) fuse them explicitly, so the two
// agreed at -O2 only. Both are now written out: g * xhat through FmaPart on
// RowStats' lanes (lane l takes elements l, l + 16, ...; the lanes are added
// in order, then the tail, its products fused with std::fma), dy * xhat
// with std::fma. The same bits as before at -O2 (where GCC had fused exactly
// these), and now in every build. g itself (dy * w) is rounded before it is
// added: it has a second use, so GCC never fused it.

// {sum of g, sum of g * xhat} over a row, g = dy * w, xhat = (x - mu) * rs.
// x, dy: the row in place; xr, dyr: the same row as NormBwdRows reads it
// (for types not read in place: NOTE [paired row statistics]).
template <typename T, typename A>
OCTET_INLINE std::pair<A, A> GradSums(const T* x, const T* dy, const RowIn<T>& xr, const RowIn<T>& dyr, const A* w,
                                      int64_t c, A mu, A rs) {
  int64_t i = 0;
  A sum_g = 0, sum_gx = 0;
  if constexpr (RowIn<T>::kInPlace) {
    constexpr int kParts = Lanes<A>::kParts;
    Lanes<A> sg{}, sgx{};
    for (; i + kRowLanes <= c; i += kRowLanes) {
      Lanes<A> xv, dyv, wv;
      LoadLanes<T, A>(x + i, xv);
      LoadLanes<T, A>(dy + i, dyv);
      LoadLanes<A, A>(w + i, wv);
      for (int j = 0; j < kParts; ++j) {
        const typename Lanes<A>::Part g = dyv.p[j] * wv.p[j];
        sg.p[j] += g;
        sgx.p[j] = FmaPart(g, (xv.p[j] - mu) * rs, sgx.p[j]);
      }
    }
    sum_g = sg.Sum();
    sum_gx = sgx.Sum();
  } else {
    (void)x;
    (void)dy;
    A acc_g[kRowLanes] = {}, acc_gx[kRowLanes] = {};
    for (; i + kRowLanes <= c; i += kRowLanes)
      for (int l = 0; l < kRowLanes; ++l) {
        const A g = dyr[i + l] * w[i + l];
        acc_g[l] += g;
        acc_gx[l] = std::fma(g, (xr[i + l] - mu) * rs, acc_gx[l]);
      }
    for (int l = 0; l < kRowLanes; ++l) {
      sum_g += acc_g[l];
      sum_gx += acc_gx[l];
    }
  }
  for (; i < c; ++i) {
    const A g = dyr[i] * w[i];
    sum_g += g;
    sum_gx = std::fma(g, (xr[i] - mu) * rs, sum_gx);
  }
  return {sum_g, sum_gx};
}

// Rows [r0, r1): dx rows, and dy*xhat / dy added into dw_acc / db_acc (C)
// when those are non-null. xbuf, dybuf, dxbuf, dsbuf: (C) scratch (dsbuf only
// with dsum).
template <bool kCenter, typename T, typename A>
OCTET_INLINE void NormBwdRows(const BwdArgs<T, A>& a, int64_t r0, int64_t r1, A* dw_acc, A* db_acc, A* xbuf,
                              A* dybuf, A* dxbuf, A* dsbuf) {
  const int64_t c = a.c;
  for (int64_t r = r0; r < r1; ++r) {
    const RowIn<T> xr(a.x + r * c, c, xbuf), dyr(a.dy + r * c, c, dybuf);
    const A mu = kCenter ? a.mean[r] : A(0);
    const A rs = a.rstd[r];
    if (a.dx != nullptr) {
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w
      // (RMSNorm: no mean(g) term).
      const auto [sum_g, sum_gx] = GradSums<T>(a.x + r * c, a.dy + r * c, xr, dyr, a.w, c, mu, rs);
      const A mean_g = kCenter ? sum_g * a.inv_c : A(0), mean_gx = sum_gx * a.inv_c;
      bool written = false;  // dx row written by a vector kernel
#if OCTET_CONVERT_X86_KERNELS
      if constexpr (kCenter && std::is_same_v<T, bfloat16>) {
        written = a.native_bf16_dx && a.dsum == nullptr;  // NOTE [native bf16 norm output]
        if (written) LayerNormDxRowBf16Native(a.x + r * c, a.dy + r * c, a.w, mu, rs, mean_g, mean_gx, a.dx + r * c, c);
      }
#endif
#if OCTET_NORM_AVX2_DX_ROWS
      if constexpr (std::is_same_v<T, bfloat16>) {
        if (!written && a.avx2_rows) {  // NOTE [bf16 dx rows narrowed in AVX2 registers]
          NormDxRowBf16Avx2(a.x + r * c, a.dy + r * c, a.dsum != nullptr ? a.dsum + r * c : nullptr, a.w, mu, rs,
                            mean_g, mean_gx, a.dx + r * c, c);
          written = true;
        }
      }
#endif
      if (!written) {
        A* dxr = RowOut(a.dx + r * c, dxbuf);
        // rs * (dy * w - mean_g - xhat * mean_gx) (+ dsum), its FMAs
        // explicit (NOTE [native bf16 norm output]); with a dsum, the product
        // by rs fused into the add (NOTE [fused dsum]).
        auto inner = [&](int64_t i) {
          return std::fma(-((xr[i] - mu) * rs), mean_gx, std::fma(dyr[i], a.w[i], -mean_g));
        };
        if (a.dsum != nullptr) {
          const RowIn<T> ds(a.dsum + r * c, c, dsbuf);
          for (int64_t i = 0; i < c; ++i) dxr[i] = std::fma(rs, inner(i), ds[i]);
        } else {
          for (int64_t i = 0; i < c; ++i) dxr[i] = rs * inner(i);
        }
        StoreRow(dxr, a.dx + r * c, c);
      }
    }
    // dy * xhat fused into its sum (NOTE [explicit fused sums]).
    if (dw_acc != nullptr && db_acc != nullptr) {
      for (int64_t i = 0; i < c; ++i) {
        dw_acc[i] = std::fma(dyr[i], (xr[i] - mu) * rs, dw_acc[i]);
        db_acc[i] += dyr[i];
      }
    } else if (dw_acc != nullptr) {
      for (int64_t i = 0; i < c; ++i) dw_acc[i] = std::fma(dyr[i], (xr[i] - mu) * rs, dw_acc[i]);
    } else if (db_acc != nullptr) {
      for (int64_t i = 0; i < c; ++i) db_acc[i] += dyr[i];
    }
  }
}

template <bool kCenter, typename T>
void NormBwd(const Tensor& dy,      // (N,C)
             const Tensor& x,       // (N,C)
             const Tensor& weight,  // (C) or undefined
             const Tensor& mean,    // (N), kCenter only
             const Tensor& rstd,    // (N)
             const Tensor& dsum,    // (N,C) or undefined: added to dx
             const Tensor& dx,       // (N,C) or undefined
             const Tensor& dweight,  // (C) or undefined
             const Tensor& dbias) {  // (C) or undefined; kCenter only
  using A = AccType<T>;
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const std::vector<A> w = ParamOrFill<T>(weight, c, A(1));
  const T* dsp = dsum.defined() ? dsum.data<T>() : nullptr;
  const bool want_dw = dweight.defined(), want_db = dbias.defined();
  const BwdArgs<T, A> args{.c = c,
                           .w = w.data(),
                           .x = x.data<T>(),
                           .dy = dy.data<T>(),
                           .dsum = dsp,
                           .dx = dx.defined() ? dx.data<T>() : nullptr,
                           .mean = kCenter ? mean.data<A>() : nullptr,
                           .rstd = rstd.data<A>(),
                           .inv_c = A(1) / static_cast<A>(c),
                           .native_bf16_dx = std::is_same_v<T, bfloat16> && CpuHasAvx512Bf16(),
                           .avx2_rows = octet::internal::ActiveConverterIsa().avx2};
  const auto generic_rows = IsaBuild<&NormBwdRows<kCenter, T, A>>();  // NOTE [norm isa dispatch]
  // LayerNorm's short bf16 rows without dsum (NOTE [short bf16 rows in
  // registers]): no scratch rows.
  void (*short_rows)(const Bf16NormBwdRows&, int64_t, int64_t, float*, float*) = nullptr;
  Bf16NormBwdRows short_args;
#if OCTET_CONVERT_X86_KERNELS
  if constexpr (kCenter && std::is_same_v<T, bfloat16>) {
    if (args.native_bf16_dx && dsp == nullptr) short_rows = ShortBf16LayerNormBwdRowsFor(c);
    short_args = {.c = c,
                  .w = args.w,
                  .x = args.x,
                  .dy = args.dy,
                  .dx = args.dx,
                  .mean = args.mean,
                  .rstd = args.rstd,
                  .inv_c = args.inv_c};
  }
#endif
  const auto rows = [&](const BwdArgs<T, A>& a, int64_t r0, int64_t r1, A* dw, A* db, A* xb, A* dyb, A* dxb,
                        A* dsb) {
    if constexpr (std::is_same_v<A, float>) {
      if (short_rows != nullptr) return short_rows(short_args, r0, r1, dw, db);
    }
    generic_rows(a, r0, r1, dw, db, xb, dyb, dxb, dsb);
  };

  const bool parallel = n * c >= kParallelGrain;
  if (!want_dw && !want_db) {
    ParallelFor(n, RowGrain(c), [&](int64_t r0, int64_t r1) {
      std::vector<A> xbuf(c), dybuf(c), dxbuf(c), dsbuf(dsp != nullptr ? c : 0);
      rows(args, r0, r1, nullptr, nullptr, xbuf.data(), dybuf.data(), dxbuf.data(), dsbuf.data());
    });
    return;
  }
  // See NOTE [deterministic parameter gradients].
  const int64_t nblocks = std::min(n, kParamBlocks);
  std::vector<A> dw_part(want_dw ? nblocks * c : 0, A(0)), db_part(want_db ? nblocks * c : 0, A(0));
  ParallelFor(nblocks, parallel ? 1 : nblocks + 1, [&](int64_t b0, int64_t b1) {
    std::vector<A> xbuf(c), dybuf(c), dxbuf(c), dsbuf(dsp != nullptr ? c : 0);
    for (int64_t blk = b0; blk < b1; ++blk) {
      rows(args, n * blk / nblocks, n * (blk + 1) / nblocks, want_dw ? dw_part.data() + blk * c : nullptr,
           want_db ? db_part.data() + blk * c : nullptr, xbuf.data(), dybuf.data(), dxbuf.data(), dsbuf.data());
    }
  });
  auto reduce_parts = [&](const std::vector<A>& part, const Tensor& out) {
    T* o = out.data<T>();
    ParallelFor(c, parallel ? 1024 : c + 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        A s = 0;
        for (int64_t blk = 0; blk < nblocks; ++blk) s += part[blk * c + i];
        o[i] = ConvertElement<T>(s);
      }
    });
  };
  if (want_dw) reduce_parts(dw_part, dweight);
  if (want_db) reduce_parts(db_part, dbias);
}

void LayerNormFwdCpu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                     const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  DispatchFloat(x.dtype(), residual.defined() ? "add_layer_norm" : "layer_norm", [&]<typename T>() {
    NormFwd<true, T>(x, residual, weight, bias, eps, sum, y, mean, rstd);
  });
}

void LayerNormFp8FwdCpu(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& scale,
                        Fp8Saturation sat, const Tensor& q, const Tensor& scale_inv, const Tensor& amax,
                        const Tensor& mean, const Tensor& rstd) {
  const int64_t n = x.shape()[0];
  std::vector<float> row_amax(n, 0.0f);
  Fp8RowOut out{.q = static_cast<uint8_t*>(q.raw_data()),
                .scale = *scale.data<float>(),
                .dtype = q.dtype(),
                .sat = sat,
                .row_amax = row_amax.data()};
  DispatchFloat(x.dtype(), "layer_norm_fp8", [&]<typename T>() {
    NormFwd<true, T>(x, Tensor(), weight, bias, eps, Tensor(), Tensor(), mean, rstd, &out);
  });
  *amax.data<float>() = CombineAmax(row_amax);
  *scale_inv.data<float>() = 1.0f / out.scale;
}

void LayerNormBwdCpu(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                     const Tensor& rstd, const Tensor& dsum, const Tensor& dx, const Tensor& dweight,
                     const Tensor& dbias) {
  DispatchFloat(x.dtype(), "layer_norm backward", [&]<typename T>() {
    NormBwd<true, T>(dy, x, weight, mean, rstd, dsum, dx, dweight, dbias);
  });
}

void RmsNormFwdCpu(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  DispatchFloat(x.dtype(), "rms_norm", [&]<typename T>() {
    NormFwd<false, T>(x, Tensor(), weight, Tensor(), eps, Tensor(), y, Tensor(), rstd);
  });
}

void RmsNormBwdCpu(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                   const Tensor& dweight) {
  DispatchFloat(x.dtype(), "rms_norm backward", [&]<typename T>() {
    NormBwd<false, T>(dy, x, weight, Tensor(), rstd, Tensor(), dx, dweight, Tensor());
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(layer_norm_fwd, DeviceType::kCPU, &LayerNormFwdCpu);
OCTET_REGISTER_KERNEL(layer_norm_bwd, DeviceType::kCPU, &LayerNormBwdCpu);
OCTET_REGISTER_KERNEL(layer_norm_fp8_fwd, DeviceType::kCPU, &LayerNormFp8FwdCpu);
OCTET_REGISTER_KERNEL(rms_norm_fwd, DeviceType::kCPU, &RmsNormFwdCpu);
OCTET_REGISTER_KERNEL(rms_norm_bwd, DeviceType::kCPU, &RmsNormBwdCpu);

}  // namespace octet::cpu
