// How a backend plugs into core's device functions (core/device.h) and
// provides core/device_control.h (private: not installed).
#pragma once

#include <octet/core/device.h>
#include <octet/core/device_control.h>

#include <string>

namespace octet {

// Called once by a backend's static initialiser (the CUDA backend in
// ops/cuda/device_context.cc) so core code can ask about its devices
// (DeviceCount, Synchronize, NativeStream in core/device.h).
struct DeviceBackendInfo {
  int (*count)() = nullptr;
  std::string (*unavailable_reason)() = nullptr;
  void (*synchronize)(int index) = nullptr;     // waits for the device's queued work
  void* (*native_stream)(int index) = nullptr;  // this thread's current stream
};
void RegisterDeviceBackend(DeviceType type, DeviceBackendInfo info);

}  // namespace octet

namespace octet::internal {

// Filled once by a backend's static initialiser (the CUDA backend in
// ops/cuda/device_context.cc); the CPU's entries are in core/device_control.cc.
struct DeviceControlHooks {
  // Sets this thread's stream for the device (nullptr: the backend's own)
  // and returns the previous setting (nullptr when it was the backend's own).
  void* (*exchange_stream)(int index, void* stream) = nullptr;
  MemoryStats (*memory_stats)(int index) = nullptr;
  void (*reset_peak_memory_stats)(int index) = nullptr;
  void (*empty_cache)(int index) = nullptr;
};
void RegisterDeviceControl(DeviceType type, DeviceControlHooks hooks);

}  // namespace octet::internal
