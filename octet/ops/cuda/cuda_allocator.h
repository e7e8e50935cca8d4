// The CUDA device allocator: one CachingAllocator (core/caching_allocator.h)
// per device over cudaMalloc/cudaFree and CUDA events, registered for
// DeviceType::kCUDA together with the host<->device copy function. Host code
// of the CUDA backend only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include <octet/core/caching_allocator.h>
#include <octet/core/tensor.h>

namespace octet::cuda {

// The caching allocator of `device` (created on first use). Throws when the
// device does not exist.
CachingAllocator& DeviceAllocator(int device);

// Declares that `t`'s memory is used by work queued on `stream` (a stream
// other than the one current when it was allocated, e.g. a communication
// stream): when the tensor's storage is freed, its memory is not reused until
// that work has completed. t must be a CUDA tensor.
void RecordStream(const Tensor& t, cudaStream_t stream);

// Returns the cached, unused memory of every device to CUDA.
void EmptyCache();

// Allocator statistics of `device`.
CachingAllocatorStats MemoryStats(int device);

}  // namespace octet::cuda
