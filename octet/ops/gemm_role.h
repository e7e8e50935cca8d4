// The role of a GEMM in a Linear layer, which ScaledMatmul takes (public:
// the GEMM layout planning that uses it is internal, ops/gemm_layout.h).
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstdint>

namespace octet {

// Which GEMM of a Linear layer this is (selects FAST_ACCUM; kGeneral: none).
enum class GemmRole : uint8_t { kGeneral = 0, kFprop = 1, kDgrad = 2, kWgrad = 3 };
const char* Name(GemmRole role);

}  // namespace octet
