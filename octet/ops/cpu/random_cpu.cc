// CPU kernels of the random family (Philox, see core/philox.h).
#include <cmath>

#include <octet/core/dtype_traits.h>
#include <octet/core/philox.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/random_kernels.h>

namespace octet::cpu {
namespace {

void RandomFillCpu(RandomKind kind, const Tensor& out, double a, double b, uint64_t seed, uint64_t offset) {
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64,
           DType::kUInt8>(out.dtype(), "random", [&]<typename T>() {
    T* o = out.data<T>();
    const int64_t n = out.numel();
    const int64_t pairs = (n + 1) / 2;
    ParallelFor(pairs, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        const Philox4 r = Philox(seed, offset + j);
        const double u1 = UniformDoubleFromBits(r.v[0], r.v[1]);
        const double u2 = UniformDoubleFromBits(r.v[2], r.v[3]);
        double v[2];
        if (kind == RandomKind::kNormal) {
          const double radius = std::sqrt(-2.0 * std::log1p(-u1));  // 1-u1 in (0, 1]
          const double theta = 6.283185307179586 * u2;
          v[0] = a + b * radius * std::cos(theta);
          v[1] = a + b * radius * std::sin(theta);
        } else if (kind == RandomKind::kUniform) {
          v[0] = a + (b - a) * u1;
          v[1] = a + (b - a) * u2;
        } else {
          v[0] = a + std::floor(u1 * (b - a));
          v[1] = a + std::floor(u2 * (b - a));
        }
        for (int k = 0; k < 2; ++k) {
          const int64_t i = 2 * j + k;
          if (i < n) o[i] = ConvertElement<T>(v[k]);
        }
      }
    });
  });
}

void DropoutCpu(const Tensor& x, const Tensor& out, const Tensor& mask, double p, uint64_t seed, uint64_t offset) {
  DispatchFloat(x.dtype(), "dropout", [&]<typename T>() {
    using A = AccType<T>;
    const T* xp = x.data<T>();
    T* o = out.data<T>();
    uint8_t* m = mask.defined() ? mask.data<uint8_t>() : nullptr;
    const int64_t n = x.numel();
    const float pf = static_cast<float>(p);
    const A scale = static_cast<A>(1.0 / (1.0 - p));
    ParallelFor((n + 3) / 4, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        const Philox4 r = Philox(seed, offset + j);
        for (int k = 0; k < 4; ++k) {
          const int64_t i = 4 * j + k;
          if (i >= n) break;
          const bool keep = UniformFromBits(r.v[k]) >= pf;
          o[i] = keep ? ConvertElement<T>(ConvertElement<A>(xp[i]) * scale) : ConvertElement<T>(A(0));
          if (m) m[i] = keep;
        }
      }
    });
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(random_fill_kernel, DeviceType::kCPU, &RandomFillCpu);
OCTET_REGISTER_KERNEL(dropout_kernel, DeviceType::kCPU, &DropoutCpu);

}  // namespace octet::cpu
