// Devices: the CPU, and CUDA devices by index.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

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
std::ostream& operator<<(std::ostream& os, Device d);
std::ostream& operator<<(std::ostream& os, DeviceType t);

}  // namespace octet
