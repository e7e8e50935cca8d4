// CUDA kernels of the flash attention path (float32, float64): the block
// algorithm of ops/attention_flash.h (NOTE [flash attention on CUDA]) run by
// one 256-thread block per (batch*head, tile), shared memory opted in per
// kernel, Di = rowsum(dO∘O) by a warp per row. Launch checks follow
// ops/cuda/kernel_utils.cuh.
#include <algorithm>
#include <type_traits>

#include <octet/ops/attention_flash.h>
#include <octet/ops/attention_kernels.h>
#include <octet/ops/cuda/attention_flash_cuda.h>
#include <octet/ops/cuda/kernel_utils.cuh>

namespace octet::cuda {
namespace {

using flash::BwdParams;
using flash::FwdParams;
using flash::Geom;
using flash::kThreads;

// The execution policy of the device: this thread's registers, barriers and
// half-warp shuffles (NOTE [flash attention on CUDA]). The host bodies are
// empty: the block functions are host-device templates, only run here on the device.
template <class State>
struct DeviceExec {
  State st;
  template <class F>
  OCTET_HOST_DEVICE __forceinline__ void Each(F&& f) {
#if defined(__CUDA_ARCH__)
    f(static_cast<int>(threadIdx.x), st);
#endif
  }
  OCTET_HOST_DEVICE __forceinline__ void Sync() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  OCTET_HOST_DEVICE __forceinline__ void Finish() {}
  // Every thread of the block calls this (no divergence): full-warp shuffles,
  // xor offsets < 16 stay within the half-warp of one ty.
  template <class Op>
  OCTET_HOST_DEVICE __forceinline__ void RowReduce(Op op) {
#if defined(__CUDA_ARCH__)
    constexpr int n = static_cast<int>(std::extent_v<decltype(State::red)>);
#pragma unroll
    for (int i = 0; i < n; ++i)
#pragma unroll
      for (int o = flash::kLanes / 2; o > 0; o >>= 1) st.red[i] = op(st.red[i], __shfl_xor_sync(kFullMask, st.red[i], o));
#endif
  }
};

extern __shared__ __align__(16) unsigned char g_flash_smem[];

template <typename T, int kDP>
__global__ void __launch_bounds__(kThreads, 2) FlashFwdKernel(const FwdParams<T, AccType<T>> p) {
  using A = AccType<T>;
  using G = Geom<A, kDP>;
  DeviceExec<flash::FwdState<G, A>> ex;
  flash::FwdBlock<G>(ex, p, static_cast<int64_t>(blockIdx.x), reinterpret_cast<A*>(g_flash_smem));
}

template <typename T, int kDP>
__global__ void __launch_bounds__(kThreads, kDP == 64 ? 2 : 1) FlashBwdKvKernel(const BwdParams<T, AccType<T>> p) {
  using A = AccType<T>;
  using G = Geom<A, kDP>;
  DeviceExec<flash::BwdKvState<G, A>> ex;
  flash::BwdKvBlock<G>(ex, p, static_cast<int64_t>(blockIdx.x), reinterpret_cast<A*>(g_flash_smem));
}

template <typename T, int kDP>
__global__ void __launch_bounds__(kThreads, kDP == 64 ? 2 : 1) FlashBwdQKernel(const BwdParams<T, AccType<T>> p) {
  using A = AccType<T>;
  using G = Geom<A, kDP>;
  DeviceExec<flash::BwdQState<G, A>> ex;
  flash::BwdQBlock<G>(ex, p, static_cast<int64_t>(blockIdx.x), reinterpret_cast<A*>(g_flash_smem));
}

// Register budgets: __launch_bounds__(256, 2) caps a thread at 128 registers
// so two blocks share an SM where shared memory allows it (ptxas on sm_90a:
// float32 D <= 64 kernels fit without spills with the ScoresNT loop not
// unrolled; D = 128 forward spills a few bytes). The float32 D = 128 backward
// kernels need more shared memory than two blocks get, so they keep 1.

// Di = rowsum(dO∘O), one warp per row of the (BH*T) rows.
inline constexpr int kDiRowsPerBlock = kThreads / 32;

template <typename T>
__global__ void __launch_bounds__(kThreads) FlashDiKernel(const BwdParams<T, AccType<T>> p) {
  using A = AccType<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kDiRowsPerBlock + threadIdx.x / 32;
  if (row >= p.bh * p.t) return;  // uniform per warp: the shuffles below see whole warps
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t bh = row / p.t, t = row % p.t;
  const T* dout = p.dout.Head(bh) + t * p.dout.st;
  const T* out = p.out.Head(bh) + t * p.out.st;
  A s = flash::DiPart<T, A>(dout, p.dout.sd, out, p.out.sd, p.d, lane, 32);
  s = WarpAllReduce(s, flash::SumOp{});
  if (lane == 0) p.di[row] = s;
}

template <typename A, int kDP>
FlashSmemBytes SmemBytesOf() {
  using G = Geom<A, kDP>;
  return {static_cast<int64_t>(flash::kFwdSmemElems<G> * sizeof(A)),
          static_cast<int64_t>(flash::kBwdKvSmemElems<G> * sizeof(A)),
          static_cast<int64_t>(flash::kBwdQSmemElems<G> * sizeof(A))};
}

template <typename P>
flash::Strided<P> StridedOf(const Tensor& t) {
  flash::Strided<P> s;
  s.data = static_cast<P*>(t.raw_data());
  s.sb = t.stride(0);
  s.sh = t.stride(1);
  s.st = t.stride(2);
  s.sd = t.stride(3);
  s.heads = t.size(1);
  return s;
}

// Allows `kernel` `smem` bytes of dynamic shared memory (checked against the
// device's opt-in limit first, with an error naming the kernel).
template <typename Kernel>
void AllowSmem(Kernel kernel, int64_t smem, int device, const char* name) {
  int optin = 0;
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  OCTET_CHECK(smem <= optin, name, " needs ", smem, " bytes of shared memory per block; device ", device,
              " allows ", optin);
  OCTET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}

// Blocks of a (BH x tiles) grid, checked against the grid's x limit.
unsigned FlashGrid(int64_t bh, int64_t nt, const char* name) {
  const int64_t blocks = bh * nt;
  OCTET_CHECK(blocks > 0 && blocks <= 0x7fffffff, name, ": ", bh, " heads x ", nt,
              " tiles exceed the grid limit of 2^31 - 1 blocks");
  return static_cast<unsigned>(blocks);
}

template <typename T, int kDP>
void FwdTyped(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
              const Tensor& lse) {
  using A = AccType<T>;
  using G = Geom<A, kDP>;
  FwdParams<T, A> p;
  p.q = StridedOf<const T>(q);
  p.k = StridedOf<const T>(k);
  p.v = StridedOf<const T>(v);
  p.out = StridedOf<T>(out);
  p.lse = lse.data<A>();
  p.bh = q.size(0) * q.size(1);
  p.t = q.size(2);
  p.d = static_cast<int>(q.size(3));
  p.nt = static_cast<int>((p.t + G::kTile - 1) / G::kTile);
  p.qmul = static_cast<A>(scale * flash::kLog2e);
  KernelContext ctx(q.device());
  const int64_t smem = SmemBytesOf<A, kDP>().fwd;
  constexpr const char* kName = "flash attention forward";
  AllowSmem(FlashFwdKernel<T, kDP>, smem, ctx.device(), kName);
  FlashFwdKernel<T, kDP><<<FlashGrid(p.bh, p.nt, kName), kThreads, smem, ctx.stream()>>>(p);
  OCTET_CUDA_LAUNCH_CHECK(kName);
}

template <typename T, int kDP>
void BwdTyped(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
              const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  using A = AccType<T>;
  using G = Geom<A, kDP>;
  BwdParams<T, A> p;
  p.q = StridedOf<const T>(q);
  p.k = StridedOf<const T>(k);
  p.v = StridedOf<const T>(v);
  p.out = StridedOf<const T>(out);
  p.dout = StridedOf<const T>(dout);
  if (dq.defined()) p.dq = StridedOf<T>(dq);
  if (dk.defined()) p.dk = StridedOf<T>(dk);
  if (dv.defined()) p.dv = StridedOf<T>(dv);
  p.lse = lse.data<A>();
  p.bh = q.size(0) * q.size(1);
  p.t = q.size(2);
  p.d = static_cast<int>(q.size(3));
  p.nt = static_cast<int>((p.t + G::kTile - 1) / G::kTile);
  p.c = static_cast<A>(scale * flash::kLog2e);
  p.scale = static_cast<A>(scale);
  KernelContext ctx(q.device());
  // Scratch on this stream: freed (for reuse by later work on it) when this returns.
  const Tensor di = Empty({p.bh * p.t}, {.dtype = lse.dtype(), .device = q.device()});
  p.di = di.data<A>();
  const FlashSmemBytes smem = SmemBytesOf<A, kDP>();

  const int64_t di_blocks = (p.bh * p.t + kDiRowsPerBlock - 1) / kDiRowsPerBlock;
  OCTET_CHECK(di_blocks <= 0x7fffffff, "flash attention backward: too many rows (", p.bh * p.t, ")");
  FlashDiKernel<T><<<static_cast<unsigned>(di_blocks), kThreads, 0, ctx.stream()>>>(p);
  OCTET_CUDA_LAUNCH_CHECK("flash attention backward (rowsum(dO*O))");
  if (dk.defined() || dv.defined()) {
    constexpr const char* kName = "flash attention backward (dK, dV)";
    AllowSmem(FlashBwdKvKernel<T, kDP>, smem.bwd_kv, ctx.device(), kName);
    FlashBwdKvKernel<T, kDP><<<FlashGrid(p.bh, p.nt, kName), kThreads, smem.bwd_kv, ctx.stream()>>>(p);
    OCTET_CUDA_LAUNCH_CHECK(kName);
  }
  if (dq.defined()) {
    constexpr const char* kName = "flash attention backward (dQ)";
    AllowSmem(FlashBwdQKernel<T, kDP>, smem.bwd_q, ctx.device(), kName);
    FlashBwdQKernel<T, kDP><<<FlashGrid(p.bh, p.nt, kName), kThreads, smem.bwd_q, ctx.stream()>>>(p);
    OCTET_CUDA_LAUNCH_CHECK(kName);
  }
}

// Calls f.template operator()<T, kDP>() for the dtype and padded head dim.
template <typename F>
void DispatchFlash(DType dtype, int64_t head_dim, F&& f) {
  const bool wide = flash::PaddedHeadDim(head_dim) == 128;
  if (dtype == DType::kFloat32) {
    wide ? f.template operator()<float, 128>() : f.template operator()<float, 64>();
  } else if (dtype == DType::kFloat64) {
    wide ? f.template operator()<double, 128>() : f.template operator()<double, 64>();
  } else {
    OCTET_FAIL("flash attention (CUDA): takes float32 or float64, got ", Name(dtype));
  }
}

void CheckCall(const Tensor& q, const char* what) {
  const char* reason = FlashAttentionUnsupportedReason(q.dtype(), q.size(3), q.device());
  OCTET_CHECK(reason == nullptr, "flash attention ", what, " cannot take ", Describe(q), ": ", reason);
}

}  // namespace

FlashSmemBytes FlashAttentionSmemBytes(DType dtype, int64_t head_dim) {
  OCTET_CHECK(head_dim >= 1 && head_dim <= flash::kMaxHeadDim,
              "flash attention: head dim must be in [1, 128], got ", head_dim);
  const bool wide = flash::PaddedHeadDim(head_dim) == 128;
  if (dtype == DType::kFloat64) return wide ? SmemBytesOf<double, 128>() : SmemBytesOf<double, 64>();
  OCTET_CHECK(dtype == DType::kFloat32, "flash attention: takes float32 or float64, got ", Name(dtype));
  return wide ? SmemBytesOf<float, 128>() : SmemBytesOf<float, 64>();
}

const char* FlashAttentionUnsupportedReason(DType dtype, int64_t head_dim, int64_t max_smem_per_block) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64)
    return "the flash attention kernels take float32 or float64 inputs";
  if (head_dim < 1 || head_dim > flash::kMaxHeadDim) return "the flash attention kernels take head dims 1..128";
  const FlashSmemBytes s = FlashAttentionSmemBytes(dtype, head_dim);
  if (std::max({s.fwd, s.bwd_kv, s.bwd_q}) > max_smem_per_block)
    return "the flash attention kernels need more shared memory per block than this device allows";
  return nullptr;
}

const char* FlashAttentionUnsupportedReason(DType dtype, int64_t head_dim, const Device& device) {
  // The cheap checks first: no device query for dtypes that never come here.
  if (const char* r = FlashAttentionUnsupportedReason(dtype, head_dim, int64_t{1} << 40)) return r;
  int optin = 0;
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device.index));
  return FlashAttentionUnsupportedReason(dtype, head_dim, static_cast<int64_t>(optin));
}

void CausalAttentionFwdFlash(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                             const Tensor& lse) {
  CheckCall(q, "forward");
  OCTET_CHECK(lse.dtype() == AttentionLseDtype(q.dtype()) && lse.is_contiguous(),
              "flash attention forward: lse must be contiguous ", Name(AttentionLseDtype(q.dtype())), ", got ",
              Describe(lse));
  DispatchFlash(q.dtype(), q.size(3), [&]<typename T, int kDP>() { FwdTyped<T, kDP>(q, k, v, scale, out, lse); });
}

void CausalAttentionBwdFlash(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                             const Tensor& lse, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  CheckCall(q, "backward");
  OCTET_CHECK(lse.dtype() == AttentionLseDtype(q.dtype()) && lse.is_contiguous(),
              "flash attention backward: lse must be contiguous ", Name(AttentionLseDtype(q.dtype())), ", got ",
              Describe(lse));
  if (!dq.defined() && !dk.defined() && !dv.defined()) return;
  DispatchFlash(q.dtype(), q.size(3), [&]<typename T, int kDP>() {
    BwdTyped<T, kDP>(q, k, v, out, dout, lse, scale, dq, dk, dv);
  });
}

}  // namespace octet::cuda
