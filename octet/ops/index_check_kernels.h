// Kernel signature of the deferred index check (internal: shared by
// ops/index_check.cc and the backends; the public API is ops/index_check.h).
#pragma once

#include <cstdint>

#include <octet/core/tensor.h>
#include <octet/ops/index_check.h>
#include <octet/ops/registry.h>

namespace octet {

// Kernel: record is int64 [4] {op, position, value, bound} on idx's device,
// op == 0 while no failure is recorded.
using IndexCheckFn = void(const Tensor& idx, int64_t bound, bool has_ignore, int64_t ignore, int64_t replacement,
                          int64_t op, const Tensor& sanitized, const Tensor& count, const Tensor& record);
OCTET_DECLARE_KERNEL(index_check_deferred, IndexCheckFn);

}  // namespace octet
