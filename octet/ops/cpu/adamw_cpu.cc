// CPU kernel of the fused AdamW update (NOTE [adamw update] in
// ops/optim_kernels.h): one OpenMP loop over all tensors (NOTE [adamw one
// region]) reading the gradient,
// the state in its storage dtype and the (master) weight, writing them back.
//
// Float compute (f32/bf16/f16 parameters) runs over chunks of elements (NOTE
// [adamw chunk length]): the narrow operands are widened into per-thread f32 buffers with
// the row converters of core/convert.h (vectorised, AVX-512 when present),
// the update runs as a plain f32 loop the compiler vectorises (built for the
// baseline and for AVX-512: NOTE [adamw chunk isa]), and the results are
// narrowed back the same way. The converters are bit-identical to
// the scalar conversions, so the result equals the element-by-element
// formula. f64 parameters use a scalar loop in f64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>
#include <octet/core/scaling_math.h>
#include <octet/ops/cpu/isa.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/adamw_dispatch_internal.h>
#include <octet/ops/optim_kernels.h>

namespace octet::cpu {
namespace {

// Elements per block of the scaled-state amax pass. Fixed (not per thread) so
// the work split does not depend on the thread count.
constexpr int64_t kBlock = 16384;
// Elements per chunk of the f32 update (at most four f32 buffers: 16 KiB of
// stack). NOTE [adamw chunk length]: where anything is widened or narrowed
// (a bf16, f16 or FP8 state, a bf16 parameter or gradient), chunks of 256:
// each conversion pass over a chunk waits on memory with no arithmetic to
// overlap, and shorter chunks let the out-of-order core overlap it with the
// neighbouring chunk's update loop, which waits on its divider
// (octet_optim_bench, wide model, Zen 5, 2026-11-28, 1024 -> 256, six
// alternating rounds on a noisy VM: bf16 state 4.02-6.14 -> 3.27-4.81 ms,
// FP8/FP16 state 6.89-10.8 -> 6.23-9.30; 128 was slower than 256 in three
// rounds of three). An all-f32 update converts nothing (its operands are
// read in place), so it keeps 1024. (It measured 1-9 % slower with 256, but
// also 1-7 % slower than before with 1024 in the final build, whose f32
// functions are unchanged: those rounds do not settle the f32 case.)
constexpr int64_t kChunk = 1024;
constexpr int64_t kNarrowChunk = 256;

// The chunk length of an update whose operands are P, G, M, V.
template <typename P, typename G, typename M, typename V, bool kMaster>
constexpr int64_t ChunkFor() {
  constexpr bool kAllF32 = std::is_same_v<P, float> && std::is_same_v<G, float> && std::is_same_v<M, float> &&
                           std::is_same_v<V, float> && !kMaster;
  return kAllF32 ? kChunk : kNarrowChunk;
}

template <typename C>
OCTET_INLINE C MaxNan(C acc, C x) {
  return (x > acc || x != x) ? x : acc;  // NaN wins so the scale update can reject it
}

// Hyper-parameters in the compute type.
template <typename C>
struct Coeffs {
  C b1, omb1, b2, omb2, lr, eps, wd, bc1, bc2;
  Coeffs(const AdamWHyper& h, double weight_decay)
      : b1(static_cast<C>(h.beta1)),
        omb1(static_cast<C>(1.0 - h.beta1)),
        b2(static_cast<C>(h.beta2)),
        omb2(static_cast<C>(1.0 - h.beta2)),
        lr(static_cast<C>(h.lr)),
        eps(static_cast<C>(h.eps)),
        wd(static_cast<C>(weight_decay)),
        bc1(static_cast<C>(h.bias_correction1)),
        bc2(static_cast<C>(h.bias_correction2)) {}
};

// After the amax pass: new scales from the amax of the new (unscaled) m and
// v. When the amax says nothing (0 or not finite) scale and scale_inv stay as
// they are, so a restored state reproduces them. Returns (m_scale, v_scale).
std::pair<float, float> UpdateScales(const AdamWHyper& h, const AdamWTensorArgs& a, float am, float av) {
  float* ms = a.m_scale.data<float>();
  float* msi = a.m_scale_inv.data<float>();
  float* vs = a.v_scale.data<float>();
  float* vsi = a.v_scale_inv.data<float>();
  const float new_ms = ComputeScale(am, float8_e4m3::kMaxFinite, h.m_margin, ms[0], false);
  if (new_ms != ms[0]) {
    ms[0] = new_ms;
    msi[0] = 1.0f / new_ms;
  }
  const float new_vs = ComputeScale(av, float16::kMaxFinite, h.v_margin, vs[0], false);
  if (new_vs != vs[0]) {
    vs[0] = new_vs;
    vsi[0] = 1.0f / new_vs;
  }
  a.m_amax.data<float>()[0] = am;
  a.v_amax.data<float>()[0] = av;
  return {ms[0], vs[0]};
}

// ---- f32 compute, chunked --------------------------------------------------------

// Widens n elements of src into f32: returns src itself when it is f32
// (no copy), else converts into buf. fp8 codes are multiplied by scale_inv.
template <typename T>
OCTET_INLINE float* Widen(T* src, float* buf, int64_t n, float scale_inv = 1.0f) {
  if constexpr (std::is_same_v<std::remove_const_t<T>, float>) {
    return const_cast<float*>(src);
  } else if constexpr (std::is_same_v<std::remove_const_t<T>, bfloat16>) {
    Bf16ToFloatRow(reinterpret_cast<const uint16_t*>(src), buf, n);
  } else if constexpr (std::is_same_v<std::remove_const_t<T>, float16>) {
    F16ToFloatRow(reinterpret_cast<const uint16_t*>(src), buf, n);
  } else {
    static_assert(std::is_same_v<std::remove_const_t<T>, float8_e4m3>);
    DequantizeRow(reinterpret_cast<const uint8_t*>(src), DType::kFloat8E4M3, scale_inv, buf, n);
  }
  return buf;
}

// Narrows n f32 values back into dst (nothing to do when dst is f32: the
// values were computed in place). fp8: dst = fp8(src * scale), saturating.
template <typename T>
OCTET_INLINE void Narrow(const float* src, T* dst, int64_t n, float scale = 1.0f) {
  if constexpr (std::is_same_v<T, float>) {
    if (src != dst) std::memcpy(dst, src, n * sizeof(float));
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    FloatToBf16Row(src, reinterpret_cast<uint16_t*>(dst), n);
  } else if constexpr (std::is_same_v<T, float16>) {
    FloatToF16Row(src, reinterpret_cast<uint16_t*>(dst), n);
  } else {
    static_assert(std::is_same_v<T, float8_e4m3>);
    QuantizeRow(src, scale, DType::kFloat8E4M3, Fp8Saturation::kSatFinite, reinterpret_cast<uint8_t*>(dst), n);
  }
}

// ---- the per-chunk arithmetic, compiled per ISA ------------------------------------
// NOTE [adamw chunk isa]: the two chunk loops below hold all of the f32
// update's arithmetic. The library's baseline (OCTET_CPU_ARCH, AVX2 here)
// vectorises them 8 wide; where the converters use AVX-512 they are also
// compiled for it (16 wide), chosen per call like NOTE [attention isa
// dispatch]. Both builds do the same IEEE operations in the same order
// (no contraction: -ffp-contract=off), so their results are bit-identical;
// the narrow state formats are compute-bound here, the f32 one memory-bound
// (octet_optim_bench).

// Lanes of the amax pass: independent maxima the compiler keeps in one
// vector register (a scalar running max with NaN handling does not vectorise).
constexpr int kLanes = 16;

// The amax of the new m and v of one chunk (the update's first two lines),
// folded into *am_io and *av_io with MaxNan. A NaN anywhere makes the result
// NaN (the scale update then keeps the old scale).
OCTET_INLINE void AmaxChunkBody(const Coeffs<float>& k, const float* __restrict g, const float* __restrict mo,
                                const float* __restrict vo, int64_t len, float v_scale_inv, float* am_io,
                                float* av_io) {
  const float b1 = k.b1, omb1 = k.omb1, b2 = k.b2, omb2 = k.omb2;
  float am[kLanes] = {}, av[kLanes] = {};
  int nan[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float mi = b1 * mo[i + j] + omb1 * g[i + j];
      const float vi = b2 * (vo[i + j] * v_scale_inv) + omb2 * (g[i + j] * g[i + j]);
      const float a = std::abs(mi);
      am[j] = a > am[j] ? a : am[j];
      av[j] = vi > av[j] ? vi : av[j];
      nan[j] |= static_cast<int>(mi != mi) | static_cast<int>(vi != vi);
    }
  }
  float m_max = *am_io, v_max = *av_io;
  for (int j = 0; j < kLanes; ++j) {
    m_max = MaxNan(m_max, nan[j] ? std::numeric_limits<float>::quiet_NaN() : am[j]);
    v_max = MaxNan(v_max, nan[j] ? std::numeric_limits<float>::quiet_NaN() : av[j]);
  }
  for (; i < len; ++i) {
    const float mi = b1 * mo[i] + omb1 * g[i];
    const float vi = b2 * (vo[i] * v_scale_inv) + omb2 * (g[i] * g[i]);
    m_max = MaxNan(m_max, std::abs(mi));
    v_max = MaxNan(v_max, vi);
  }
  *am_io = m_max;
  *av_io = v_max;
}

// The update of one chunk, in place in mm, vv, pp (distinct buffers, so the
// restrict qualifiers hold). Coefficients are copied to locals: the compiler
// could not otherwise prove the float stores leave them unchanged.
OCTET_INLINE void UpdateChunkBody(const Coeffs<float>& k, const float* __restrict g, float* __restrict mm,
                                  float* __restrict vv, float* __restrict pp, int64_t len, float v_scale_inv,
                                  float m_mul, float v_scale) {
  const float b1 = k.b1, omb1 = k.omb1, b2 = k.b2, omb2 = k.omb2, lr = k.lr, eps = k.eps, wd = k.wd, bc1 = k.bc1,
              bc2 = k.bc2;
  for (int64_t i = 0; i < len; ++i) {
    const float mi = b1 * mm[i] + omb1 * g[i];
    const float vi = b2 * (vv[i] * v_scale_inv) + omb2 * (g[i] * g[i]);
    const float mhat = mi / bc1, vhat = vi / bc2;
    const float p = pp[i];
    pp[i] = p - lr * (mhat / (std::sqrt(vhat) + eps) + wd * p);
    mm[i] = mi * m_mul;
    vv[i] = vi * v_scale;
  }
}

// A parameter's amax (AdamWTensorArgs::param_amax), folded in by the update
// jobs that share the tensor. The maximum does not depend on the order.
struct ParamAmax {
  std::mutex mu;
  float* out = nullptr;
  void Fold(float part) {
    std::lock_guard<std::mutex> lock(mu);
    *out = MaxNaN(*out, part);
  }
};

// NOTE [adamw one region]: the optimizer step runs every f32-compute tensor
// in one OpenMP region over their concatenated elements (and, with scaled
// state, every tensor's amax blocks in one region before it), not a region
// per tensor: a GPT step updates tens of tensors, and each region costs its
// fork and join (on the VMs issue 12 is measured on, ~10 us a wake-up with
// OMP_WAIT_POLICY=passive; perf counted 18 AdamW regions in a small GPT
// step). Every element is still updated by the same chunk loop, whose
// results do not depend on where a chunk starts (-ffp-contract=off, element
// by element), so the bits are those of the per-tensor loops.

// An optimizer step's f32-compute work: the scaled-state amax blocks, then
// (tensor by tensor, serially) the new scales, then the updates.
struct StepPlan {
  std::vector<RangeJob> amax;
  std::vector<std::function<void()>> scales;
  std::vector<RangeJob> update;
};

template <typename P, typename G, typename M, typename V, bool kMaster>
void PlanTensorF32(const AdamWHyper& h, const AdamWTensorArgs& a, StepPlan* plan) {
  constexpr bool kScaled = std::is_same_v<M, float8_e4m3>;
  static_assert(!kScaled || std::is_same_v<V, float16>, "scaled state is fp8_e4m3 m + float16 v");
  // What the jobs share; they run after this function returns.
  struct Tensors {
    int64_t n;
    P* param;
    const G* grad;
    float* master;
    M* m;
    V* v;
    Coeffs<float> k;
    // fp8 m is dequantized by DequantizeRow itself; a scaled f16 v in the loop.
    float m_scale_inv, v_scale_inv;
    float m_scale = 1.0f, v_scale = 1.0f;  // scaled state: set between the amax and update regions
    std::vector<float> m_amax = {}, v_amax = {};  // per kBlock block
  };
  auto t = std::make_shared<Tensors>(Tensors{
      .n = a.param.numel(),
      .param = a.param.data<P>(),
      .grad = a.grad.data<G>(),
      .master = kMaster ? a.master.data<float>() : nullptr,
      .m = a.m.data<M>(),
      .v = a.v.data<V>(),
      .k = Coeffs<float>(h, a.weight_decay),
      .m_scale_inv = kScaled ? a.m_scale_inv.data<float>()[0] : 1.0f,
      .v_scale_inv = kScaled ? a.v_scale_inv.data<float>()[0] : 1.0f,
  });
  // NOTE [amax notes]: the new parameter's amax, where the optimizer asks.
  // It is taken from the f32 values in place, so only where they are the
  // parameter itself (float32, no master copy).
  constexpr bool kParamInPlace = std::is_same_v<P, float> && !kMaster;
  OCTET_CHECK(!a.param_amax.defined() || kParamInPlace,
              "adamw: the parameter amax is taken only for float32 parameters without a master copy, not for ",
              Describe(a.param), kMaster ? " with a master copy" : "");
  std::shared_ptr<ParamAmax> param_amax;
  if (a.param_amax.defined()) {
    param_amax = std::make_shared<ParamAmax>();
    param_amax->out = a.param_amax.data<float>();
    *param_amax->out = 0.0f;  // the jobs fold into it
  }
  // The builds this CPU runs (ops/cpu/isa.h).
  const auto amax_chunk = IsaBuild<&AmaxChunkBody>();
  const auto update_chunk = IsaBuild<&UpdateChunkBody>();

  if constexpr (kScaled) {
    const int64_t nblocks = (t->n + kBlock - 1) / kBlock;
    t->m_amax.assign(nblocks, 0.0f);
    t->v_amax.assign(nblocks, 0.0f);
    plan->amax.push_back({nblocks, [t, amax_chunk](int64_t b_begin, int64_t b_end) {
                            constexpr int64_t kLen = ChunkFor<P, G, M, V, kMaster>();
                            float gbuf[kLen], mbuf[kLen], vbuf[kLen];
                            for (int64_t b = b_begin; b < b_end; ++b) {
                              float am = 0.0f, av = 0.0f;
                              for (int64_t c = b * kBlock; c < std::min(t->n, (b + 1) * kBlock); c += kLen) {
                                const int64_t len = std::min(kLen, t->n - c);
                                const float* g = Widen(t->grad + c, gbuf, len);
                                const float* mo = Widen(t->m + c, mbuf, len, t->m_scale_inv);
                                const float* vo = Widen(t->v + c, vbuf, len);
                                amax_chunk(t->k, g, mo, vo, len, t->v_scale_inv, &am, &av);
                              }
                              t->m_amax[b] = am;
                              t->v_amax[b] = av;
                            }
                          }});
    plan->scales.push_back([t, &h, &a] {
      float am = 0.0f, av = 0.0f;
      for (size_t b = 0; b < t->m_amax.size(); ++b) {
        am = MaxNan(am, t->m_amax[b]);
        av = MaxNan(av, t->v_amax[b]);
      }
      std::tie(t->m_scale, t->v_scale) = UpdateScales(h, a, am, av);
    });
  }

  plan->update.push_back({t->n, [t, update_chunk, param_amax](int64_t begin, int64_t end) {
                            constexpr int64_t kLen = ChunkFor<P, G, M, V, kMaster>();
                            float gbuf[kLen], mbuf[kLen], vbuf[kLen], pbuf[kLen];
                            float amax = 0.0f;
                            for (int64_t c = begin; c < end; c += kLen) {
                              const int64_t len = std::min(kLen, end - c);
                              const float* g = Widen(t->grad + c, gbuf, len);
                              float* mm = Widen(t->m + c, mbuf, len, t->m_scale_inv);
                              float* vv = Widen(t->v + c, vbuf, len);
                              float* pp = kMaster ? t->master + c : Widen(t->param + c, pbuf, len);
                              // fp8 m: QuantizeRow applies m_scale; other m: the loop does (exactly 1 when unscaled).
                              const float m_mul = kScaled ? 1.0f : t->m_scale;
                              update_chunk(t->k, g, mm, vv, pp, len, t->v_scale_inv, m_mul, t->v_scale);
                              // The chunk is still in L1: no extra memory traffic.
                              if constexpr (kParamInPlace) {
                                if (param_amax) amax = MaxNaN(amax, AmaxRow(pp, len));
                              }
                              Narrow(pp, t->param + c, len);  // master: its rounding goes to the parameter
                              Narrow(mm, t->m + c, len, t->m_scale);
                              Narrow(vv, t->v + c, len);
                            }
                            if (param_amax) param_amax->Fold(amax);
                          }});
}

// ---- f64 compute (f64 parameters), scalar ------------------------------------------

template <typename T>
OCTET_INLINE double LoadF64(const T* x, int64_t i) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return static_cast<double>(x[i]);
  } else {
    return static_cast<double>(static_cast<float>(x[i]));
  }
}

template <typename T>
OCTET_INLINE void StoreF64(T* x, int64_t i, double v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    x[i] = static_cast<T>(v);
  } else {
    x[i] = T(static_cast<float>(v));  // round to nearest even (fp8: saturating)
  }
}

template <typename G, typename M, typename V>
void AdamWTensorF64(const AdamWHyper& h, const AdamWTensorArgs& a) {
  constexpr bool kScaled = std::is_same_v<M, float8_e4m3>;
  OCTET_CHECK(!a.param_amax.defined(), "adamw: the parameter amax is taken only for float32 parameters, not for ",
              Describe(a.param));
  const int64_t n = a.param.numel();
  double* param = a.param.data<double>();
  const G* grad = a.grad.data<G>();
  M* m = a.m.data<M>();
  V* v = a.v.data<V>();
  const Coeffs<double> k(h, a.weight_decay);
  double m_scale_inv = 1, v_scale_inv = 1, m_scale = 1, v_scale = 1;
  if constexpr (kScaled) {
    m_scale_inv = a.m_scale_inv.data<float>()[0];
    v_scale_inv = a.v_scale_inv.data<float>()[0];
  }
  auto moments = [&](int64_t i, double* g_out, double* m_out, double* v_out) {
    const double g = LoadF64(grad, i);
    *g_out = g;
    *m_out = k.b1 * (LoadF64(m, i) * m_scale_inv) + k.omb1 * g;
    *v_out = k.b2 * (LoadF64(v, i) * v_scale_inv) + k.omb2 * (g * g);
  };
  if constexpr (kScaled) {
    double am = 0, av = 0;
    for (int64_t i = 0; i < n; ++i) {
      double g, mi, vi;
      moments(i, &g, &mi, &vi);
      am = MaxNan(am, std::abs(mi));
      av = MaxNan(av, vi);
    }
    std::tie(m_scale, v_scale) = UpdateScales(h, a, static_cast<float>(am), static_cast<float>(av));
  }
  cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double g, mi, vi;
      moments(i, &g, &mi, &vi);
      const double p = param[i];
      param[i] = p - k.lr * ((mi / k.bc1) / (std::sqrt(vi / k.bc2) + k.eps) + k.wd * p);
      StoreF64(m, i, mi * m_scale);
      StoreF64(v, i, vi * v_scale);
    }
  });
}

// ---- dispatch --------------------------------------------------------------------------

void AdamWCpu(const AdamWHyper& hyper, const std::vector<AdamWTensorArgs>& tensors) {
  AdamWHyper h = hyper;
  if (hyper.device_scalars.defined()) {  // NOTE [captured optimizer step]: read where the kernel runs
    const double* s = hyper.device_scalars.data<double>();
    h.lr = s[0];
    h.bias_correction1 = s[1];
    h.bias_correction2 = s[2];
  }
  StepPlan plan;  // NOTE [adamw one region]
  for (const AdamWTensorArgs& a : tensors) {
    DispatchAdamW(a, HasAdamWScales(a), [&]<typename P, typename G, typename M, typename V, bool kMaster>() {
      if constexpr (std::is_same_v<P, double>) {
        AdamWTensorF64<G, M, V>(h, a);
      } else {
        PlanTensorF32<P, G, M, V, kMaster>(h, a, &plan);
      }
    });
  }
  ParallelJobs(plan.amax, 2);
  for (const auto& scales : plan.scales) scales();
  ParallelJobs(plan.update, kParallelGrain);
}

}  // namespace

OCTET_REGISTER_KERNEL(adamw_kernel, DeviceType::kCPU, &AdamWCpu);
OCTET_REGISTER_KERNEL(adamw_param_amax_kernel, DeviceType::kCPU, &AdamWCpu);

}  // namespace octet::cpu
