// CPU kernels of the multi-tensor family (ops/multi_tensor_kernels.h): the
// global L2 norm of a list of tensors in float64 over fixed blocks (so the
// result does not depend on the thread count), and clipping in place.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <octet/core/dtype_traits.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/multi_tensor_kernels.h>

namespace octet::cpu {
namespace {

constexpr int64_t kBlock = 16384;  // fixed blocks: a thread-count independent sum

// Sum of squares of one tensor in f64: blocks in parallel, added in order.
double SumSquares(const Tensor& t) {
  const Tensor g = t.Contiguous();
  const int64_t n = g.numel();
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(nblocks, 0.0);
  DispatchFloat(g.dtype(), "multi_tensor_l2_norm", [&]<typename T>() {
    const T* x = g.data<T>();
    ParallelFor(nblocks, 2, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        // Lane-split (row_helpers.h): one chain of dependent f64 adds ran at
        // ~1 element per 4 cycles, 11 ms of a 220 ms step for the 14.5M
        // gradients of octet_train_step_bench's wide GPT on a Zen 5.
        const T* xb = x + b * kBlock;
        partial[b] = LaneSum<double>(std::min(n - b * kBlock, kBlock), [&](int64_t i) {
          const double v = ConvertElement<double>(xb[i]);
          return v * v;
        });
      }
    });
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void CheckNorm(const char* op, const Tensor& norm) {
  OCTET_CHECK(norm.defined() && norm.dtype() == DType::kFloat64 && norm.numel() == 1 && norm.device().is_cpu(), op,
              ": norm must be a float64 CPU tensor with one element, got ", norm.defined() ? Describe(norm) : "none");
}

void L2NormCpu(const TensorList& xs, const Tensor& norm) {
  CheckNorm("multi_tensor_l2_norm", norm);
  double total = 0.0;
  for (const Tensor& x : xs) {
    OCTET_CHECK(x.device().is_cpu() && IsUnscaledFloat(x.dtype()), "multi_tensor_l2_norm: expects float CPU tensors, got ",
                Describe(x));
    total += SumSquares(x);
  }
  *norm.data<double>() = std::sqrt(total);
}

void ClipScaleCpu(const TensorList& xs, const Tensor& norm, double max_norm, double eps) {
  CheckNorm("multi_tensor_clip_scale", norm);
  const double total = *norm.data<double>();
  if (!std::isfinite(total)) return;  // NOTE [non-finite gradient norm] in optim/clip.h
  const double coef = max_norm / (total + eps);
  if (!(coef < 1.0)) return;
  for (const Tensor& g : xs) {
    OCTET_CHECK(g.device().is_cpu() && IsUnscaledFloat(g.dtype()) && g.is_contiguous(),
                "multi_tensor_clip_scale: expects contiguous float CPU tensors, got ", Describe(g));
    DispatchFloat(g.dtype(), "multi_tensor_clip_scale", [&]<typename T>() {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const C c = static_cast<C>(coef);
      T* x = g.data<T>();
      ParallelFor(g.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) x[i] = ConvertElement<T>(ConvertElement<C>(x[i]) * c);
      });
    });
  }
}

}  // namespace

OCTET_REGISTER_KERNEL(multi_tensor_l2_norm, DeviceType::kCPU, &L2NormCpu);
OCTET_REGISTER_KERNEL(multi_tensor_clip_scale, DeviceType::kCPU, &ClipScaleCpu);

}  // namespace octet::cpu
