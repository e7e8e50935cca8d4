// Deferred index checks: range checks of integer indices whose result is
// read by the host later, not by the op that made them.
//
// NOTE [deferred index checks]: Embedding (ids in [0, V)) and CrossEntropy
// (targets in [0, V) or ignore_index) check their indices before they use
// them. By default the check is immediate: the op throws at once, which on a
// GPU means waiting for the check's result (a host synchronisation per
// call). With SetDeferredIndexChecks(true) (train_gpt sets it) the ops run
// CheckIndicesDeferred instead: the check stays on the device, a bad index is
// replaced by a safe one (0 for an embedding, ignore_index for a target) so
// the step can run on, and the first failure is kept in a small per-device
// error record. ThrowIfDeferredIndexCheckFailed reads the records (one host
// read per device that has one) and throws octet::Error naming the op, the
// bad value, its position and the valid range; the caller calls it wherever
// it reads the device anyway (a log line, the end of the run). The CPU runs
// the same deferred path, so it is tested there; the results of a step with
// valid indices are bit-identical in both modes.
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>

namespace octet {

// Process-wide mode (relaxed atomic); default false.
void SetDeferredIndexChecks(bool on);
bool DeferredIndexChecks();

// Which op a failure belongs to (the error record's first entry).
enum class IndexCheckOp : int64_t { kNone = 0, kEmbedding = 1, kCrossEntropy = 2 };

// The device-side check. idx: (N) int64/int32, contiguous. A value is valid
// when in [0, bound) or equal to `ignore` (has_ignore). Returns the
// sanitized copy (same dtype; invalid values replaced by `replacement`) and,
// in *count (int64 [1] on idx's device), the number of valid values that are
// not `ignore`. Records the first failure (lowest position of the first
// failing call since the last Throw...) on the device. No host read.
Tensor CheckIndicesDeferred(IndexCheckOp op, const Tensor& idx, int64_t bound, bool has_ignore, int64_t ignore,
                            int64_t replacement, Tensor* count);

// Throws octet::Error inside a graph capture (core/graph.h): an immediate
// check reads its result on the host, so Embedding and CrossEntropy call it
// when the checks are not deferred.
void CheckIndexCheckCapturable();

// Reads every device's error record; throws octet::Error for the first
// recorded failure (and clears the records), else returns.
void ThrowIfDeferredIndexCheckFailed();

}  // namespace octet
