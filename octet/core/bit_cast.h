// Host/device float <-> uint32 bit casts shared by the element types
// (float8.h, float16.h, bfloat16.h).
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

namespace octet::detail {

OCTET_HOST_DEVICE OCTET_INLINE uint32_t FloatAsBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

OCTET_HOST_DEVICE OCTET_INLINE float BitsAsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

}  // namespace octet::detail
