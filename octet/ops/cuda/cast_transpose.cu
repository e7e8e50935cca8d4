// CUDA cast-transpose: x (R, C) -> y = fp8(x * scale) (R, C, optional),
// yt = y transposed (C, R), amax = max|x|, and optionally the column sums
// dbias (C) of x in float32, in one pass over x (ops/cast_kernels.h).
//
// Also the byte transpose of an FP8 matrix (fp8_transpose_kernel,
// ops/cast_kernels.h; TransposeFp8 in ops/cast.h) on the same tiles.
//
// Two kernels: the vectorised one (NOTE [fast cast-transpose] in
// ops/cuda/cast_transpose_tile.h) for R, C multiples of 16 and 16-byte
// aligned pointers, and a generic 32x32-tile kernel for every other shape.
// Both give the bytes of core/float8.h's scalar conversion, as the CPU does.
//
// NOTE [deterministic dbias]: no float atomics. Every tile writes the
// float32 column sums of its rows to a scratch buffer partial (row tiles, C),
// summed inside the tile in a fixed order (each thread its rows in order,
// then the threads' sums in thread order); a second kernel adds the row
// tiles of each column in a fixed order. The result depends only on R, C
// and the path taken, never on scheduling, so it is reproducible run to run.
// It is not bit-identical to the CPU's row-order sum (ops/cpu/cast_cpu.cc).
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include <octet/core/float8.h>
#include <octet/ops/cast_kernels.h>
#include <octet/ops/cuda/cast_cuda.h>
#include <octet/ops/cuda/cast_device.cuh>
#include <octet/ops/cuda/cast_transpose_tile.h>
#include <octet/ops/cuda/kernel_utils.cuh>

namespace octet::cuda {
namespace {

// ---- the vectorised kernel ----------------------------------------------------------------

// Phase 2 of NOTE [fast cast-transpose]: thread tid reads 16 rows x 4 columns
// of the shared byte tile (swizzled), transposes them in registers and
// writes four 16-byte vectors of yt (C, R). R, C multiples of 16.
__device__ __forceinline__ void CtStoreTransposedTile(const uint32_t* tile, uint8_t* __restrict__ yt, int64_t R,
                                                      int64_t C, int64_t r0, int64_t c0, int tid) {
  const int rc = CtTransposeRowChunk(tid), cg = CtTransposeColGroup(tid);
  const int64_t rbase = r0 + rc * kCtChunkRows, cbase = c0 + cg * 4;
  if (rbase >= R || cbase >= C) return;  // R, C multiples of 16: the block is all in or all out
  uint32_t w[kCtChunkRows];
#pragma unroll
  for (int i = 0; i < kCtChunkRows; ++i) {
    const int lr = rc * kCtChunkRows + i;
    w[i] = tile[lr * kCtRowWords + (cg ^ CtSwizzle(lr))];
  }
  uint32_t o[4][4];  // o[column j][word m]: rows 4m..4m+3 of column j
#pragma unroll
  for (int mm = 0; mm < 4; ++mm) {
    const uint32_t in[4] = {w[4 * mm], w[4 * mm + 1], w[4 * mm + 2], w[4 * mm + 3]};
    uint32_t out[4];
    CtTranspose4x4(in, out);
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j][mm] = out[j];
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    *reinterpret_cast<uint4*>(yt + (cbase + j) * R + rbase) = make_uint4(o[j][0], o[j][1], o[j][2], o[j][3]);
}

// One tile of kCtTileRows x kCtTileCols per block (NOTE [fast cast-transpose]).
//   x (R, C) T; y (R, C) FP8 bytes or null; yt (C, R) FP8 bytes;
//   partial (ceil(R / kCtTileRows), C) f32 when kBias.
template <typename T, typename F8, bool kBias>
__global__ void __launch_bounds__(kCtThreads)
    CastTransposeVecKernel(const T* __restrict__ x, uint8_t* __restrict__ y, uint8_t* __restrict__ yt, int64_t R,
                           int64_t C, const float* __restrict__ scale_ptr, Fp8Saturation sat, float* scale_inv,
                           float* amax, float* __restrict__ partial) {
  constexpr int kVin = 16 / static_cast<int>(sizeof(T));
  using L = CtLoad<kVin>;
  using InVec = VecT<T, kVin>;
  using OutVec = VecT<uint8_t, kVin>;
  __shared__ __align__(16) uint32_t tile[kCtTileRows * kCtRowWords];  // 16 KiB of FP8 bytes
  uint8_t* const tile_bytes = reinterpret_cast<uint8_t*>(tile);

  const float scale = *scale_ptr;
  const int tid = threadIdx.x;
  const int64_t tiles_c = (C + kCtTileCols - 1) / kCtTileCols;
  const int64_t tr = blockIdx.x / tiles_c;
  const int64_t r0 = tr * kCtTileRows, c0 = (blockIdx.x % tiles_c) * kCtTileCols;

  // Phase 1: load 16-byte vectors, quantize, bytes into the shared tile.
  float m = 0.0f;
  float colsum[kVin];
#pragma unroll
  for (int j = 0; j < kVin; ++j) colsum[j] = 0.0f;
  const int col = L::Col(tid);
  const bool col_in = c0 + col < C;
  constexpr int kBatch = L::kIters < 8 ? L::kIters : 8;
#pragma unroll 1
  for (int k0 = 0; k0 < L::kIters; k0 += kBatch) {
    InVec v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {  // every load of the batch in flight at once
      const int64_t r = r0 + L::Row(tid, k0 + b);
      if (col_in && r < R) v[b] = *reinterpret_cast<const InVec*>(x + r * C + c0 + col);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int lr = L::Row(tid, k0 + b);
      if (!col_in || r0 + lr >= R) continue;
      OutVec q;
      float f[kVin];
#pragma unroll
      for (int j = 0; j < kVin; ++j) {
        f[j] = ConvertElement<float>(v[b].v[j]);
        m = AbsMaxMerge(m, f[j]);
        if constexpr (kBias) colsum[j] += f[j];
      }
      if (kCtHardwareCvt && sat == Fp8Saturation::kSatFinite) {  // NOTE [hardware fp8 conversion]
#pragma unroll
        for (int j = 0; j < kVin; j += 2) {
          const uint16_t two = Fp8x2SatFinite<F8>(f[j] * scale, f[j + 1] * scale);
          q.v[j] = static_cast<uint8_t>(two & 0xFF);
          q.v[j + 1] = static_cast<uint8_t>(two >> 8);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kVin; ++j) q.v[j] = ToFp8Bits<F8>(f[j] * scale, sat);
      }
      *reinterpret_cast<OutVec*>(tile_bytes + CtSmemByte(lr, col)) = q;
    }
  }
  if constexpr (kBias) {
    // NOTE [deterministic dbias]: threads of one column set, in group order.
    __shared__ float red[L::kRowStep][kCtTileCols];
#pragma unroll
    for (int j = 0; j < kVin; ++j) red[L::Group(tid)][col + j] = colsum[j];
    __syncthreads();
    if (tid < kCtTileCols && c0 + tid < C) {
      float s = 0.0f;
#pragma unroll
      for (int g = 0; g < L::kRowStep; ++g) s += red[g][tid];
      partial[tr * C + c0 + tid] = s;
    }
  }
  __syncthreads();

  // Phase 2: 16 rows x 4 columns per thread, transposed in registers.
  CtStoreTransposedTile(tile, yt, R, C, r0, c0, tid);

  // Phase 3: the row-wise copy, 16 bytes per store.
  if (y != nullptr) {
#pragma unroll
    for (int k = 0; k < kCtStoreIters; ++k) {
      const int lr = CtStoreRow(tid, k), lc = CtStoreCol(tid);
      if (r0 + lr < R && c0 + lc < C)
        *reinterpret_cast<uint4*>(y + (r0 + lr) * C + c0 + lc) =
            *reinterpret_cast<const uint4*>(tile_bytes + CtSmemByte(lr, lc));
    }
  }

  BlockAmaxToGlobal(m, amax);
  if (scale_inv != nullptr && blockIdx.x == 0 && tid == 0) *scale_inv = 1.0f / scale;
}

// ---- the generic kernel -------------------------------------------------------------------

constexpr int kGenTile = 32;
constexpr int kGenTileRows = 8;  // block (32, 8): each thread handles 4 rows of a tile

// x (R,C) -> y (R,C) (optional) and yt (C,R), any R and C. One 32x32 tile per
// block iteration; the transposed write goes through shared memory so both
// the read of x and the write of yt are coalesced. partial (ceil(R/32), C)
// f32 or null: the tile's column sums (NOTE [deterministic dbias]).
template <typename T, typename F8>
__global__ void CastTransposeKernel(const T* __restrict__ x, F8* __restrict__ y, F8* __restrict__ yt, int64_t R,
                                    int64_t C, const float* scale_ptr, Fp8Saturation sat, float* scale_inv,
                                    float* amax, float* __restrict__ partial) {
  __shared__ F8 tile[kGenTile][kGenTile + 1];
  __shared__ float red[kGenTileRows][kGenTile + 1];
  const float scale = *scale_ptr;
  float m = 0.0f;
  const int64_t tiles_c = (C + kGenTile - 1) / kGenTile;
  const int64_t tiles = ((R + kGenTile - 1) / kGenTile) * tiles_c;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t tr = t / tiles_c;
    const int64_t r0 = tr * kGenTile, c0 = (t % tiles_c) * kGenTile;
    float cs = 0.0f;
#pragma unroll
    for (int i = ty; i < kGenTile; i += kGenTileRows) {
      const int64_t r = r0 + i, c = c0 + tx;
      if (r < R && c < C) {
        const float v = ConvertElement<float>(x[r * C + c]);
        m = AbsMaxMerge(m, v);
        cs += v;
        const F8 q = ToFp8<F8>(v * scale, sat);
        if (y != nullptr) y[r * C + c] = q;
        tile[i][tx] = q;
      }
    }
    if (partial != nullptr) red[ty][tx] = cs;
    __syncthreads();
#pragma unroll
    for (int i = ty; i < kGenTile; i += kGenTileRows) {
      const int64_t c = c0 + i, r = r0 + tx;  // yt[c, r] = tile[r - r0][c - c0]
      if (r < R && c < C) yt[c * R + r] = tile[tx][i];
    }
    if (partial != nullptr && ty == 0 && c0 + tx < C) {
      float s = 0.0f;
#pragma unroll
      for (int g = 0; g < kGenTileRows; ++g) s += red[g][tx];
      partial[tr * C + c0 + tx] = s;
    }
    __syncthreads();
  }
  BlockAmaxToGlobal(m, amax);
  if (scale_inv != nullptr && blockIdx.x == 0 && tx == 0 && ty == 0) *scale_inv = 1.0f / scale;
}

// dbias[c] = sum over p of partial[p, c] (NOTE [deterministic dbias]): thread
// (tx, ty) adds rows ty, ty + 8, ... in order, then the 8 sums in ty order.
//   partial (P, C) f32; dbias (C) f32. Block (32, 8), grid ceil(C / 32).
__global__ void ColumnSumKernel(const float* __restrict__ partial, int64_t P, int64_t C, float* __restrict__ dbias) {
  __shared__ float red[8][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  float s = 0.0f;
  if (c < C) {
#pragma unroll 4
    for (int64_t p = ty; p < P; p += 8) s += partial[p * C + c];
  }
  red[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < C) {
    float t = 0.0f;
#pragma unroll
    for (int g = 0; g < 8; ++g) t += red[g][tx];
    dbias[c] = t;
  }
}

// ---- byte transpose (fp8_transpose_kernel) -------------------------------------------------

// yt (C, R) = x (R, C) transposed, byte for byte: the tile of NOTE [fast
// cast-transpose] loaded with 16-byte vectors (no conversion), then phase 2.
// R, C multiples of 16, x and yt 16-byte aligned.
__global__ void __launch_bounds__(kCtThreads)
    TransposeBytesVecKernel(const uint8_t* __restrict__ x, uint8_t* __restrict__ yt, int64_t R, int64_t C) {
  using L = CtLoad<16>;
  __shared__ __align__(16) uint32_t tile[kCtTileRows * kCtRowWords];
  uint8_t* const tile_bytes = reinterpret_cast<uint8_t*>(tile);
  const int tid = threadIdx.x;
  const int64_t tiles_c = (C + kCtTileCols - 1) / kCtTileCols;
  const int64_t r0 = (blockIdx.x / tiles_c) * kCtTileRows, c0 = (blockIdx.x % tiles_c) * kCtTileCols;
  const int col = L::Col(tid);
#pragma unroll
  for (int k = 0; k < L::kIters; ++k) {
    const int lr = L::Row(tid, k);
    if (c0 + col < C && r0 + lr < R)
      *reinterpret_cast<uint4*>(tile_bytes + CtSmemByte(lr, col)) =
          *reinterpret_cast<const uint4*>(x + (r0 + lr) * C + c0 + col);
  }
  __syncthreads();
  CtStoreTransposedTile(tile, yt, R, C, r0, c0, tid);
}

// Any R, C: 32x32 byte tiles through shared memory (coalesced reads of x and
// writes of yt). Block (32, 8).
__global__ void TransposeBytesKernel(const uint8_t* __restrict__ x, uint8_t* __restrict__ yt, int64_t R, int64_t C) {
  __shared__ uint8_t tile[kGenTile][kGenTile + 1];
  const int64_t tiles_c = (C + kGenTile - 1) / kGenTile;
  const int64_t tiles = ((R + kGenTile - 1) / kGenTile) * tiles_c;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kGenTile, c0 = (t % tiles_c) * kGenTile;
#pragma unroll
    for (int i = ty; i < kGenTile; i += kGenTileRows) {
      if (r0 + i < R && c0 + tx < C) tile[i][tx] = x[(r0 + i) * C + c0 + tx];
    }
    __syncthreads();
#pragma unroll
    for (int i = ty; i < kGenTile; i += kGenTileRows) {
      if (c0 + i < C && r0 + tx < R) yt[(c0 + i) * R + r0 + tx] = tile[tx][i];
    }
    __syncthreads();
  }
}

void Fp8TransposeCuda(const Tensor& x, const Tensor& yt) {
  const int64_t R = x.size(0), C = x.size(1);
  if (R == 0 || C == 0) return;
  KernelContext ctx(x.device());
  const uint8_t* xp = static_cast<const uint8_t*>(x.raw_data());
  uint8_t* ytp = static_cast<uint8_t*>(yt.raw_data());
  if (CtFastPathApplies(R, C, Addr(x), Addr(yt), Addr(yt))) {
    const int64_t tiles = CtPartialRows(R, kCtTileRows) * ((C + kCtTileCols - 1) / kCtTileCols);
    OCTET_CHECK(tiles <= static_cast<int64_t>(std::numeric_limits<int32_t>::max()), "transpose_fp8 (CUDA): ",
                Describe(x), " has too many tiles for one launch");
    TransposeBytesVecKernel<<<static_cast<unsigned>(tiles), kCtThreads, 0, ctx.stream()>>>(xp, ytp, R, C);
    OCTET_CUDA_LAUNCH_CHECK("TransposeBytesVecKernel");
  } else {
    const int64_t tiles = ((R + kGenTile - 1) / kGenTile) * ((C + kGenTile - 1) / kGenTile);
    const unsigned grid = static_cast<unsigned>(
        std::max<int64_t>(1, std::min<int64_t>(tiles, static_cast<int64_t>(ctx.sm_count()) * kBlocksPerSm)));
    TransposeBytesKernel<<<grid, dim3(kGenTile, kGenTileRows), 0, ctx.stream()>>>(xp, ytp, R, C);
    OCTET_CUDA_LAUNCH_CHECK("TransposeBytesKernel");
  }
}

}  // namespace

OCTET_REGISTER_KERNEL(fp8_transpose_kernel, DeviceType::kCUDA, &Fp8TransposeCuda);

void CastTransposeCuda(const Tensor& x, const float* scale, Fp8Saturation sat, const Tensor& y, const Tensor& yt,
                       float* scale_inv, float* amax, const Tensor& dbias) {
  const int64_t R = x.size(0), C = x.size(1);
  KernelContext ctx(x.device());
  const cudaStream_t s = ctx.stream();
  const DType fp8 = yt.dtype();
  const bool fast = CtFastPathApplies(R, C, Addr(x), y.defined() ? Addr(y) : 0, Addr(yt));
  float* dbias_p = dbias.defined() ? dbias.data<float>() : nullptr;
  Tensor partial;
  int64_t partial_rows = 0;
  if (dbias_p != nullptr) {
    partial_rows = CtPartialRows(R, fast ? kCtTileRows : kGenTile);
    partial = Empty({std::max<int64_t>(partial_rows, 1), std::max<int64_t>(C, 1)},
                    {.dtype = DType::kFloat32, .device = x.device()});
  }
  float* partial_p = dbias_p != nullptr ? partial.data<float>() : nullptr;
  DispatchQuantizeInput(x.dtype(), "cast_transpose (CUDA)", [&]<typename T>() {
    DispatchFp8(fp8, "cast_transpose (CUDA)", [&]<typename F8>() {
      uint8_t* yp = y.defined() ? static_cast<uint8_t*>(y.raw_data()) : nullptr;
      uint8_t* ytp = static_cast<uint8_t*>(yt.raw_data());
      if (fast) {
        const int64_t tiles = CtPartialRows(R, kCtTileRows) * ((C + kCtTileCols - 1) / kCtTileCols);
        OCTET_CHECK(tiles <= static_cast<int64_t>(std::numeric_limits<int32_t>::max()),
                    "cast_transpose (CUDA): ", Describe(x), " has too many tiles for one launch");
        const unsigned grid = static_cast<unsigned>(tiles);
        if (partial_p != nullptr) {
          CastTransposeVecKernel<T, F8, true>
              <<<grid, kCtThreads, 0, s>>>(x.data<T>(), yp, ytp, R, C, scale, sat, scale_inv, amax, partial_p);
        } else {
          CastTransposeVecKernel<T, F8, false>
              <<<grid, kCtThreads, 0, s>>>(x.data<T>(), yp, ytp, R, C, scale, sat, scale_inv, amax, nullptr);
        }
        OCTET_CUDA_LAUNCH_CHECK("CastTransposeVecKernel");
      } else {
        const int64_t tiles = ((R + kGenTile - 1) / kGenTile) * ((C + kGenTile - 1) / kGenTile);
        const unsigned grid = static_cast<unsigned>(
            std::max<int64_t>(1, std::min<int64_t>(tiles, static_cast<int64_t>(ctx.sm_count()) * kBlocksPerSm)));
        CastTransposeKernel<T, F8><<<grid, dim3(kGenTile, kGenTileRows), 0, s>>>(
            x.data<T>(), reinterpret_cast<F8*>(yp), reinterpret_cast<F8*>(ytp), R, C, scale, sat, scale_inv, amax,
            partial_p);
        OCTET_CUDA_LAUNCH_CHECK("CastTransposeKernel");
      }
    });
  });
  if (dbias_p != nullptr && C > 0) {
    const unsigned grid = static_cast<unsigned>((C + 31) / 32);
    ColumnSumKernel<<<grid, dim3(32, 8), 0, s>>>(partial_p, partial_rows, C, dbias_p);
    OCTET_CUDA_LAUNCH_CHECK("ColumnSumKernel");
  }
}

}  // namespace octet::cuda
