// CPU kernels compiled twice: for the library's baseline (OCTET_CPU_ARCH,
// x86-64-v3 wherever the CPU runs it) and, on x86-64, for AVX-512 with
// 512-bit vectors. A kernel family writes its arithmetic once as an
// always_inline body and runs IsaBuild<&Body<...>>(): IsaBuilds instantiates
// the body in a plain function and in one marked OCTET_AVX512_TARGET, and
// IsaBuild returns the second where UseAvx512Kernels() says so (NOTE
// [pointwise isa dispatch] in ops/cpu/pointwise_cpu.cc). The pointwise, norm,
// softmax / cross-entropy and AdamW kernels do; the attention tiles have
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

// The two builds of kBody, a pointer to an always_inline function: each is
// a plain call of it, which the compiler inlines and compiles for the
// enclosing function's target (the AVX-512 build's vectors are 512 bits:
// `objdump -d liboctet_internal.so` shows zmm registers in the Avx512
// members and no call of the body).
template <auto kBody>
struct IsaBuilds;
template <typename R, typename... Args, R (*kBody)(Args...)>
struct IsaBuilds<kBody> {
  using Fn = R (*)(Args...);
  static R Base(Args... args) { return kBody(args...); }
#if OCTET_CPU_AVX512_BUILD
  OCTET_AVX512_TARGET static R Avx512(Args... args) { return kBody(args...); }
#endif
};

// The build of kBody to run on this CPU (UseAvx512Kernels()).
template <auto kBody>
auto IsaBuild() -> typename IsaBuilds<kBody>::Fn {
#if OCTET_CPU_AVX512_BUILD
  if (UseAvx512Kernels()) return &IsaBuilds<kBody>::Avx512;
#endif
  return &IsaBuilds<kBody>::Base;
}

}  // namespace octet::cpu
