// CUDA kernels of the random family: Philox (core/philox.h, shared with the
// CPU) with the CPU kernels' counter layout, so a (seed, offset) pair gives
// the same tensor on both backends.
//
// NOTE [cuda random parity]: uniform and integer values and the dropout mask
// are bit-identical to the CPU's; normal values agree to the last bits of
// double math. The double arithmetic is spelled out so that nvcc's FMA
// contraction cannot change it: the CPU build (g++ -O3 -march=x86-64-v3)
// computes the uniform map `a + (b - a) * u` as a separate multiply and add
// (no FMA), hence __dmul_rn/__dadd_rn here, and the normal map
// `a + b * radius * cos(theta)` as fma(b * radius, cos(theta), a), hence the
// explicit fma. tests/cuda/random_parity_test.cc checks these two facts about
// the CPU kernel on any machine. Normal values also go through
// log1p/sqrt/sincos, whose last-bit results may differ between glibc and
// CUDA's libdevice (both within 1-2 ulp in double), so they agree with the
// CPU to ~1e-15 relative before rounding to the output dtype.
#include <octet/core/philox.h>
#include <octet/ops/cuda/kernel_utils.cuh>
#include <octet/ops/random_kernels.h>

namespace octet::cuda {
namespace {

template <typename T>
__global__ void RandomFillKernel(RandomKind kind, T* __restrict__ out, int64_t n, double a, double b, uint64_t seed,
                                 uint64_t offset) {
  const int64_t pairs = (n + 1) / 2;
  for (int64_t j = GlobalThreadId(); j < pairs; j += GridStride()) {
    const Philox4 r = Philox(seed, offset + static_cast<uint64_t>(j));
    const double u1 = UniformDoubleFromBits(r.v[0], r.v[1]);
    const double u2 = UniformDoubleFromBits(r.v[2], r.v[3]);
    double v0, v1;
    if (kind == RandomKind::kNormal) {
      const double radius = sqrt(-2.0 * log1p(-u1));  // 1-u1 in (0, 1]
      const double theta = 6.283185307179586 * u2;
      double s, c;
      sincos(theta, &s, &c);
      v0 = fma(b * radius, c, a);
      v1 = fma(b * radius, s, a);
    } else if (kind == RandomKind::kUniform) {
      v0 = __dadd_rn(a, __dmul_rn(b - a, u1));
      v1 = __dadd_rn(a, __dmul_rn(b - a, u2));
    } else {
      v0 = __dadd_rn(a, floor(__dmul_rn(u1, b - a)));
      v1 = __dadd_rn(a, floor(__dmul_rn(u2, b - a)));
    }
    const int64_t i = 2 * j;
    out[i] = ConvertElement<T>(v0);
    if (i + 1 < n) out[i + 1] = ConvertElement<T>(v1);
  }
}

// Thread j handles elements 4j..4j+3 with Philox counter offset + j; kVec4
// loads and stores them as one access each (pointers aligned, see launcher).
template <typename T, bool kVec4>
__global__ void DropoutKernel(const T* __restrict__ x, T* __restrict__ out, uint8_t* __restrict__ mask, int64_t n,
                              float p, AccType<T> scale, uint64_t seed, uint64_t offset) {
  using A = AccType<T>;
  const int64_t groups = (n + 3) / 4;
  for (int64_t j = GlobalThreadId(); j < groups; j += GridStride()) {
    const Philox4 r = Philox(seed, offset + static_cast<uint64_t>(j));
    const int64_t i0 = 4 * j;
    if (kVec4 && i0 + 3 < n) {
      const VecT<T, 4> xv = reinterpret_cast<const VecT<T, 4>*>(x)[j];
      VecT<T, 4> ov;
      VecT<uint8_t, 4> mv;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const bool keep = UniformFromBits(r.v[k]) >= p;
        ov.v[k] = keep ? ConvertElement<T>(ConvertElement<A>(xv.v[k]) * scale) : ConvertElement<T>(A(0));
        mv.v[k] = keep;
      }
      reinterpret_cast<VecT<T, 4>*>(out)[j] = ov;
      if (mask != nullptr) reinterpret_cast<VecT<uint8_t, 4>*>(mask)[j] = mv;
      continue;
    }
    for (int k = 0; k < 4; ++k) {
      const int64_t i = i0 + k;
      if (i >= n) break;
      const bool keep = UniformFromBits(r.v[k]) >= p;
      out[i] = keep ? ConvertElement<T>(ConvertElement<A>(x[i]) * scale) : ConvertElement<T>(A(0));
      if (mask != nullptr) mask[i] = keep;
    }
  }
}

void RandomFillCuda(RandomKind kind, const Tensor& out, double a, double b, uint64_t seed, uint64_t offset) {
  OCTET_CHECK(out.is_contiguous(), "random fill (cuda): needs a contiguous output, got ", Describe(out));
  KernelContext ctx(out.device());
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64,
           DType::kUInt8>(out.dtype(), "random", [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    RandomFillKernel<T><<<ctx.Grid((n + 1) / 2), kElementwiseThreads, 0, ctx.stream()>>>(kind, out.data<T>(), n, a,
                                                                                         b, seed, offset);
    OCTET_CUDA_LAUNCH_CHECK("random fill");
  });
}

void DropoutCuda(const Tensor& x, const Tensor& out, const Tensor& mask, double p, uint64_t seed, uint64_t offset) {
  OCTET_CHECK(x.is_contiguous() && out.is_contiguous() && (!mask.defined() || mask.is_contiguous()),
              "dropout (cuda): needs contiguous tensors, got x ", Describe(x), ", out ", Describe(out));
  KernelContext ctx(out.device());
  DispatchFloat(x.dtype(), "dropout", [&]<typename T>() {
    using A = AccType<T>;
    const int64_t n = x.numel();
    if (n == 0) return;
    uint8_t* m = mask.defined() ? mask.data<uint8_t>() : nullptr;
    const float pf = static_cast<float>(p);
    const A scale = static_cast<A>(1.0 / (1.0 - p));
    const bool vec4 = Addr(x) % (4 * sizeof(T)) == 0 && Addr(out) % (4 * sizeof(T)) == 0 &&
                      reinterpret_cast<uintptr_t>(m) % 4 == 0;
    const unsigned grid = ctx.Grid((n + 3) / 4);
    if (vec4) {
      DropoutKernel<T, true><<<grid, kElementwiseThreads, 0, ctx.stream()>>>(x.data<T>(), out.data<T>(), m, n, pf,
                                                                             scale, seed, offset);
    } else {
      DropoutKernel<T, false><<<grid, kElementwiseThreads, 0, ctx.stream()>>>(x.data<T>(), out.data<T>(), m, n,
                                                                              pf, scale, seed, offset);
    }
    OCTET_CUDA_LAUNCH_CHECK("dropout");
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(random_fill_kernel, DeviceType::kCUDA, &RandomFillCuda);
OCTET_REGISTER_KERNEL(dropout_kernel, DeviceType::kCUDA, &DropoutCuda);

}  // namespace octet::cuda
