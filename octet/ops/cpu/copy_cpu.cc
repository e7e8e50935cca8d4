// CPU copy (with dtype conversion) and fill.
#include <cstring>

#include <octet/core/convert.h>
#include <octet/core/dtype_traits.h>
#include <octet/ops/copy_kernels.h>
#include <octet/ops/cpu/loops.h>

namespace octet::cpu {
namespace {

template <typename To, typename From>
void CopyTyped(const Tensor& src, const Tensor& dst) {
  StridedIter<2> it(dst.shape(), {&dst, &src});
  it.Run([](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    if constexpr (std::is_same_v<To, From>) {
      if (s[0] == sizeof(To) && s[1] == sizeof(From)) {
        std::memcpy(p[0], p[1], n * sizeof(To));
        return;
      }
    }
    if (s[0] == sizeof(To) && s[1] == sizeof(From)) {
      // Vectorised row converters for the common float <-> 16-bit pairs.
      if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>) {
        return FloatToBf16Row(reinterpret_cast<const float*>(p[1]), reinterpret_cast<uint16_t*>(p[0]), n);
      } else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>) {
        return Bf16ToFloatRow(reinterpret_cast<const uint16_t*>(p[1]), reinterpret_cast<float*>(p[0]), n);
      } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, float16>) {
        return FloatToF16Row(reinterpret_cast<const float*>(p[1]), reinterpret_cast<uint16_t*>(p[0]), n);
      } else if constexpr (std::is_same_v<From, float16> && std::is_same_v<To, float>) {
        return F16ToFloatRow(reinterpret_cast<const uint16_t*>(p[1]), reinterpret_cast<float*>(p[0]), n);
      }
      const From* a = reinterpret_cast<const From*>(p[1]);
      To* o = reinterpret_cast<To*>(p[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = ConvertElement<To>(a[i]);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<To*>(p[0] + i * s[0]) = ConvertElement<To>(*reinterpret_cast<const From*>(p[1] + i * s[1]));
  });
}

void CopyCpu(const Tensor& src, const Tensor& dst) {
  DispatchAll(dst.dtype(), "copy", [&]<typename To>() {
    DispatchAll(src.dtype(), "copy", [&]<typename From>() { CopyTyped<To, From>(src, dst); });
  });
}

void FillCpu(const Tensor& dst, double value) {
  DispatchAll(dst.dtype(), "fill", [&]<typename T>() {
    const T v = ConvertElement<T>(value);
    StridedIter<1> it(dst.shape(), {&dst});
    it.Run([&](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

}  // namespace

OCTET_REGISTER_KERNEL(copy_kernel, DeviceType::kCPU, &CopyCpu);
OCTET_REGISTER_KERNEL(fill_kernel, DeviceType::kCPU, &FillCpu);

}  // namespace octet::cpu
