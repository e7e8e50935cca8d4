// Random ops: dropout. (Random tensor factories are in core/random.h.)
#pragma once

#include <octet/core/random.h>
#include <octet/core/tensor.h>

namespace octet {

// Zeroes each element with probability p and scales the survivors by 1/(1-p)
// (inverted dropout). training=false or p=0 returns x. The mask comes from
// Philox(seed, offset + i/4) so it is identical on every backend and thread
// count. Differentiable (the mask is reused in backward).
Tensor Dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

}  // namespace octet
