// Kernel signatures of the softmax & loss family (internal: shared by
// ops/softmax.cc and the backends).
//
// Softmax tensors are 3-D contiguous views (outer, n, inner) of the input,
// with the softmax dim in the middle: inner == 1 is the last-dim case.
// Cross-entropy letters: N rows, V classes. "acc dtype" is float32, or
// float64 for float64 logits.
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

using SoftmaxFwdFn = void(const Tensor& x,  // (outer,n,inner)
                          bool log,         // log-softmax instead of softmax
                          const Tensor& y);  // (outer,n,inner) out, x's dtype

// softmax:     dx = y * (dy - sum(dy * y))
// log-softmax: dx = dy - exp(y) * sum(dy)
using SoftmaxBwdFn = void(const Tensor& dy,  // (outer,n,inner)
                          const Tensor& y,   // (outer,n,inner) the forward output
                          bool log,
                          const Tensor& dx);  // (outer,n,inner) out

// What the forward kernel found. bad_position >= 0 means targets[bad_position]
// = bad_value is neither in [0, V) nor ignore_index; then nothing else is
// meaningful (the kernel checks every target before computing).
struct CrossEntropyFwdResult {
  int64_t bad_position = -1;
  int64_t bad_value = 0;
  int64_t count = 0;  // rows whose target is not ignore_index
};

using CrossEntropyFwdFn = CrossEntropyFwdResult(const Tensor& logits,   // (N,V) contiguous
                                                const Tensor& targets,  // (N) int64/int32 contiguous
                                                int64_t ignore_index,
                                                const Tensor& loss,  // (N) out, acc dtype; 0 where ignored
                                                const Tensor& lse,   // (N) out, acc dtype: logsumexp of each row
                                                // NOTE [deferred index checks] (ops/index_check.h): targets
                                                // known valid; a device kernel skips its check, its host
                                                // read and `count`.
                                                bool prechecked);

// dlogits[i, j] = (exp(logits[i, j] - lse[i]) - (j == targets[i])) * dloss[i] * scale,
// and 0 on rows whose target is ignore_index.
using CrossEntropyBwdFn = void(const Tensor& logits,   // (N,V) contiguous
                               const Tensor& targets,  // (N) contiguous, already validated
                               const Tensor& lse,      // (N) acc dtype
                               const Tensor& dloss,    // (N) acc dtype, any stride (0 for a reduced loss)
                               double scale,           // 1/count for kMean, else 1
                               int64_t ignore_index,
                               const Tensor& dlogits);  // (N,V) out, logits' dtype

OCTET_DECLARE_KERNEL(softmax_fwd, SoftmaxFwdFn);
OCTET_DECLARE_KERNEL(softmax_bwd, SoftmaxBwdFn);
OCTET_DECLARE_KERNEL(cross_entropy_fwd, CrossEntropyFwdFn);
OCTET_DECLARE_KERNEL(cross_entropy_bwd, CrossEntropyBwdFn);

}  // namespace octet
