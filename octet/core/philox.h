// Philox4x32-10 counter-based random numbers (Salmon et al., SC'11), written
// once for host and device. A (seed, counter) pair maps to four independent
// 32-bit words, so element i of a random tensor depends only on
// (seed, offset + i/4) — the same values on any thread count and on the GPU.
#pragma once

#include <cstdint>

#include <octet/core/macros.h>

namespace octet {

struct Philox4 {
  uint32_t v[4];
};

OCTET_HOST_DEVICE inline uint32_t MulHiLo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

OCTET_HOST_DEVICE inline Philox4 Philox(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = MulHiLo(kM0, c0, &hi0);
    const uint32_t lo1 = MulHiLo(kM1, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) from 24 random bits.
OCTET_HOST_DEVICE inline float UniformFromBits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Uniform double in [0, 1) from 53 random bits.
OCTET_HOST_DEVICE inline double UniformDoubleFromBits(uint32_t a, uint32_t b) {
  const uint64_t x = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);
  return static_cast<double>(x & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace octet
