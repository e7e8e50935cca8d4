// Test hooks of nn/linear.h (not installed).
#pragma once

#include <optional>

namespace octet::nn {

// Forces Linear::FusesLayerNorm to answer false (false) or lets it decide
// (true / nullopt): compares the fused LayerNorm -> FP8 Linear path with the
// unfused one in one process (NOTE [layer norm fused into the fp8 linear]).
void SetLayerNormFusionForTesting(std::optional<bool> enabled);

// The same for Linear::FusesGelu (NOTE [gelu fused into the fp8 linear]).
void SetGeluFusionForTesting(std::optional<bool> enabled);

}  // namespace octet::nn
