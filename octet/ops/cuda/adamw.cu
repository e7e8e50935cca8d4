// CUDA kernel of the fused AdamW update (NOTE [adamw update] in
// ops/optim_kernels.h), registered in the same kernel table as the CPU
// kernel (ops/cpu/adamw_cpu.cc).
//
// NOTE [adamw multi-tensor apply]: the tensors of one call are grouped by
// their dtype combination (param, grad, m, v, master); each group is cut into
// batches of at most kMaxTensors tensors and kMaxBlocks chunks of kChunk
// elements, and one launch updates a whole batch: the tensor pointers, sizes
// and the block -> (tensor, chunk) map travel in the kernel parameter struct
// (under the 4 KiB parameter limit), so no host-to-device copy is needed.
//
// NOTE [adamw cuda arithmetic]: the per-element formulas are replicated from
// ops/cpu/adamw_cpu.cc (UpdateChunk / AmaxChunk / the f64 loop), operation by
// operation, with explicitly rounded intrinsics (__fmul_rn, __fadd_rn,
// __fdiv_rn, __fsqrt_rn and the double versions) so nvcc cannot contract
// them into FMAs: the result is bit-identical to the CPU kernel, which is
// compiled with -ffp-contract=off for exactly this reason (CMakeLists.txt;
// the rest of the library may contract on x86-64-v3). Loads and
// stores use the scalar conversions of core/bfloat16.h, float16.h, float8.h,
// which the CPU row converters equal bit for bit.
//
// NOTE [adamw cuda scaled state]: kFp8Fp16 needs the amax of the new m and v
// before quantizing, without a host sync. Per batch, on the current stream:
//   1. prepare (one block): copies the old m/v scale and scale_inv of every
//      tensor into a device scratch buffer, zeroes m_amax and v_amax;
//   2. amax pass: each block computes the new m and v of its chunk, reduces
//      max|m| and max v in the block, then one atomicMax per block on the
//      float's bits (non-negative floats order like ints; NaN is made the
//      positive canonical NaN so it wins, as MaxNan does on the CPU);
//   3. update pass: every block derives the new scales from the amax and the
//      old scale (ComputeScale, as UpdateScales on the CPU), dequantizes with
//      the OLD scale_inv from the scratch buffer, updates and requantizes
//      with the new scale; the block of chunk 0 writes the new scale and
//      scale_inv (only when the scale changed, as the CPU does). Reading the
//      old values from scratch keeps the passes free of races.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>
#include <octet/core/scaling_math.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/adamw_dispatch_internal.h>
#include <octet/ops/optim_kernels.h>

namespace octet::cuda {
namespace {

constexpr int kMaxTensors = 16;
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunk = 16384;  // elements per block
constexpr int kThreads = 256;

// One launch's tensors (NOTE [adamw multi-tensor apply]).
struct Batch {
  void* param[kMaxTensors];
  const void* grad[kMaxTensors];
  float* master[kMaxTensors];
  void* m[kMaxTensors];
  void* v[kMaxTensors];
  int64_t n[kMaxTensors];
  double wd[kMaxTensors];
  float* m_scale[kMaxTensors];
  float* m_scale_inv[kMaxTensors];
  float* m_amax[kMaxTensors];
  float* v_scale[kMaxTensors];
  float* v_scale_inv[kMaxTensors];
  float* v_amax[kMaxTensors];
  float* scratch;  // (4 * kMaxTensors) old m_scale, m_scale_inv, v_scale, v_scale_inv per tensor
  // lr, bias_correction1, bias_correction2 read on the device (a captured
  // step, NOTE [captured optimizer step] in optim/adamw.cc); null: Coeffs.
  const double* hyper;
  int num_tensors;
  int m_margin;
  int v_margin;
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};
static_assert(sizeof(Batch) <= 4000, "kernel parameters are limited to 4 KiB");

// Hyper-parameters in the compute type, computed on the host exactly as the
// CPU's Coeffs<C>.
template <typename C>
struct Coeffs {
  C b1, omb1, b2, omb2, lr, eps, bc1, bc2;
};
template <typename C>
Coeffs<C> MakeCoeffs(const AdamWHyper& h) {
  return {static_cast<C>(h.beta1),
          static_cast<C>(1.0 - h.beta1),
          static_cast<C>(h.beta2),
          static_cast<C>(1.0 - h.beta2),
          static_cast<C>(h.lr),
          static_cast<C>(h.eps),
          static_cast<C>(h.bias_correction1),
          static_cast<C>(h.bias_correction2)};
}

// ---- uncontracted arithmetic (NOTE [adamw cuda arithmetic]) ---------------------

__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float Sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double Sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double Div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double Sqrt(double a) { return __dsqrt_rn(a); }

template <typename C>
__device__ __forceinline__ C MaxNan(C acc, C x) {
  return (x > acc || x != x) ? x : acc;
}

// Storage -> compute type (f64: via f32 for the narrow types, as LoadF64).
template <typename C, typename T>
__device__ __forceinline__ C Load(const T* x, int64_t i) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return static_cast<C>(x[i]);
  } else {
    return static_cast<C>(static_cast<float>(x[i]));
  }
}

// Compute type -> storage: round to nearest even, fp8 saturating to finite.
template <typename T, typename C>
__device__ __forceinline__ void Store(T* x, int64_t i, C v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    x[i] = static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, float8_e4m3>) {
    x[i] = float8_e4m3::FromBits(FloatToE4M3Bits(static_cast<float>(v), Fp8Saturation::kSatFinite));
  } else {
    x[i] = T(static_cast<float>(v));
  }
}

// The new m and v of element i (the update's first two lines).
template <typename C, typename G, typename M, typename V>
__device__ __forceinline__ void Moments(const Coeffs<C>& k, const G* grad, const M* m, const V* v, int64_t i,
                                        C m_scale_inv, C v_scale_inv, C* g_out, C* m_out, C* v_out) {
  const C g = Load<C>(grad, i);
  *g_out = g;
  *m_out = Add(Mul(k.b1, Mul(Load<C>(m, i), m_scale_inv)), Mul(k.omb1, g));
  *v_out = Add(Mul(k.b2, Mul(Load<C>(v, i), v_scale_inv)), Mul(k.omb2, Mul(g, g)));
}

// Block-wide max of two non-negative values, then one atomicMax per block
// on each (NOTE [adamw cuda scaled state]).
__device__ __forceinline__ void BlockAmax2ToGlobal(float a, float b, float* out_a, float* out_b) {
  __shared__ float sa[32], sb[32];
  const int tid = threadIdx.x;
  const int nwarps = blockDim.x >> 5;
  auto merge = [](float x, float y) { return (y > x || y != y) ? y : x; };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a = merge(a, __shfl_down_sync(cuda::kFullMask, a, o));
    b = merge(b, __shfl_down_sync(cuda::kFullMask, b, o));
  }
  if ((tid & 31) == 0) {
    sa[tid >> 5] = a;
    sb[tid >> 5] = b;
  }
  __syncthreads();
  if (tid < 32) {
    a = tid < nwarps ? sa[tid] : 0.0f;
    b = tid < nwarps ? sb[tid] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      a = merge(a, __shfl_down_sync(cuda::kFullMask, a, o));
      b = merge(b, __shfl_down_sync(cuda::kFullMask, b, o));
    }
    if (tid == 0) {
      // Canonical positive NaN: its bits exceed +inf's as an int.
      if (a != a) a = __int_as_float(0x7fffffff);
      if (b != b) b = __int_as_float(0x7fffffff);
      atomicMax(reinterpret_cast<int*>(out_a), __float_as_int(a));
      atomicMax(reinterpret_cast<int*>(out_b), __float_as_int(b));
    }
  }
}

// ---- kernels ---------------------------------------------------------------------

__global__ void PrepareScaledKernel(Batch b) {
  const int t = threadIdx.x;
  if (t >= b.num_tensors) return;
  b.scratch[4 * t + 0] = *b.m_scale[t];
  b.scratch[4 * t + 1] = *b.m_scale_inv[t];
  b.scratch[4 * t + 2] = *b.v_scale[t];
  b.scratch[4 * t + 3] = *b.v_scale_inv[t];
  *b.m_amax[t] = 0.0f;
  *b.v_amax[t] = 0.0f;
}

template <typename C, typename G, typename M, typename V>
__global__ void __launch_bounds__(kThreads) AmaxKernel(Batch b, Coeffs<C> k) {
  const int t = b.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(b.block_chunk[blockIdx.x]) * kChunk;
  const int64_t end = min(b.n[t], begin + kChunk);
  const G* grad = static_cast<const G*>(b.grad[t]);
  const M* m = static_cast<const M*>(b.m[t]);
  const V* v = static_cast<const V*>(b.v[t]);
  const C msi = static_cast<C>(b.scratch[4 * t + 1]);
  const C vsi = static_cast<C>(b.scratch[4 * t + 3]);
  C am = 0, av = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C g, mi, vi;
    Moments(k, grad, m, v, i, msi, vsi, &g, &mi, &vi);
    am = MaxNan(am, mi < 0 ? -mi : mi);
    av = MaxNan(av, vi);
  }
  // f64: max of float roundings = float rounding of the max (monotonic).
  BlockAmax2ToGlobal(static_cast<float>(am), static_cast<float>(av), b.m_amax[t], b.v_amax[t]);
}

template <typename C, typename P, typename G, typename M, typename V, bool kMaster, bool kScaled>
__global__ void __launch_bounds__(kThreads) UpdateKernel(Batch b, Coeffs<C> k) {
  if (b.hyper != nullptr) {  // the same double -> C conversions as MakeCoeffs
    k.lr = static_cast<C>(b.hyper[0]);
    k.bc1 = static_cast<C>(b.hyper[1]);
    k.bc2 = static_cast<C>(b.hyper[2]);
  }
  const int t = b.block_tensor[blockIdx.x];
  const int chunk = b.block_chunk[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(chunk) * kChunk;
  const int64_t end = min(b.n[t], begin + kChunk);
  P* param = static_cast<P*>(b.param[t]);
  const G* grad = static_cast<const G*>(b.grad[t]);
  float* master = b.master[t];
  M* m = static_cast<M*>(b.m[t]);
  V* v = static_cast<V*>(b.v[t]);
  const C wd = static_cast<C>(b.wd[t]);
  C msi = 1, vsi = 1, ms = 1, vs = 1;
  if constexpr (kScaled) {
    const float old_ms = b.scratch[4 * t + 0], old_vs = b.scratch[4 * t + 2];
    const float new_ms = ComputeScale(*b.m_amax[t], float8_e4m3::kMaxFinite, b.m_margin, old_ms, false);
    const float new_vs = ComputeScale(*b.v_amax[t], float16::kMaxFinite, b.v_margin, old_vs, false);
    if (chunk == 0 && threadIdx.x == 0) {
      if (new_ms != old_ms) {
        *b.m_scale[t] = new_ms;
        *b.m_scale_inv[t] = __fdiv_rn(1.0f, new_ms);
      }
      if (new_vs != old_vs) {
        *b.v_scale[t] = new_vs;
        *b.v_scale_inv[t] = __fdiv_rn(1.0f, new_vs);
      }
    }
    msi = static_cast<C>(b.scratch[4 * t + 1]);
    vsi = static_cast<C>(b.scratch[4 * t + 3]);
    ms = static_cast<C>(new_ms);
    vs = static_cast<C>(new_vs);
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C g, mi, vi;
    Moments(k, grad, m, v, i, msi, vsi, &g, &mi, &vi);
    const C p = kMaster ? static_cast<C>(master[i]) : Load<C>(param, i);
    const C upd = Add(Div(Div(mi, k.bc1), Add(Sqrt(Div(vi, k.bc2)), k.eps)), Mul(wd, p));
    const C p_new = Sub(p, Mul(k.lr, upd));
    if constexpr (kMaster) {
      master[i] = static_cast<float>(p_new);
      Store(param, i, p_new);
    } else {
      Store(param, i, p_new);
    }
    // fp8 m: fp8(m * scale) as QuantizeRow; other m: m * 1 (exact) as the CPU loop.
    Store(m, i, Mul(mi, ms));
    Store(v, i, Mul(vi, vs));
  }
}

// ---- host ------------------------------------------------------------------------

// Runs one group of tensors of a single dtype combination.
template <typename P, typename G, typename M, typename V, bool kMaster>
void RunGroup(const AdamWHyper& h, const std::vector<const AdamWTensorArgs*>& group, cudaStream_t stream,
              Device device) {
  using C = std::conditional_t<std::is_same_v<P, double>, double, float>;
  constexpr bool kScaled = std::is_same_v<M, float8_e4m3>;
  const Coeffs<C> k = MakeCoeffs<C>(h);
  Tensor scratch;
  if constexpr (kScaled) scratch = Empty({4 * kMaxTensors}, TensorOptions{DType::kFloat32, device});

  Batch b{};
  int nblocks = 0;
  auto flush = [&]() {
    if (nblocks == 0) return;
    if constexpr (kScaled) {
      PrepareScaledKernel<<<1, 32, 0, stream>>>(b);
      OCTET_CUDA_LAUNCH_CHECK("adamw_prepare_scaled");
      AmaxKernel<C, G, M, V><<<nblocks, kThreads, 0, stream>>>(b, k);
      OCTET_CUDA_LAUNCH_CHECK("adamw_amax");
    }
    UpdateKernel<C, P, G, M, V, kMaster, kScaled><<<nblocks, kThreads, 0, stream>>>(b, k);
    OCTET_CUDA_LAUNCH_CHECK("adamw_update");
    b = Batch{};
    nblocks = 0;
  };
  // Slot t of batch bb holds tensor a.
  auto fill = [&](Batch& bb, int t, const AdamWTensorArgs* a) {
    bb.hyper = h.device_scalars.defined() ? h.device_scalars.template data<double>() : nullptr;
    bb.param[t] = a->param.raw_data();
    bb.grad[t] = a->grad.raw_data();
    bb.master[t] = kMaster ? a->master.template data<float>() : nullptr;
    bb.m[t] = a->m.raw_data();
    bb.v[t] = a->v.raw_data();
    bb.n[t] = a->param.numel();
    bb.wd[t] = a->weight_decay;
    if constexpr (kScaled) {
      bb.m_scale[t] = a->m_scale.template data<float>();
      bb.m_scale_inv[t] = a->m_scale_inv.template data<float>();
      bb.m_amax[t] = a->m_amax.template data<float>();
      bb.v_scale[t] = a->v_scale.template data<float>();
      bb.v_scale_inv[t] = a->v_scale_inv.template data<float>();
      bb.v_amax[t] = a->v_amax.template data<float>();
      bb.scratch = scratch.template data<float>();
      bb.m_margin = h.m_margin;
      bb.v_margin = h.v_margin;
    }
  };
  for (const AdamWTensorArgs* a : group) {
    const int64_t n = a->param.numel();
    if (n == 0) {
      // As the CPU kernel: an empty tensor's state amax is 0.
      if constexpr (kScaled) {
        OCTET_CUDA_CHECK(cudaMemsetAsync(a->m_amax.raw_data(), 0, sizeof(float), stream));
        OCTET_CUDA_CHECK(cudaMemsetAsync(a->v_amax.raw_data(), 0, sizeof(float), stream));
      }
      continue;
    }
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    OCTET_CHECK(chunks <= INT32_MAX, "adamw: tensor too large for the CUDA kernel: ", Describe(a->param));
    if constexpr (kScaled) {
      if (chunks > kMaxBlocks) {
        // NOTE [adamw cuda scaled state] for a tensor larger than one launch:
        // prepare once, the amax pass over every window of chunks (the
        // atomicMax accumulates across launches), then the update pass over
        // every window; the old scales stay in scratch throughout.
        flush();
        Batch one{};
        fill(one, 0, a);
        one.num_tensors = 1;
        PrepareScaledKernel<<<1, 32, 0, stream>>>(one);
        OCTET_CUDA_LAUNCH_CHECK("adamw_prepare_scaled");
        for (int pass = 0; pass < 2; ++pass) {
          for (int64_t c0 = 0; c0 < chunks; c0 += kMaxBlocks) {
            const int nb = static_cast<int>(std::min<int64_t>(kMaxBlocks, chunks - c0));
            for (int i = 0; i < nb; ++i) {
              one.block_tensor[i] = 0;
              one.block_chunk[i] = static_cast<int32_t>(c0 + i);
            }
            if (pass == 0) {
              AmaxKernel<C, G, M, V><<<nb, kThreads, 0, stream>>>(one, k);
              OCTET_CUDA_LAUNCH_CHECK("adamw_amax");
            } else {
              UpdateKernel<C, P, G, M, V, kMaster, kScaled><<<nb, kThreads, 0, stream>>>(one, k);
              OCTET_CUDA_LAUNCH_CHECK("adamw_update");
            }
          }
        }
        continue;
      }
    }
    int64_t c = 0;
    while (c < chunks) {
      if (b.num_tensors == kMaxTensors || nblocks == kMaxBlocks) flush();
      const int t = b.num_tensors++;
      fill(b, t, a);
      // A tensor split across batches would update its scales from a partial
      // amax: scaled tensors start a new batch when they do not fit whole.
      if constexpr (kScaled) {
        if (nblocks + chunks > kMaxBlocks) {
          --b.num_tensors;
          flush();
          continue;
        }
      }
      while (c < chunks && nblocks < kMaxBlocks) {
        b.block_tensor[nblocks] = static_cast<uint8_t>(t);
        b.block_chunk[nblocks] = static_cast<int32_t>(c);
        ++nblocks;
        ++c;
      }
    }
  }
  flush();
}

void CheckDevice(const AdamWTensorArgs& a, const Tensor& t, const char* what) {
  if (!t.defined()) return;
  OCTET_CHECK(t.device() == a.param.device(), "adamw: ", what, " ", Describe(t), " is not on the device of ",
              Describe(a.param));
  OCTET_CHECK(t.is_contiguous(), "adamw: ", what, " ", Describe(t), " must be contiguous");
}

void AdamWCuda(const AdamWHyper& h, const std::vector<AdamWTensorArgs>& tensors) {
  if (tensors.empty()) return;
  const Device device = tensors.front().param.device();
  // Groups by dtype combination, in first-appearance order.
  using Key = std::tuple<DType, DType, DType, DType, bool>;
  std::vector<Key> order;
  std::map<Key, std::vector<const AdamWTensorArgs*>> groups;
  for (const AdamWTensorArgs& a : tensors) {
    for (const Tensor* t : {&a.param, &a.grad, &a.master, &a.m, &a.v, &a.m_scale, &a.m_scale_inv, &a.m_amax,
                            &a.v_scale, &a.v_scale_inv, &a.v_amax}) {
      CheckDevice(a, *t, "tensor");
    }
    OCTET_CHECK(a.param.device() == device, "adamw: all tensors of one step must be on one device; got ",
                Describe(a.param), " and ", Describe(tensors.front().param));
    const Key key{a.param.dtype(), a.grad.dtype(), a.m.dtype(), a.v.dtype(), a.master.defined()};
    auto [it, inserted] = groups.try_emplace(key);
    if (inserted) order.push_back(key);
    it->second.push_back(&a);
  }
  cuda::KernelContext ctx(device);
  for (const Key& key : order) {
    const std::vector<const AdamWTensorArgs*>& group = groups[key];
    // The group shares its dtypes; the scale tensors must be in every member.
    const bool scales =
        std::all_of(group.begin(), group.end(), [](const AdamWTensorArgs* p) { return HasAdamWScales(*p); });
    DispatchAdamW(*group.front(), scales, [&]<typename P, typename G, typename M, typename V, bool kMaster>() {
      RunGroup<P, G, M, V, kMaster>(h, group, ctx.stream(), device);
    });
  }
}

}  // namespace

OCTET_REGISTER_KERNEL(adamw_kernel, DeviceType::kCUDA, &AdamWCuda);

}  // namespace octet::cuda
