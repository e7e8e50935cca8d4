// CPU kernels compiled twice: for the library's baseline (OCTET_CPU_ARCH,
// x86-64-v3 wherever the CPU runs it) and, on x86-64, for AVX-512 with
// 512-bit vectors. A kernel family writes its arithmetic once as an
// always_inline body, instantiates it in a plain function and in one marked
// OCTET_AVX512_TARGET, and calls the second where UseAvx512Kernels() says so
// (NOTE [pointwise isa dispatch] in ops/cpu/pointwise_cpu.cc). The pointwise,
// norm, softmax / cross-entropy and AdamW kernels do; the attention tiles have
// their own blocking per ISA (NOTE [attention isa dispatch]).
#pragma once

#include <octet/core/convert.h>

#if defined(__x86_64__)
#define OCTET_CPU_AVX512_BUILD 1
#define OCTET_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")))
#else
#define OCTET_CPU_AVX512_BUILD 0
#endif

namespace octet::cpu {

// Whether to run the AVX-512 builds: the converters' choice
// (ActiveConverterIsa().avx512: AVX-512 F/BW/DQ/VL present and
// OCTET_DISABLE_AVX512 unset; tests switch it with SetConverterIsaForTesting).
inline bool UseAvx512Kernels() {
#if OCTET_CPU_AVX512_BUILD
  return internal::ActiveConverterIsa().avx512;
#else
  return false;
#endif
}

}  // namespace octet::cpu
