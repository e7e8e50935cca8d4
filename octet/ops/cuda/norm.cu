// CUDA kernels of the norm family: LayerNorm (with the fused residual add of
// AddLayerNorm) and RMSNorm, forward and backward. One template serves both
// (kCenter = true: LayerNorm; false: RMSNorm, mean fixed at 0), as on the CPU.
//
// Statistics follow NOTE [norm statistics] (ops/norm.cc): f32 (f64 for f64
// inputs) whatever x's dtype, variance in two passes (mean first, then the sum
// of squared deviations). A block owns a row (RowThreads(C) threads); each
// thread touches the same elements in every pass, so the row comes from L1/L2
// after the first pass and the fused residual sum a thread wrote is the one it
// reads back.
//
// LayerNormFp8 (NOTE [layer norm to fp8] in ops/norm.cc) is the forward
// kernel with the output quantized in the same pass: each normalised value
// is rounded to float32 once, its |.| goes into the block's amax (one atomic
// per block, NOTE [amax on the device] in ops/cuda/cast_device.cuh) and it
// is converted as Quantize's kernels convert (the hardware cvt for kSatFinite,
// NOTE [hardware fp8 conversion]; core/float8.h's function otherwise).
//
// Parameter gradients (dweight, dbias) are sums over all N rows: rows are cut
// into ParamGradSplits(N) blocks (a function of N only), each block sums its
// rows for 32 columns at a time, and a second kernel adds the partials in block
// order. Deterministic, no atomics.
#include <octet/ops/cuda/cast_device.cuh>
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/norm_kernels.h>

namespace octet::cuda {
namespace {

struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

template <typename A>
struct Pair {
  A a, b;
};
template <typename A>
__device__ __forceinline__ Pair<A> ShflDown(Pair<A> v, int offset) {
  return {__shfl_down_sync(kFullMask, v.a, offset), __shfl_down_sync(kFullMask, v.b, offset)};
}
template <typename A>
__device__ __forceinline__ Pair<A> ShflXor(Pair<A> v, int mask) {
  return {__shfl_xor_sync(kFullMask, v.a, mask), __shfl_xor_sync(kFullMask, v.b, mask)};
}
struct PairSumOp {
  template <typename A>
  __device__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

template <typename T>
__device__ __forceinline__ AccType<T> Load(const T* p, int64_t i) {
  return ConvertElement<AccType<T>>(p[i]);
}

// One row per block (grid-stride over rows).
template <bool kCenter, typename T>
__global__ void NormFwdKernel(const T* __restrict__ x, const T* __restrict__ residual, const T* __restrict__ weight,
                              const T* __restrict__ bias, AccType<T> eps, T* __restrict__ sum, T* __restrict__ y,
                              AccType<T>* __restrict__ mean, AccType<T>* __restrict__ rstd, int64_t n, int64_t c) {
  using A = AccType<T>;
  __shared__ A shared[32];
  const A inv_c = A(1) / static_cast<A>(c);
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const T* xr = x + row * c;
    const T* src = xr;  // what is normalised: x, or the rounded sum x + residual
    A mu = A(0);
    if (residual != nullptr) {
      const T* rr = residual + row * c;
      T* hr = sum + row * c;
      A s = A(0);
      for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
        const T h = ConvertElement<T>(Load(xr, i) + Load(rr, i));
        hr[i] = h;
        s += ConvertElement<A>(h);
      }
      src = hr;
      if constexpr (kCenter) mu = BlockAllReduce(s, SumOp{}, A(0), shared) * inv_c;
    } else if constexpr (kCenter) {
      A s = A(0);
      for (int64_t i = threadIdx.x; i < c; i += blockDim.x) s += Load(xr, i);
      mu = BlockAllReduce(s, SumOp{}, A(0), shared) * inv_c;
    }
    A ss = A(0);
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      const A d = Load(src, i) - mu;
      ss += d * d;
    }
    const A var = BlockAllReduce(ss, SumOp{}, A(0), shared) * inv_c;
    const A rs = A(1) / sqrt(var + eps);
    T* yr = y + row * c;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      const A w = weight != nullptr ? Load(weight, i) : A(1);
      const A b = bias != nullptr ? Load(bias, i) : A(0);
      yr[i] = ConvertElement<T>((Load(src, i) - mu) * rs * w + b);
    }
    if (threadIdx.x == 0) {
      if constexpr (kCenter) mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// One row per block (grid-stride over rows); the statistics as
// NormFwdKernel<true, T> computes them without a residual.
//   x (n, c) T; weight, bias (c) T or null; q (n, c) FP8 bytes;
//   scale, scale_inv, amax: [1] f32 (amax zeroed by the launcher);
//   mean, rstd (n) AccType<T>. `pairs`: c is even, so each thread converts
//   two neighbours with one instruction and stores them as one 16-bit word.
template <typename T, typename F8>
__global__ void LayerNormFp8FwdKernel(const T* __restrict__ x, const T* __restrict__ weight,
                                      const T* __restrict__ bias, AccType<T> eps, const float* __restrict__ scale_ptr,
                                      Fp8Saturation sat, bool pairs, uint8_t* __restrict__ q, float* scale_inv,
                                      float* amax, AccType<T>* __restrict__ mean, AccType<T>* __restrict__ rstd,
                                      int64_t n, int64_t c) {
  using A = AccType<T>;
  __shared__ A shared[32];
  const A inv_c = A(1) / static_cast<A>(c);
  const float scale = *scale_ptr;
  float m = 0.0f;
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const T* xr = x + row * c;
    A s = A(0);
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) s += Load(xr, i);
    const A mu = BlockAllReduce(s, SumOp{}, A(0), shared) * inv_c;
    A ss = A(0);
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      const A d = Load(xr, i) - mu;
      ss += d * d;
    }
    const A var = BlockAllReduce(ss, SumOp{}, A(0), shared) * inv_c;
    const A rs = A(1) / sqrt(var + eps);
    auto value = [&](int64_t i) {  // the normalised value, rounded to f32 once
      const A w = weight != nullptr ? Load(weight, i) : A(1);
      const A b = bias != nullptr ? Load(bias, i) : A(0);
      return static_cast<float>((Load(xr, i) - mu) * rs * w + b);
    };
    uint8_t* qr = q + row * c;
    if (pairs) {
      for (int64_t i = 2 * static_cast<int64_t>(threadIdx.x); i < c; i += 2 * static_cast<int64_t>(blockDim.x)) {
        const float v0 = value(i), v1 = value(i + 1);
        m = AbsMaxMerge(AbsMaxMerge(m, v0), v1);
        *reinterpret_cast<uint16_t*>(qr + i) = Fp8x2SatFinite<F8>(v0 * scale, v1 * scale);
      }
    } else {
      for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
        const float v = value(i);
        m = AbsMaxMerge(m, v);
        qr[i] = ToFp8Bits<F8>(v * scale, sat);
      }
    }
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
  BlockAmaxToGlobal(m, amax);
  if (scale_inv != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / scale;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ dsum), g = dy * w;
// RMSNorm has no mean(g) term. One row per block.
template <bool kCenter, typename T>
__global__ void NormBwdDxKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ weight,
                                const AccType<T>* __restrict__ mean, const AccType<T>* __restrict__ rstd,
                                const T* __restrict__ dsum, T* __restrict__ dx, int64_t n, int64_t c) {
  using A = AccType<T>;
  __shared__ Pair<A> shared[32];
  const A inv_c = A(1) / static_cast<A>(c);
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const T* xr = x + row * c;
    const T* dyr = dy + row * c;
    const A mu = kCenter ? mean[row] : A(0);
    const A rs = rstd[row];
    Pair<A> s{A(0), A(0)};
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      const A g = Load(dyr, i) * (weight != nullptr ? Load(weight, i) : A(1));
      s.a += g;
      s.b += g * ((Load(xr, i) - mu) * rs);
    }
    s = BlockAllReduce(s, PairSumOp{}, Pair<A>{A(0), A(0)}, shared);
    const A mean_g = kCenter ? s.a * inv_c : A(0), mean_gx = s.b * inv_c;
    T* dxr = dx + row * c;
    const T* dsr = dsum != nullptr ? dsum + row * c : nullptr;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      const A g = Load(dyr, i) * (weight != nullptr ? Load(weight, i) : A(1));
      A v = rs * (g - mean_g - (Load(xr, i) - mu) * rs * mean_gx);
      if (dsr != nullptr) v += Load(dsr, i);
      dxr[i] = ConvertElement<T>(v);
    }
  }
}

// Partial parameter gradients: dw_part[s, j] = sum over rows of split s of
// dy * xhat, db_part[s, j] = sum of dy. Blocks of (32, 16) threads: 32 columns,
// 16 rows at a time.
template <bool kCenter, typename T>
__global__ void NormParamGradKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                    const AccType<T>* __restrict__ mean, const AccType<T>* __restrict__ rstd,
                                    int64_t n, int64_t c, int64_t splits, AccType<T>* __restrict__ dw_part,
                                    AccType<T>* __restrict__ db_part) {
  using A = AccType<T>;
  __shared__ A tile_w[kColumnTileY][kColumnTileX + 1];
  __shared__ A tile_b[kColumnTileY][kColumnTileX + 1];
  const int64_t col_tiles = (c + kColumnTileX - 1) / kColumnTileX;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t task = blockIdx.x; task < splits * col_tiles; task += gridDim.x) {
    const int64_t split = task / col_tiles, col = (task % col_tiles) * kColumnTileX + tx;
    const int64_t r0 = n * split / splits, r1 = n * (split + 1) / splits;
    A sw = A(0), sb = A(0);
    if (col < c) {
      for (int64_t r = r0 + ty; r < r1; r += kColumnTileY) {
        const A g = Load(dy, r * c + col);
        const A mu = kCenter ? mean[r] : A(0);
        sw += g * ((Load(x, r * c + col) - mu) * rstd[r]);
        sb += g;
      }
    }
    tile_w[ty][tx] = sw;
    tile_b[ty][tx] = sb;
    __syncthreads();
    if (ty == 0 && col < c) {
      A w = tile_w[0][tx], b = tile_b[0][tx];
#pragma unroll
      for (int k = 1; k < kColumnTileY; ++k) {
        w += tile_w[k][tx];
        b += tile_b[k][tx];
      }
      if (dw_part != nullptr) dw_part[split * c + col] = w;
      if (db_part != nullptr) db_part[split * c + col] = b;
    }
    __syncthreads();
  }
}

// out[j] = sum over s of part[s, j], in s order.
template <typename T>
__global__ void SumPartialsKernel(const AccType<T>* __restrict__ part, int64_t splits, int64_t c,
                                  T* __restrict__ out) {
  using A = AccType<T>;
  for (int64_t j = GlobalThreadId(); j < c; j += GridStride()) {
    A s = A(0);
    for (int64_t k = 0; k < splits; ++k) s += part[k * c + j];
    out[j] = ConvertElement<T>(s);
  }
}

template <typename T>
const T* PtrOrNull(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <typename T>
T* MutPtrOrNull(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

unsigned RowGrid(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, (int64_t{1} << 31) - 1)); }

template <bool kCenter, typename T>
void NormFwd(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
             const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  using A = AccType<T>;
  const int64_t n = x.shape()[0], c = x.shape()[1];
  if (n == 0) return;
  KernelContext ctx(x.device());
  NormFwdKernel<kCenter, T><<<RowGrid(n), RowThreads(c), 0, ctx.stream()>>>(
      x.data<T>(), PtrOrNull<T>(residual), PtrOrNull<T>(weight), PtrOrNull<T>(bias), static_cast<A>(eps),
      MutPtrOrNull<T>(sum), y.data<T>(), kCenter ? mean.data<A>() : nullptr, rstd.data<A>(), n, c);
  OCTET_CUDA_LAUNCH_CHECK(kCenter ? "layer_norm forward" : "rms_norm forward");
}

template <bool kCenter, typename T>
void NormBwd(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
             const Tensor& dsum, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  using A = AccType<T>;
  const int64_t n = x.shape()[0], c = x.shape()[1];
  KernelContext ctx(x.device());
  const A* mp = kCenter ? mean.data<A>() : nullptr;
  if (dx.defined() && n > 0) {
    NormBwdDxKernel<kCenter, T><<<RowGrid(n), RowThreads(c), 0, ctx.stream()>>>(
        dy.data<T>(), x.data<T>(), PtrOrNull<T>(weight), mp, rstd.data<A>(), PtrOrNull<T>(dsum), dx.data<T>(), n,
        c);
    OCTET_CUDA_LAUNCH_CHECK(kCenter ? "layer_norm backward (dx)" : "rms_norm backward (dx)");
  }
  if (!dweight.defined() && !dbias.defined()) return;
  // See the file comment: deterministic two-pass parameter gradients.
  const int64_t splits = ParamGradSplits(n);
  const TensorOptions opts{.dtype = DTypeOf<A>::value, .device = x.device()};
  const Tensor dw_part = dweight.defined() ? Empty({splits, c}, opts) : Tensor();  // (splits, C)
  const Tensor db_part = dbias.defined() ? Empty({splits, c}, opts) : Tensor();    // (splits, C)
  const int64_t tasks = splits * ((c + kColumnTileX - 1) / kColumnTileX);
  NormParamGradKernel<kCenter, T><<<static_cast<unsigned>(tasks), dim3(kColumnTileX, kColumnTileY), 0,
                                    ctx.stream()>>>(dy.data<T>(), x.data<T>(), mp, rstd.data<A>(), n, c, splits,
                                                    MutPtrOrNull<A>(dw_part), MutPtrOrNull<A>(db_part));
  OCTET_CUDA_LAUNCH_CHECK("norm backward (parameter gradients)");
  auto sum_partials = [&](const Tensor& part, const Tensor& out) {
    SumPartialsKernel<T><<<ctx.Grid(c), kElementwiseThreads, 0, ctx.stream()>>>(part.data<A>(), splits, c,
                                                                                out.data<T>());
    OCTET_CUDA_LAUNCH_CHECK("norm backward (sum of partials)");
  };
  if (dweight.defined()) sum_partials(dw_part, dweight);
  if (dbias.defined()) sum_partials(db_part, dbias);
}

void LayerNormFwdCuda(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                      const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  DispatchFloat(x.dtype(), residual.defined() ? "add_layer_norm" : "layer_norm", [&]<typename T>() {
    NormFwd<true, T>(x, residual, weight, bias, eps, sum, y, mean, rstd);
  });
}

void LayerNormFp8FwdCuda(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& scale,
                         Fp8Saturation sat, const Tensor& q, const Tensor& scale_inv, const Tensor& amax,
                         const Tensor& mean, const Tensor& rstd) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  KernelContext ctx(x.device());
  ZeroAmax(amax.data<float>(), ctx.stream());
  // NOTE [hardware fp8 conversion]: pairs of bytes; q's rows start at even
  // offsets when c is even (a fresh allocation is aligned).
  const bool pairs = kCtHardwareCvt && sat == Fp8Saturation::kSatFinite && c % 2 == 0 && Addr(q) % 2 == 0;
  DispatchFloat(x.dtype(), "layer_norm_fp8", [&]<typename T>() {
    using A = AccType<T>;
    DispatchFp8(q.dtype(), "layer_norm_fp8", [&]<typename F8>() {
      // At least one block, so scale_inv and amax are written for n == 0 too.
      LayerNormFp8FwdKernel<T, F8><<<RowGrid(std::max<int64_t>(n, 1)), RowThreads(c), 0, ctx.stream()>>>(
          x.data<T>(), PtrOrNull<T>(weight), PtrOrNull<T>(bias), static_cast<A>(eps), scale.data<float>(), sat,
          pairs, static_cast<uint8_t*>(q.raw_data()), scale_inv.data<float>(), amax.data<float>(), mean.data<A>(),
          rstd.data<A>(), n, c);
      OCTET_CUDA_LAUNCH_CHECK("layer_norm_fp8 forward");
    });
  });
}

void LayerNormBwdCuda(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                      const Tensor& rstd, const Tensor& dsum, const Tensor& dx, const Tensor& dweight,
                      const Tensor& dbias) {
  DispatchFloat(x.dtype(), "layer_norm backward", [&]<typename T>() {
    NormBwd<true, T>(dy, x, weight, mean, rstd, dsum, dx, dweight, dbias);
  });
}

void RmsNormFwdCuda(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  DispatchFloat(x.dtype(), "rms_norm", [&]<typename T>() {
    NormFwd<false, T>(x, Tensor(), weight, Tensor(), eps, Tensor(), y, Tensor(), rstd);
  });
}

void RmsNormBwdCuda(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                    const Tensor& dweight) {
  DispatchFloat(x.dtype(), "rms_norm backward", [&]<typename T>() {
    NormBwd<false, T>(dy, x, weight, Tensor(), rstd, Tensor(), dx, dweight, Tensor());
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(layer_norm_fwd, DeviceType::kCUDA, &LayerNormFwdCuda);
OCTET_REGISTER_KERNEL(layer_norm_bwd, DeviceType::kCUDA, &LayerNormBwdCuda);
OCTET_REGISTER_KERNEL(layer_norm_fp8_fwd, DeviceType::kCUDA, &LayerNormFp8FwdCuda);
OCTET_REGISTER_KERNEL(rms_norm_fwd, DeviceType::kCUDA, &RmsNormFwdCuda);
OCTET_REGISTER_KERNEL(rms_norm_bwd, DeviceType::kCUDA, &RmsNormBwdCuda);

}  // namespace octet::cuda
