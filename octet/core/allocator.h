// Device memory allocators. The CPU allocator returns 64-byte aligned blocks
// (one cache line, one AVX-512 register). A backend registers its allocator
// per device type; Storage asks the registry for the allocator of its device.
#pragma once

#include <cstddef>
#include <cstdint>

#include <octet/core/device.h>

namespace octet {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nbytes of memory on `device` (nullptr only when nbytes == 0);
  // throws octet::Error when the memory cannot be had.
  virtual void* Allocate(size_t nbytes, Device device) = 0;
  virtual void Free(void* ptr, size_t nbytes, Device device) = 0;
};

inline constexpr size_t kCpuAlignment = 64;

// The allocator for a device type. Throws when none is registered (e.g. a CUDA
// tensor in a build without CUDA).
Allocator& GetAllocator(DeviceType type);
// The allocator for `device`; when its type has none, the error names the
// device and why it is not there (CheckDeviceExists in core/device.h).
Allocator& GetAllocator(Device device);
void RegisterAllocator(DeviceType type, Allocator* allocator);

// Copies bytes between any two devices (host<->device through the backend).
using CopyBytesFn = void (*)(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void RegisterCopyBytes(DeviceType type, CopyBytesFn fn);
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

// CPU blocks of 64 KiB or more are cached for reuse (NOTE [cpu caching] in
// allocator.cc; OCTET_CPU_CACHING=0 disables it, read at the first
// allocation; any value but 0, 1 or "" is an error). EmptyCpuCache returns the
// cached, unused blocks to the system.
void EmptyCpuCache();
struct CpuMemoryStats {
  // Every CPU allocation (see octet::GetMemoryStats in core/device.h).
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;  // allocated + cached (the cache's committed bytes, not its address space)
  int64_t peak_allocated_bytes = 0;
  int64_t num_allocs = 0;
  int64_t num_frees = 0;
  // The cached (large) blocks only.
  bool caching_enabled = false;
  size_t cached_allocated_bytes = 0;  // large blocks in use
  size_t cached_reserved_bytes = 0;   // address space of the cache's segments (1 GiB arenas)
  size_t cached_committed_bytes = 0;  // of it, blocks in use or cached with their pages
                                      // (NOTE [arena segments] in core/caching_allocator.h)
  size_t peak_cached_allocated_bytes = 0;
};
CpuMemoryStats GetCpuMemoryStats();
// Sets both peaks to the current values.
void ResetCpuPeakMemoryStats();

}  // namespace octet
