// Devices: the CPU, and CUDA devices by index.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace octet {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit by design

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

inline constexpr Device kCPU{DeviceType::kCPU, 0};
inline Device CUDA(int index = 0) { return Device{DeviceType::kCUDA, index}; }

std::string ToString(Device d);

// "cpu", "cuda" (= cuda:0) or "cuda:N" -> the Device. Throws octet::Error
// naming the text for anything else. Does not check that the device exists.
Device ParseDevice(std::string_view text);

// How many devices of `type` this process can use: 1 for the CPU; for CUDA,
// what the CUDA backend detected (0 in a build without it, or when the
// driver reports no device).
int DeviceCount(DeviceType type);
// Why DeviceCount(type) is 0 ("" otherwise).
std::string DeviceUnavailableReason(DeviceType type);
// Throws octet::Error unless `device` exists here, saying why (no backend
// in this build, no device found and the driver's reason, index too large).
// `what` names the caller ("--device").
void CheckDeviceExists(Device device, std::string_view what);

// NOTE [waiting for a device]: octet queues GPU work asynchronously on its
// own non-blocking streams (NOTE [cuda streams] in ops/cuda/device_context.h),
// so a host clock, an event on the legacy default stream or the caller's own
// kernels see none of it. An embedding program orders or times its work
// against octet's with these two functions.
//
// Synchronize(device) returns when every piece of work octet has queued on
// `device` (from any thread, on any of its streams) has finished. For CUDA
// it is cudaDeviceSynchronize on that device, so an asynchronous fault of an
// earlier kernel surfaces here as an octet::Error; for the CPU it returns at
// once (CPU ops finish before they return). Throws when the device does not
// exist (CheckDeviceExists).
void Synchronize(Device device);
// The native stream octet queues work on for `device` from the calling thread
// (a cudaStream_t for CUDA, to record events on or make the caller's stream
// wait for; nullptr for the CPU). Throws when the device does not exist.
void* NativeStream(Device device);

std::ostream& operator<<(std::ostream& os, Device d);
std::ostream& operator<<(std::ostream& os, DeviceType t);

}  // namespace octet
