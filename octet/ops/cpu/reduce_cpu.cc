// CPU reductions. Three shapes of work:
//  - reduced dims innermost and contiguous: one independent run per output;
//  - reduced dims outermost of a contiguous tensor ([R, N] -> [N], e.g. bias
//    gradients): rows are added into per-thread column blocks (f32 sums of
//    f32 / bf16 by the kernel the FP8 casts share, ops/cpu/column_sums.h);
//  - anything else: the input is permuted to [kept..., reduced...] and made
//    contiguous first.
// Sums use 16 independent accumulators so the compiler vectorises them
// without reassociating a single chain.
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include <octet/core/dtype_traits.h>
#include <octet/ops/cpu/column_sums.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/reduce_kernels.h>

namespace octet::cpu {
namespace {

template <typename A>
struct SumR {
  static A Init() { return A(0); }
  static A Step(A acc, A v) { return acc + v; }
  static A Merge(A a, A b) { return a + b; }
};
template <typename A>
struct MaxR {
  static A Init() { return -std::numeric_limits<A>::infinity(); }
  static A Step(A acc, A v) { return (v > acc || v != v) ? v : acc; }
  static A Merge(A a, A b) { return Step(a, b); }
};
template <typename A>
struct MinR {
  static A Init() { return std::numeric_limits<A>::infinity(); }
  static A Step(A acc, A v) { return (v < acc || v != v) ? v : acc; }
  static A Merge(A a, A b) { return Step(a, b); }
};
template <typename A>
struct AbsMaxR {
  static A Init() { return A(0); }
  static A Step(A acc, A v) {
    const A a = v < A(0) ? -v : v;
    return (a > acc || a != a) ? a : acc;
  }
  static A Merge(A a, A b) { return (b > a || b != b) ? b : a; }
};

template <typename R, typename T>
AccType<T> ReduceContiguous(const T* p, int64_t n) {
  using A = AccType<T>;
  constexpr int kLanes = 16;
  A acc[kLanes];
  for (A& a : acc) a = R::Init();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = R::Step(acc[l], ConvertElement<A>(p[i + l]));
  A r = R::Init();
  for (int l = 0; l < kLanes; ++l) r = R::Merge(r, acc[l]);
  for (; i < n; ++i) r = R::Step(r, ConvertElement<A>(p[i]));
  return r;
}

// [outer, n] contiguous rows -> outer results.
template <typename R, typename T>
void ReduceRows(const T* x, int64_t outer, int64_t n, T* out) {
  ParallelFor(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) out[o] = ConvertElement<T>(ReduceContiguous<R>(x + o * n, n));
  });
}

// [rows, n] contiguous -> n results (reduce over rows).
template <typename R, typename T>
void ReduceColumns(const T* x, int64_t rows, int64_t n, T* out) {
  using A = AccType<T>;
  if constexpr (std::is_same_v<R, SumR<float>> && (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>)) {
    // f32 sums of f32 or bf16 columns: the shared kernel (NOTE [column sums]).
    if constexpr (std::is_same_v<T, float>) {
      return ColumnSumsF32(x, DType::kFloat32, rows, n, out);
    } else {
      std::vector<float> sums(n);
      ColumnSumsF32(x, DType::kBFloat16, rows, n, sums.data());
      return StoreRow(sums.data(), out, n);
    }
  }
  constexpr int64_t kBlock = 256;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  ParallelFor(nblocks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(rows * kBlock, 1)),
              [&](int64_t b, int64_t e) {
                A acc[kBlock];
                for (int64_t blk = b; blk < e; ++blk) {
                  const int64_t c0 = blk * kBlock, w = std::min(kBlock, n - c0);
                  for (int64_t j = 0; j < w; ++j) acc[j] = R::Init();
                  for (int64_t r = 0; r < rows; ++r) {
                    const T* row = x + r * n + c0;
                    for (int64_t j = 0; j < w; ++j) acc[j] = R::Step(acc[j], ConvertElement<A>(row[j]));
                  }
                  for (int64_t j = 0; j < w; ++j) out[c0 + j] = ConvertElement<T>(acc[j]);
                }
              });
}

template <typename R, typename T>
void ReduceTyped(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out) {
  const int64_t rank = x.dim();
  int64_t kept_n = 1, red_n = 1;
  for (int64_t d = 0; d < rank; ++d) (reduced[d] ? red_n : kept_n) *= x.shape()[d];
  T* o = out.data<T>();
  if (x.is_contiguous()) {
    // Reduced dims form a suffix (ignoring size-1 dims)?
    bool suffix = true, prefix = true, seen_reduced = false, seen_kept = false;
    for (int64_t d = 0; d < rank; ++d) {
      if (x.shape()[d] == 1) continue;
      if (reduced[d]) {
        seen_reduced = true;
        if (seen_kept) prefix = false;
      } else {
        seen_kept = true;
        if (seen_reduced) suffix = false;
      }
    }
    if (suffix) return ReduceRows<R>(x.data<T>(), kept_n, red_n, o);
    if (prefix) return ReduceColumns<R>(x.data<T>(), red_n, kept_n, o);
  }
  // General case: permute to [kept..., reduced...] and copy contiguous.
  Shape perm;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d]) perm.push_back(d);
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d]) perm.push_back(d);
  const Tensor y = x.Permute(perm).Contiguous();
  ReduceRows<R>(y.data<T>(), kept_n, red_n, o);
}

void ReduceCpu(ReduceOp op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out) {
  DispatchFloat(x.dtype(), "reduce", [&]<typename T>() {
    using A = AccType<T>;
    switch (op) {
      case ReduceOp::kSum: return ReduceTyped<SumR<A>, T>(x, reduced, out);
      case ReduceOp::kMax: return ReduceTyped<MaxR<A>, T>(x, reduced, out);
      case ReduceOp::kMin: return ReduceTyped<MinR<A>, T>(x, reduced, out);
      case ReduceOp::kAbsMax: return ReduceTyped<AbsMaxR<A>, T>(x, reduced, out);
    }
  });
}

void ArgMaxCpu(const Tensor& x, int64_t dim, const Tensor& out) {
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64>(
      x.dtype(), "argmax", [&]<typename T>() {
        using A = AccType<T>;
        // Move `dim` last and make rows contiguous.
        Shape perm;
        for (int64_t d = 0; d < x.dim(); ++d)
          if (d != dim) perm.push_back(d);
        perm.push_back(dim);
        const Tensor y = x.Permute(perm).Contiguous();
        const int64_t n = x.shape()[dim], outer = x.numel() / n;
        const T* p = y.data<T>();
        int64_t* o = out.data<int64_t>();
        ParallelFor(outer, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            const T* row = p + r * n;
            int64_t best = 0;
            A bv = ConvertElement<A>(row[0]);
            for (int64_t i = 1; i < n; ++i) {
              const A v = ConvertElement<A>(row[i]);
              if (v > bv || (v != v && bv == bv)) {
                bv = v;
                best = i;
              }
            }
            o[r] = best;
          }
        });
      });
}

}  // namespace

OCTET_REGISTER_KERNEL(reduce_kernel, DeviceType::kCPU, &ReduceCpu);
OCTET_REGISTER_KERNEL(argmax_kernel, DeviceType::kCPU, &ArgMaxCpu);

}  // namespace octet::cpu
