// Device control for an application: run octet on the application's own
// CUDA stream, read memory statistics, release cached memory. With
// octet::Synchronize and octet::NativeStream (core/device.h) this is what an
// embedding program needs to share a GPU with its own work; no CUDA header
// is needed to use it.
#pragma once

#include <cstdint>

#include <octet/core/device.h>

namespace octet {

// Makes octet queue its work for `device` on the caller's stream, on this
// thread, for the guard's lifetime (the previous stream is restored when the
// guard is destroyed; guards nest). `cuda_stream` is a cudaStream_t passed
// as void* so this header needs no CUDA include; nullptr means octet's own
// stream for the device (octet never uses the legacy NULL stream). Memory
// octet allocates while the guard is active belongs to that stream (NOTE
// [caching allocator] in core/caching_allocator.h): free those tensors, or
// synchronise the stream, before destroying it.
//
//   cudaStream_t stream = ...;  // the application's
//   {
//     octet::StreamGuard on_mine(octet::CUDA(0), stream);
//     octet::Tensor y = model(x);  // queued on `stream`
//   }
//
// For the CPU device it does nothing (CPU ops run on the calling thread); a
// non-null stream is an error only in a build without the CUDA backend, where
// no stream can exist. Throws octet::Error when a CUDA device does not exist.
class StreamGuard {
 public:
  StreamGuard(Device device, void* cuda_stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  void* prev_ = nullptr;  // the thread's stream before the guard (nullptr: octet's own)
  bool active_ = false;
};

// Memory octet holds on a device. The CPU counts every tensor allocation
// (blocks of 64 KiB or more are cached for reuse, OCTET_CPU_CACHING=0 turns
// that off; smaller ones go straight to malloc); CUDA counts its caching
// allocator's blocks. Sizes are as allocated (rounded up to the allocator's
// granularity).
struct MemoryStats {
  int64_t allocated_bytes = 0;       // in use by tensors now
  int64_t reserved_bytes = 0;        // held from the system or driver: in use + cached
  int64_t cached_bytes = 0;          // reserved, free for reuse (what EmptyCache can release)
  int64_t peak_allocated_bytes = 0;  // max of allocated_bytes since start or ResetPeakMemoryStats
  int64_t num_allocs = 0;            // allocations made since the process started
  int64_t num_frees = 0;             // and freed (num_allocs - num_frees are live)
};
// Throws octet::Error when the device does not exist (CheckDeviceExists).
MemoryStats GetMemoryStats(Device device);
// Sets peak_allocated_bytes to the current allocated_bytes.
void ResetPeakMemoryStats(Device device);
// Returns the cached, unused blocks of `device` to the system or driver
// (memory in use is untouched). For CUDA it first waits for the frees that
// are still pending on other streams.
void EmptyCache(Device device);

}  // namespace octet
