// Portability macros shared by host and device code.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#if defined(__CUDACC__)
#define OCTET_HOST_DEVICE __host__ __device__
#define OCTET_DEVICE __device__
#else
#define OCTET_HOST_DEVICE
#define OCTET_DEVICE
#endif

#define OCTET_INLINE inline __attribute__((always_inline))

#if defined(__GNUC__)
#define OCTET_LIKELY(x) __builtin_expect(!!(x), 1)
#define OCTET_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define OCTET_LIKELY(x) (x)
#define OCTET_UNLIKELY(x) (x)
#endif
