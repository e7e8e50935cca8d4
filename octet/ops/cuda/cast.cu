// CUDA kernels of the cast family: fused quantize + amax, dequantize, amax,
// the all-slots delayed-scaling update, and the matrix repacking of the
// cuBLASLt GEMM; QuantizeCuda hands the fused cast-transpose (row-wise and
// column-wise FP8 copies, amax, dbias) to ops/cuda/cast_transpose.cu.
// Launchers are declared in ops/cuda/cast_cuda.h; shared device helpers
// (amax, FP8 conversion) are in ops/cuda/cast_device.cuh.
#include <cuda_runtime.h>

#include <type_traits>

#include <octet/core/delayed_scaling.h>
#include <octet/core/float8.h>
#include <octet/ops/cast_kernels.h>
#include <octet/ops/cuda/cast_cuda.h>
#include <octet/ops/cuda/cast_device.cuh>
#include <octet/ops/cuda/kernel_utils.cuh>

namespace octet::cuda {
namespace {

// ---- quantize ----------------------------------------------------------------------

// Quantize: QuantizeMappedKernel (cast_device.cuh) with the widening to f32
// (f64 rounds to f32 first, as ops/cast_kernels.h says).
template <typename T>
struct WidenToFloat {
  __device__ __forceinline__ float operator()(T v) const { return ConvertElement<float>(v); }
};

// ---- GEMM repacking tiles ------------------------------------------------------------

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // block (32, 8): each thread handles 4 rows of a tile

// ---- dequantize ----------------------------------------------------------------------

template <typename F8, typename T>
__global__ void DequantizeKernel(const F8* __restrict__ x, T* __restrict__ y, int64_t n, const float* scale_inv_ptr) {
  const float s = *scale_inv_ptr;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) y[i] = ConvertElement<T>(static_cast<float>(x[i]) * s);
}

// ---- delayed scaling -----------------------------------------------------------------

struct SlotBatch {
  DelayedScalingSlotRef slots[kDelayedScalingSlotsPerLaunch];
  int count;
};

__global__ void DelayedScalingKernel(const __grid_constant__ SlotBatch batch, DelayedScalingConfig config) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch.count) return;
  const DelayedScalingSlotRef& s = batch.slots[i];
  UpdateDelayedScalingSlot(s.history, s.length, *s.amax, s.fp8_max, config, s.scale, s.scale_inv);
}

// One thread per slot of a model's contiguous FP8 state (amp::Fp8State).
__global__ void DelayedScalingBuffersKernel(const DelayedScalingBuffers b, DelayedScalingConfig config) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < b.slots) UpdateDelayedScalingBufferSlot(b, i, config);
}

// ---- GEMM repacking ---------------------------------------------------------------------

// dst [rows_p, cols_p] contiguous from a strided src, zero padded. Tiles of
// 32x32: the load runs its fast thread index along whichever of r/c has unit
// stride in src (`src_row_fast`: along r), the store along c.
template <typename S, typename D>
__global__ void PackKernel(const S* __restrict__ src, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                           D* __restrict__ dst, int64_t rows_p, int64_t cols_p, bool src_row_fast) {
  __shared__ D tile[kTile][kTile + 1];
  const int64_t tiles_c = (cols_p + kTile - 1) / kTile;
  const int64_t tiles = ((rows_p + kTile - 1) / kTile) * tiles_c;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const D zero = ConvertElement<D>(0.0f);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
#pragma unroll
    for (int i = ty; i < kTile; i += kTileRows) {
      const int ir = src_row_fast ? tx : i, ic = src_row_fast ? i : tx;
      const int64_t r = r0 + ir, c = c0 + ic;
      D v = zero;
      if (r < rows && c < cols) v = ConvertElement<D>(src[r * rs + c * cs]);
      tile[ir][ic] = v;
    }
    __syncthreads();
#pragma unroll
    for (int i = ty; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i, c = c0 + tx;
      if (r < rows_p && c < cols_p) dst[r * cols_p + c] = tile[i][tx];
    }
    __syncthreads();
  }
}

template <typename D>
__global__ void ConvertOutputKernel(const float* __restrict__ src, int64_t rows, int64_t cols, int64_t lds,
                                    D* __restrict__ dst, int64_t ldd, const float* scale_ptr, float* amax) {
  const float scale = scale_ptr != nullptr ? *scale_ptr : 1.0f;
  float m = 0.0f;
  const int64_t n = rows * cols;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) {
    const int64_t r = i / cols, c = i % cols;
    const float v = src[r * lds + c];
    m = AbsMaxMerge(m, v);
    dst[r * ldd + c] = ConvertElement<D>(scale_ptr != nullptr ? v * scale : v);
  }
  BlockAmaxToGlobal(m, amax);
}

template <typename T>
__global__ void AmaxKernel(const T* __restrict__ x, int64_t n, float* amax) {
  float m = 0.0f;
  for (int64_t i = GlobalThreadId(); i < n; i += GridStride()) m = AbsMaxMerge(m, ConvertElement<float>(x[i]));
  BlockAmaxToGlobal(m, amax);
}

__global__ void ScaledAlphaBetaKernel(float alpha, const float* a, const float* b, float beta, float* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = alpha * (a != nullptr ? *a : 1.0f) * (b != nullptr ? *b : 1.0f);
    out[1] = beta;
  }
}

// ---- dispatch helpers --------------------------------------------------------------------

// The device pointer of a float32 [1] tensor on `device`.
float* ScalarPtr(const char* op, const Tensor& t, const char* arg, Device device) {
  OCTET_CHECK(t.defined() && t.numel() == 1 && t.dtype() == DType::kFloat32 && t.device() == device, op, ": ", arg,
              " must be a float32 tensor with one element on ", device, ", got ", t.defined() ? Describe(t) : "none");
  return t.data<float>();
}

void CheckCudaContiguous(const char* op, const Tensor& t, const char* arg) {
  OCTET_CHECK(t.device().is_cuda(), op, ": ", arg, " must be a CUDA tensor, got ", Describe(t));
  OCTET_CHECK(t.is_contiguous(), op, ": ", arg, " must be contiguous, got ", Describe(t));
}

}  // namespace

void QuantizeCuda(const Tensor& x, const Tensor& scale, Fp8Saturation sat, const Tensor& y, const Tensor& yt,
                  const Tensor& scale_inv, const Tensor& amax, const Tensor& dbias) {
  CheckCudaContiguous("quantize (CUDA)", x, "x");
  OCTET_CHECK(y.defined() || yt.defined(), "quantize (CUDA): neither y nor yt is given");
  if (y.defined()) CheckCudaContiguous("quantize (CUDA)", y, "y");
  if (yt.defined()) CheckCudaContiguous("quantize (CUDA)", yt, "yt");
  const DType fp8 = y.defined() ? y.dtype() : yt.dtype();
  OCTET_CHECK(!y.defined() || y.numel() == x.numel(), "quantize (CUDA): y ", Describe(y), " does not match x ",
              Describe(x));
  OCTET_CHECK(!(y.defined() && yt.defined()) || y.dtype() == yt.dtype(), "quantize (CUDA): y ", Describe(y), " and yt ",
              Describe(yt), " must have one FP8 dtype");
  OCTET_CHECK(!dbias.defined() || yt.defined(), "quantize (CUDA): dbias ", Describe(dbias),
              " is computed by the cast-transpose only on CUDA (yt is not given): use CastTransposeWithBiasGrad");
  const float* scale_p = ScalarPtr("quantize (CUDA)", scale, "scale", x.device());
  float* scale_inv_p = ScalarPtr("quantize (CUDA)", scale_inv, "scale_inv", x.device());
  float* amax_p = ScalarPtr("quantize (CUDA)", amax, "amax", x.device());
  KernelContext ctx(x.device());
  ZeroAmax(amax_p, ctx.stream());
  if (yt.defined()) {
    // Fused cast-transpose: x (R,C) -> y (R,C) and yt (C,R) (+ dbias (C)).
    OCTET_CHECK(x.dim() == 2 && yt.dim() == 2 && yt.size(0) == x.size(1) && yt.size(1) == x.size(0),
                "quantize (CUDA): cast-transpose needs a 2-D x and yt of the transposed shape, got x ", Describe(x),
                ", yt ", Describe(yt));
    if (dbias.defined()) {
      CheckCudaContiguous("quantize (CUDA)", dbias, "dbias");
      OCTET_CHECK(dbias.dtype() == DType::kFloat32 && dbias.numel() == x.size(1) && dbias.device() == x.device(),
                  "quantize (CUDA): dbias must be float32 (C) = (", x.size(1), ") on ", x.device(), ", got ",
                  Describe(dbias));
    }
    CastTransposeCuda(x, scale_p, sat, y, yt, scale_inv_p, amax_p, dbias);
    return;
  }
  const int64_t n = x.numel();
  DispatchQuantizeInput(x.dtype(), "quantize (CUDA)", [&]<typename T>() {
    DispatchFp8(fp8, "quantize (CUDA)", [&]<typename F8>() {
      LaunchQuantizeMapped(ctx, x.data<T>(), y.data<F8>(), n, scale_p, sat, scale_inv_p, amax_p, WidenToFloat<T>{},
                           "QuantizeKernel");
    });
  });
}

void DequantizeCuda(const Tensor& x, const Tensor& scale_inv, const Tensor& y) {
  CheckCudaContiguous("dequantize (CUDA)", x, "x");
  CheckCudaContiguous("dequantize (CUDA)", y, "y");
  OCTET_CHECK(x.numel() == y.numel() && x.device() == y.device(), "dequantize (CUDA): x ", Describe(x), " and y ",
              Describe(y), " must have the same numel and device");
  const float* si = ScalarPtr("dequantize (CUDA)", scale_inv, "scale_inv", x.device());
  if (x.numel() == 0) return;
  KernelContext ctx(x.device());
  DispatchFp8(x.dtype(), "dequantize (CUDA)", [&]<typename F8>() {
    DispatchFloat(y.dtype(), "dequantize (CUDA)", [&]<typename T>() {
      DequantizeKernel<F8, T>
          <<<ctx.Grid(x.numel()), kElementwiseThreads, 0, ctx.stream()>>>(x.data<F8>(), y.data<T>(), x.numel(), si);
      OCTET_CUDA_LAUNCH_CHECK("DequantizeKernel");
    });
  });
}

void AmaxCuda(const Tensor& x, const Tensor& amax) {
  CheckCudaContiguous("amax (CUDA)", x, "x");
  float* amax_p = ScalarPtr("amax (CUDA)", amax, "amax", x.device());
  KernelContext ctx(x.device());
  ZeroAmax(amax_p, ctx.stream());
  if (x.numel() == 0) return;
  DispatchQuantizeInput(x.dtype(), "amax (CUDA)", [&]<typename T>() {
    AmaxKernel<T><<<ctx.Grid(x.numel()), kElementwiseThreads, 0, ctx.stream()>>>(x.data<T>(), x.numel(), amax_p);
    OCTET_CUDA_LAUNCH_CHECK("AmaxKernel");
  });
}

void DelayedScalingUpdateCuda(int device, const std::vector<DelayedScalingSlotRef>& slots,
                              const DelayedScalingConfig& config) {
  if (slots.empty()) return;
  for (size_t i = 0; i < slots.size(); ++i) {
    const DelayedScalingSlotRef& s = slots[i];
    OCTET_CHECK(s.history != nullptr && s.amax != nullptr && s.scale != nullptr && s.scale_inv != nullptr &&
                    s.length >= 1 && s.fp8_max > 0.0f,
                "DelayedScalingUpdateCuda: slot ", i, " is incomplete (null pointer, history length ", s.length,
                " or fp8_max ", s.fp8_max, ")");
  }
  KernelContext ctx(Device(DeviceType::kCUDA, device));
  for (size_t begin = 0; begin < slots.size(); begin += kDelayedScalingSlotsPerLaunch) {
    SlotBatch batch{};
    batch.count = static_cast<int>(std::min<size_t>(kDelayedScalingSlotsPerLaunch, slots.size() - begin));
    for (int i = 0; i < batch.count; ++i) batch.slots[i] = slots[begin + i];
    const int threads = 128;
    const unsigned grid = static_cast<unsigned>((batch.count + threads - 1) / threads);
    DelayedScalingKernel<<<grid, threads, 0, ctx.stream()>>>(batch, config);
    OCTET_CUDA_LAUNCH_CHECK("DelayedScalingKernel");
  }
}


void DelayedScalingBuffersUpdateCuda(int device, const DelayedScalingBuffers& b, const DelayedScalingConfig& config) {
  if (b.slots == 0) return;
  OCTET_CHECK(b.history != nullptr && b.amax != nullptr && b.scale != nullptr && b.scale_inv != nullptr &&
                  b.fp8_max != nullptr && b.algo != nullptr && b.slots > 0 && b.length >= 1,
              "DelayedScalingBuffersUpdateCuda: incomplete buffers (", b.slots, " slots, history length ", b.length,
              ")");
  KernelContext ctx(Device(DeviceType::kCUDA, device));
  const int threads = 128;
  const unsigned grid = static_cast<unsigned>((b.slots + threads - 1) / threads);
  DelayedScalingBuffersKernel<<<grid, threads, 0, ctx.stream()>>>(b, config);
  OCTET_CUDA_LAUNCH_CHECK("DelayedScalingBuffersKernel");
}

void PackMatrixCuda(cudaStream_t stream, const void* src, DType src_dtype, int64_t rows, int64_t cols, int64_t rs,
                    int64_t cs, void* dst, DType dst_dtype, int64_t rows_padded, int64_t cols_padded) {
  OCTET_CHECK(rows_padded >= rows && cols_padded >= cols && rows >= 0 && cols >= 0, "PackMatrixCuda: padded (",
              rows_padded, ",", cols_padded, ") smaller than (", rows, ",", cols, ")");
  if (rows_padded == 0 || cols_padded == 0) return;
  int device = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t tiles = ((rows_padded + kTile - 1) / kTile) * ((cols_padded + kTile - 1) / kTile);
  const unsigned grid = static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(tiles, static_cast<int64_t>(Props(device).sm_count) * kBlocksPerSm)));
  const bool row_fast = cs != 1 && rs == 1;
  auto launch = [&]<typename S, typename D>() {
    PackKernel<S, D><<<grid, dim3(kTile, kTileRows), 0, stream>>>(
        static_cast<const S*>(src), rows, cols, rs, cs, static_cast<D*>(dst), rows_padded, cols_padded, row_fast);
    OCTET_CUDA_LAUNCH_CHECK("PackKernel");
  };
  if (src_dtype == dst_dtype) {
    // Bytes are copied as they are (FP8 NaN payloads included).
    switch (SizeOf(src_dtype)) {
      case 1:
        launch.template operator()<uint8_t, uint8_t>();
        return;
      case 2:
        launch.template operator()<uint16_t, uint16_t>();
        return;
      case 4:
        launch.template operator()<uint32_t, uint32_t>();
        return;
      case 8:
        launch.template operator()<uint64_t, uint64_t>();
        return;
    }
  }
  // Raw conversions (no scale): FP8 values are exact in bfloat16/float16/float32.
  Dispatch<DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2>(
      src_dtype, "PackMatrixCuda (source)", [&]<typename S>() {
        Dispatch<DType::kFloat32, DType::kBFloat16, DType::kFloat16>(
            dst_dtype, "PackMatrixCuda (destination)", [&]<typename D>() { launch.template operator()<S, D>(); });
      });
}

void ConvertOutputCuda(cudaStream_t stream, const float* src, int64_t rows, int64_t cols, int64_t lds, void* dst,
                       DType dst_dtype, int64_t ldd, const float* scale, float* amax) {
  OCTET_CHECK(IsFp8(dst_dtype) || (scale == nullptr && amax == nullptr),
              "ConvertOutputCuda: scale/amax are for FP8 outputs only, got ", Name(dst_dtype));
  ZeroAmax(amax, stream);
  int device = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&device));
  const unsigned grid =
      static_cast<unsigned>(GridSize(std::max<int64_t>(rows * cols, 1), kElementwiseThreads, Props(device).sm_count));
  Dispatch<DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2>(
      dst_dtype, "ConvertOutputCuda", [&]<typename D>() {
        ConvertOutputKernel<D>
            <<<grid, kElementwiseThreads, 0, stream>>>(src, rows, cols, lds, static_cast<D*>(dst), ldd, scale, amax);
        OCTET_CUDA_LAUNCH_CHECK("ConvertOutputKernel");
      });
}

void ScaledAlphaBetaCuda(cudaStream_t stream, float alpha, const float* a, const float* b, float beta, float* out) {
  ScaledAlphaBetaKernel<<<1, 32, 0, stream>>>(alpha, a, b, beta, out);
  OCTET_CUDA_LAUNCH_CHECK("ScaledAlphaBetaKernel");
}

OCTET_REGISTER_KERNEL(quantize_kernel, DeviceType::kCUDA, &QuantizeCuda);
OCTET_REGISTER_KERNEL(dequantize_kernel, DeviceType::kCUDA, &DequantizeCuda);
OCTET_REGISTER_KERNEL(amax_kernel, DeviceType::kCUDA, &AmaxCuda);

namespace {
void DelayedScalingBuffersTable(Device device, const DelayedScalingBuffers& b, const DelayedScalingConfig& config) {
  DelayedScalingBuffersUpdateCuda(device.index, b, config);
}
void DelayedScalingUpdateTable(Device device, const std::vector<DelayedScalingSlotPtrs>& slots,
                               const DelayedScalingConfig& config) {
  DelayedScalingUpdateCuda(device.index, slots, config);
}
}  // namespace
OCTET_REGISTER_KERNEL(delayed_scaling_update, DeviceType::kCUDA, &DelayedScalingUpdateTable);
OCTET_REGISTER_KERNEL(delayed_scaling_buffers_update, DeviceType::kCUDA, &DelayedScalingBuffersTable);

}  // namespace octet::cuda
