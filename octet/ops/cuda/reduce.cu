// CUDA reductions (sum / max / min / absmax over any dims, argmax along one
// dim). The plan (ops/cuda/launch_math.h, PlanReduce) views a contiguous
// input as [outer, r, inner] and reduces r:
//  - inner == 1 (reduced dims innermost): one warp per row for short rows,
//    one block per row otherwise; warp-shuffle then shared-memory reduction;
//  - inner > 1 (e.g. bias gradients, [R, C] -> [C]): 32 columns per block,
//    16 rows of threads striding down r, then a shared-memory reduction;
//  - anything else is first copied to [kept..., reduced...] (the copy kernel).
// When there are too few outputs to fill the GPU, each reduction is split
// into pieces whose partial results (in the accumulation type) are combined
// by a second launch of the same kernels: deterministic, no atomics.
// bf16/f16 accumulate in f32, f64 in f64; NaN propagates through max/min/absmax.
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/reduce_kernels.h>

namespace octet::cuda {
namespace {

template <typename A>
struct SumR {
  __device__ static A Init() { return A(0); }
  __device__ static A Step(A acc, A v) { return acc + v; }
  __device__ static A Merge(A a, A b) { return a + b; }
};
template <typename A>
struct MaxR {
  __device__ static A Init() { return -std::numeric_limits<A>::infinity(); }
  __device__ static A Step(A acc, A v) { return (v > acc || v != v) ? v : acc; }
  __device__ static A Merge(A a, A b) { return Step(a, b); }
};
template <typename A>
struct MinR {
  __device__ static A Init() { return std::numeric_limits<A>::infinity(); }
  __device__ static A Step(A acc, A v) { return (v < acc || v != v) ? v : acc; }
  __device__ static A Merge(A a, A b) { return Step(a, b); }
};
template <typename A>
struct AbsMaxR {
  __device__ static A Init() { return A(0); }
  __device__ static A Step(A acc, A v) {
    const A a = v < A(0) ? -v : v;
    return (a > acc || a != a) ? a : acc;
  }
  __device__ static A Merge(A a, A b) { return (b > a || b != b) ? b : a; }
};

template <typename R>
struct MergeFn {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return R::Merge(a, b);
  }
};

// kMerge: the input holds partial results of a first pass (combine them with
// Merge instead of Step).
template <typename R, bool kMerge, typename A, typename In>
__device__ __forceinline__ A Accumulate(A acc, In v) {
  if constexpr (kMerge) {
    return R::Merge(acc, static_cast<A>(v));
  } else {
    return R::Step(acc, ConvertElement<A>(v));
  }
}

// [rows, n] -> rows; one warp per row (n <= kWarpRowLimit).
template <typename R, bool kMerge, typename A, typename In, typename Out>
__global__ void ReduceRowsWarpKernel(const In* __restrict__ x, Out* __restrict__ out, int64_t rows, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x >> 5;
  for (int64_t row = blockIdx.x * warps_per_block + (threadIdx.x >> 5); row < rows;
       row += static_cast<int64_t>(gridDim.x) * warps_per_block) {
    const In* p = x + row * n;
    A acc = R::Init();
    for (int64_t i = lane; i < n; i += 32) acc = Accumulate<R, kMerge>(acc, p[i]);
    acc = WarpAllReduce(acc, MergeFn<R>{});
    if (lane == 0) out[row] = ConvertElement<Out>(acc);
  }
}

// [rows, n] -> [rows, splits]; one block per (row, split).
template <typename R, bool kMerge, typename A, typename In, typename Out>
__global__ void ReduceRowsBlockKernel(const In* __restrict__ x, Out* __restrict__ out, int64_t rows, int64_t n,
                                      int64_t splits) {
  __shared__ A shared[32];
  const int64_t chunk = (n + splits - 1) / splits;
  for (int64_t task = blockIdx.x; task < rows * splits; task += gridDim.x) {
    const int64_t row = task / splits, split = task % splits;
    const int64_t begin = split * chunk, end = begin + chunk < n ? begin + chunk : n;
    const In* p = x + row * n;
    A acc = R::Init();
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc = Accumulate<R, kMerge>(acc, p[i]);
    acc = BlockAllReduce(acc, MergeFn<R>{}, R::Init(), shared);
    if (threadIdx.x == 0) out[task] = ConvertElement<Out>(acc);
  }
}

// [outer, r, inner] -> [outer, splits, inner]; a block of (32, 16) threads
// per (outer index, split, 32-column tile).
template <typename R, bool kMerge, typename A, typename In, typename Out>
__global__ void ReduceColumnsKernel(const In* __restrict__ x, Out* __restrict__ out, int64_t outer, int64_t r,
                                    int64_t inner, int64_t splits) {
  __shared__ A tile[kColumnTileY][kColumnTileX + 1];
  const int64_t col_tiles = (inner + kColumnTileX - 1) / kColumnTileX;
  const int64_t chunk = (r + splits - 1) / splits;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t task = blockIdx.x; task < outer * splits * col_tiles; task += gridDim.x) {
    const int64_t tile_idx = task % col_tiles, rest = task / col_tiles;
    const int64_t split = rest % splits, o = rest / splits;
    const int64_t col = tile_idx * kColumnTileX + tx;
    const int64_t begin = split * chunk, end = begin + chunk < r ? begin + chunk : r;
    A acc = R::Init();
    if (col < inner) {
      const In* p = x + o * r * inner + col;
      for (int64_t i = begin + ty; i < end; i += kColumnTileY) acc = Accumulate<R, kMerge>(acc, p[i * inner]);
    }
    tile[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && col < inner) {
      A v = tile[0][tx];
#pragma unroll
      for (int y = 1; y < kColumnTileY; ++y) v = R::Merge(v, tile[y][tx]);
      out[(o * splits + split) * inner + col] = ConvertElement<Out>(v);
    }
    __syncthreads();
  }
}

template <typename R, bool kMerge, typename A, typename In, typename Out>
void RowsPass(const KernelContext& ctx, const In* x, Out* out, int64_t rows, int64_t n, int64_t splits) {
  if (n <= kWarpRowLimit && splits == 1) {
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((rows + kThreads / 32 - 1) / (kThreads / 32),
                                             static_cast<int64_t>(ctx.sm_count()) * kBlocksPerSm);
    ReduceRowsWarpKernel<R, kMerge, A><<<static_cast<unsigned>(std::max<int64_t>(blocks, 1)), kThreads, 0,
                                         ctx.stream()>>>(x, out, rows, n);
    OCTET_CUDA_LAUNCH_CHECK("reduce rows (warp)");
    return;
  }
  const int64_t blocks = std::min<int64_t>(rows * splits, static_cast<int64_t>(ctx.sm_count()) * kBlocksPerSm * 4);
  ReduceRowsBlockKernel<R, kMerge, A><<<static_cast<unsigned>(blocks), kReduceThreads, 0, ctx.stream()>>>(
      x, out, rows, n, splits);
  OCTET_CUDA_LAUNCH_CHECK("reduce rows (block)");
}

template <typename R, bool kMerge, typename A, typename In, typename Out>
void ColumnsPass(const KernelContext& ctx, const In* x, Out* out, int64_t outer, int64_t r, int64_t inner,
                 int64_t splits) {
  const int64_t tasks = outer * splits * ((inner + kColumnTileX - 1) / kColumnTileX);
  const int64_t blocks = std::min<int64_t>(tasks, static_cast<int64_t>(ctx.sm_count()) * kBlocksPerSm * 4);
  ReduceColumnsKernel<R, kMerge, A><<<static_cast<unsigned>(blocks), dim3(kColumnTileX, kColumnTileY), 0,
                                      ctx.stream()>>>(x, out, outer, r, inner, splits);
  OCTET_CUDA_LAUNCH_CHECK("reduce columns");
}

template <typename R, typename T>
void ReduceTyped(const KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out) {
  using A = AccType<T>;
  const ReducePlan plan = PlanReduce(x.shape(), x.is_contiguous(), reduced);
  const Tensor src = plan.kind == ReducePlan::kPermute ? x.Permute(plan.perm).Contiguous() : x;
  const T* xp = src.data<T>();
  T* op = out.data<T>();
  const TensorOptions partial_opts{.dtype = DTypeOf<A>::value, .device = x.device()};
  if (plan.inner == 1) {
    const int64_t splits =
        plan.r <= kWarpRowLimit ? 1 : ChooseSplits(plan.outer, plan.r, ctx.sm_count(), kMinElementsPerSplit);
    if (splits == 1) return RowsPass<R, false, A>(ctx, xp, op, plan.outer, plan.r, 1);
    const Tensor partial = Empty({plan.outer, splits}, partial_opts);  // (outer, splits)
    RowsPass<R, false, A>(ctx, xp, partial.data<A>(), plan.outer, plan.r, splits);
    return RowsPass<R, true, A>(ctx, partial.data<A>(), op, plan.outer, splits, 1);
  }
  const int64_t col_blocks = plan.outer * ((plan.inner + kColumnTileX - 1) / kColumnTileX);
  const int64_t splits = ChooseSplits(col_blocks, plan.r, ctx.sm_count(), kMinRowsPerSplit);
  if (splits == 1) return ColumnsPass<R, false, A>(ctx, xp, op, plan.outer, plan.r, plan.inner, 1);
  const Tensor partial = Empty({plan.outer, splits, plan.inner}, partial_opts);  // (outer, splits, inner)
  ColumnsPass<R, false, A>(ctx, xp, partial.data<A>(), plan.outer, plan.r, plan.inner, splits);
  ColumnsPass<R, true, A>(ctx, partial.data<A>(), op, plan.outer, splits, plan.inner, 1);
}

void ReduceCuda(ReduceOp op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out) {
  KernelContext ctx(x.device());
  if (x.numel() == 0) return;
  DispatchFloat(x.dtype(), "reduce", [&]<typename T>() {
    using A = AccType<T>;
    switch (op) {
      case ReduceOp::kSum: return ReduceTyped<SumR<A>, T>(ctx, x, reduced, out);
      case ReduceOp::kMax: return ReduceTyped<MaxR<A>, T>(ctx, x, reduced, out);
      case ReduceOp::kMin: return ReduceTyped<MinR<A>, T>(ctx, x, reduced, out);
      case ReduceOp::kAbsMax: return ReduceTyped<AbsMaxR<A>, T>(ctx, x, reduced, out);
    }
  });
}

// ---- argmax ------------------------------------------------------------------------

// Folds candidate (v2, i2) into (v, i): the larger value wins, NaN beats
// everything, ties go to the smaller index (so the result is the first
// maximum, or the first NaN, like the CPU kernel).
template <typename A>
__device__ __forceinline__ void ArgMaxFold(A& v, int64_t& i, A v2, int64_t i2) {
  const bool nan1 = v != v, nan2 = v2 != v2;
  const bool take = (nan1 || nan2) ? (nan2 && (!nan1 || i2 < i)) : (v2 > v || (v2 == v && i2 < i));
  if (take) {
    v = v2;
    i = i2;
  }
}

template <typename A>
__device__ __forceinline__ A ArgMaxInit() {
  if constexpr (std::numeric_limits<A>::has_infinity) {
    return -std::numeric_limits<A>::infinity();
  } else {
    return std::numeric_limits<A>::lowest();
  }
}

template <typename A>
__device__ __forceinline__ void WarpArgMax(A& v, int64_t& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A v2 = __shfl_xor_sync(kFullMask, v, o);
    const int64_t i2 = __shfl_xor_sync(kFullMask, i, o);
    ArgMaxFold(v, i, v2, i2);
  }
}

// [rows, n] -> rows (int64). kBlock: one block per row, else one warp per row.
template <typename T, bool kBlock>
__global__ void ArgMaxKernel(const T* __restrict__ x, int64_t* __restrict__ out, int64_t rows, int64_t n) {
  using A = AccType<T>;
  __shared__ A sv[32];
  __shared__ int64_t si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t units_per_block = kBlock ? 1 : (blockDim.x >> 5);
  const int64_t unit = kBlock ? 0 : warp;
  const int step = kBlock ? blockDim.x : 32;
  const int start = kBlock ? threadIdx.x : lane;
  for (int64_t row = blockIdx.x * units_per_block + unit; row < rows;
       row += static_cast<int64_t>(gridDim.x) * units_per_block) {
    const T* p = x + row * n;
    A v = ArgMaxInit<A>();
    int64_t idx = INT64_MAX;
    for (int64_t j = start; j < n; j += step) ArgMaxFold(v, idx, ConvertElement<A>(p[j]), j);
    WarpArgMax(v, idx);
    if constexpr (kBlock) {
      if (lane == 0) {
        sv[warp] = v;
        si[warp] = idx;
      }
      __syncthreads();
      const int nwarps = blockDim.x >> 5;
      v = lane < nwarps ? sv[lane] : ArgMaxInit<A>();
      idx = lane < nwarps ? si[lane] : INT64_MAX;
      WarpArgMax(v, idx);
      __syncthreads();
      if (threadIdx.x == 0) out[row] = idx;
    } else {
      if (lane == 0) out[row] = idx;
    }
  }
}

void ArgMaxCuda(const Tensor& x, int64_t dim, const Tensor& out) {
  KernelContext ctx(x.device());
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64>(
      x.dtype(), "argmax", [&]<typename T>() {
        const int64_t n = x.shape()[dim];
        if (x.numel() == 0 || n == 0) return;
        // Move `dim` last and make rows contiguous.
        Shape perm;
        for (int64_t d = 0; d < x.dim(); ++d)
          if (d != dim) perm.push_back(d);
        perm.push_back(dim);
        const Tensor y = x.Permute(perm).Contiguous();
        const int64_t rows = x.numel() / n;
        const int64_t cap = static_cast<int64_t>(ctx.sm_count()) * kBlocksPerSm * 4;
        if (n <= kWarpRowLimit) {
          constexpr int kThreads = 256;
          const int64_t blocks = std::min<int64_t>((rows + kThreads / 32 - 1) / (kThreads / 32), cap);
          ArgMaxKernel<T, false><<<static_cast<unsigned>(blocks), kThreads, 0, ctx.stream()>>>(
              y.data<T>(), out.data<int64_t>(), rows, n);
        } else {
          ArgMaxKernel<T, true><<<static_cast<unsigned>(std::min(rows, cap)), kReduceThreads, 0, ctx.stream()>>>(
              y.data<T>(), out.data<int64_t>(), rows, n);
        }
        OCTET_CUDA_LAUNCH_CHECK("argmax");
      });
}

}  // namespace

OCTET_REGISTER_KERNEL(reduce_kernel, DeviceType::kCUDA, &ReduceCuda);
OCTET_REGISTER_KERNEL(argmax_kernel, DeviceType::kCUDA, &ArgMaxCuda);

}  // namespace octet::cuda
