// Softmax, log-softmax and the cross-entropy loss. All differentiable.
//
// Dtypes: float32, float64, bfloat16, float16 (bf16/f16 compute in f32,
// f64 in f64). FP8 inputs are rejected: their values need a scale, go through
// Dequantize first. Errors (octet::Error) name the op and the offending
// shapes, dtypes or values.
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>

namespace octet {

// How a per-element loss is turned into the result.
enum class Reduction {
  kNone,  // one loss per row: shape (N)
  kMean,  // mean over the rows that count (see CrossEntropy): shape []
  kSum,   // sum over all rows: shape []
};

// exp(x - max) / sum(exp(x - max)) along dim (negative dims count from the
// end). x: any shape (a rank-0 x is treated as one element); returns x's
// shape and dtype. Numerically stable for any finite input; a row holding a
// NaN, or made only of -inf, gives NaN for that row. The last dim takes a
// fused one-row-at-a-time fast path; other dims work on blocks of columns.
// Errors: dim out of range, non-float or FP8 x.
Tensor Softmax(const Tensor& x, int64_t dim = -1);

// x - max - log(sum(exp(x - max))) along dim; as Softmax otherwise.
Tensor LogSoftmax(const Tensor& x, int64_t dim = -1);

// Cross-entropy between softmax(logits) and integer class targets, fused:
// forward computes each row's logsumexp and loss in one pass over the row,
// backward writes dlogits = (softmax - onehot(target)) * dloss straight from
// the saved logits and per-row logsumexp (nothing of size (N, V) is saved or
// materialised besides dlogits itself).
//
//   logits:  (N, V) float32/float64/bfloat16/float16, any strides.
//   targets: (N) int64 or int32, each in [0, V) or equal to ignore_index.
//   Returns: float32 (float64 for float64 logits), whatever the logits dtype,
//            so a bf16 model still reports an f32 loss. Shape (N) for kNone
//            (ignored rows give 0), [] for kMean and kSum.
//
// kMean divides the sum by the number of rows whose target is not
// ignore_index. If every target is ignored (or N == 0) the mean is defined as
// 0 and the gradient is zero (PyTorch returns NaN here; a batch made only of
// padding should not poison the training run). kSum adds the rows (ignored
// rows add 0).
//
// Errors: logits not 2-D, targets not 1-D of length N, targets not
// int64/int32, FP8 or non-float logits, V == 0, a device mismatch, and a
// target outside [0, V) that is not ignore_index (the message gives the value,
// its position and V).
Tensor CrossEntropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                    Reduction reduction = Reduction::kMean);

}  // namespace octet
