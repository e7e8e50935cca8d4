#include <octet/nn/activation.h>

#include <octet/ops/pointwise.h>
#include <octet/ops/random.h>

namespace octet::nn {

Dropout::Dropout(const Options& o) : options_(o) {
  OCTET_CHECK(o.p >= 0.0 && o.p < 1.0, "nn::Dropout: p must be in [0, 1), got ", o.p);
}

Tensor Dropout::Forward(const Tensor& x) {
  if (!is_training() || options_.p == 0.0) return x;
  return octet::Dropout(x, options_.p, /*training=*/true, options_.gen);
}

Tensor GELU::Forward(const Tensor& x) { return Gelu(x); }

}  // namespace octet::nn
