// The consumer's own core/tensor.h. octet's installed headers include each
// other as <octet/core/tensor.h>, so this file must never be picked up by
// them: it would not compile inside octet (it defines no octet::Tensor) and
// it turns a wrong pick-up into a compile error naming this file.
#pragma once

#ifdef OCTET_CONSUMER_TENSOR_H_SEEN
#error "tests/install/core/tensor.h was included twice"
#endif
#define OCTET_CONSUMER_TENSOR_H_SEEN 1

namespace consumer {
// Not octet's: a consumer type of the same file name.
struct Tensor {
  int rows = 0;
  int cols = 0;
};
}  // namespace consumer
