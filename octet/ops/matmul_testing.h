// Test hooks of ops/matmul.h (not installed).
#pragma once

#include <optional>

namespace octet {

// Forces Fp8GemmWantsTransposedCopies' answer for every device (nullopt: ask
// the backend again).
void SetFp8TransposedCopiesForTesting(std::optional<bool> value);

}  // namespace octet
