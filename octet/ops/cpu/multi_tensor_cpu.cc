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

// NOTE [multi-tensor one region]: the norm and the clipping each run every
// tensor of the list in one OpenMP region (ParallelJobs in loops.h), not a
// region per tensor: a GPT step clips tens of gradients, and each region
// costs its fork and join (NOTE [fork-join cost] in loops.h; the small GPT
// step opened 18 norm and 14 clip regions a step). The norm's blocks are
// the same fixed blocks, summed in the same order (a tensor's blocks in
// order, then the tensors in order), so the bits do not change. The
// clipping checks every tensor before it looks at the norm, as the CUDA
// kernel's launch plan does (its norm stays on the device), so a bad
// gradient is reported whether or not this step clips.

void CheckNorm(const char* op, const Tensor& norm) {
  OCTET_CHECK(norm.defined() && norm.dtype() == DType::kFloat64 && norm.numel() == 1 && norm.device().is_cpu(), op,
              ": norm must be a float64 CPU tensor with one element, got ", norm.defined() ? Describe(norm) : "none");
}

void L2NormCpu(const TensorList& xs, const Tensor& norm) {
  CheckNorm("multi_tensor_l2_norm", norm);
  std::vector<Tensor> contiguous;  // what the jobs read; kept alive until they ran
  contiguous.reserve(xs.size());
  std::vector<int64_t> first_block(1, 0);  // tensor i's blocks: [first_block[i], first_block[i + 1])
  for (const Tensor& x : xs) {
    OCTET_CHECK(x.device().is_cpu() && IsUnscaledFloat(x.dtype()), "multi_tensor_l2_norm: expects float CPU tensors, got ",
                Describe(x));
    contiguous.push_back(x.Contiguous());
    first_block.push_back(first_block.back() + (x.numel() + kBlock - 1) / kBlock);
  }
  std::vector<double> partial(first_block.back(), 0.0);
  std::vector<RangeJob> jobs;
  jobs.reserve(xs.size());
  for (size_t t = 0; t < contiguous.size(); ++t) {
    const Tensor& g = contiguous[t];
    const int64_t n = g.numel();
    double* out = partial.data() + first_block[t];
    DispatchFloat(g.dtype(), "multi_tensor_l2_norm", [&]<typename T>() {
      const T* x = g.data<T>();
      jobs.push_back({first_block[t + 1] - first_block[t], [x, n, out](int64_t b0, int64_t b1) {
                        for (int64_t b = b0; b < b1; ++b) {
                          // Lane-split (row_helpers.h): one chain of dependent f64 adds ran at
                          // ~1 element per 4 cycles, 11 ms of a 220 ms step for the 14.5M
                          // gradients of octet_train_step_bench's wide GPT on a Zen 5.
                          const T* xb = x + b * kBlock;
                          out[b] = LaneSum<double>(std::min(n - b * kBlock, kBlock), [&](int64_t i) {
                            const double v = ConvertElement<double>(xb[i]);
                            return v * v;
                          });
                        }
                      }});
    });
  }
  ParallelJobs(jobs, 2);
  double total = 0.0;
  for (size_t t = 0; t < contiguous.size(); ++t) {
    double sum = 0.0;
    for (int64_t b = first_block[t]; b < first_block[t + 1]; ++b) sum += partial[b];
    total += sum;
  }
  *norm.data<double>() = std::sqrt(total);
}

void ClipScaleCpu(const TensorList& xs, const Tensor& norm, double max_norm, double eps) {
  CheckNorm("multi_tensor_clip_scale", norm);
  for (const Tensor& g : xs) {
    OCTET_CHECK(g.device().is_cpu() && IsUnscaledFloat(g.dtype()) && g.is_contiguous(),
                "multi_tensor_clip_scale: expects contiguous float CPU tensors, got ", Describe(g));
  }
  const double total = *norm.data<double>();
  if (!std::isfinite(total)) return;  // NOTE [non-finite gradient norm] in optim/clip.h
  const double coef = max_norm / (total + eps);
  if (!(coef < 1.0)) return;
  std::vector<RangeJob> jobs;
  jobs.reserve(xs.size());
  for (const Tensor& g : xs) {
    DispatchFloat(g.dtype(), "multi_tensor_clip_scale", [&]<typename T>() {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const C c = static_cast<C>(coef);
      T* x = g.data<T>();
      jobs.push_back({g.numel(), [x, c](int64_t begin, int64_t end) {
                        for (int64_t i = begin; i < end; ++i) x[i] = ConvertElement<T>(ConvertElement<C>(x[i]) * c);
                      }});
    });
  }
  ParallelJobs(jobs, kParallelGrain);
}

}  // namespace

OCTET_REGISTER_KERNEL(multi_tensor_l2_norm, DeviceType::kCPU, &L2NormCpu);
OCTET_REGISTER_KERNEL(multi_tensor_clip_scale, DeviceType::kCPU, &ClipScaleCpu);

}  // namespace octet::cpu
