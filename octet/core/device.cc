#include <octet/core/device.h>

#include <charconv>

#include <octet/core/device_control_internal.h>
#include <octet/core/error.h>

namespace octet {
namespace {

// Filled by backends at static-initialisation time, read afterwards.
DeviceBackendInfo& BackendInfo(DeviceType type) {
  static DeviceBackendInfo infos[kNumDeviceTypes];
  return infos[static_cast<int>(type)];
}

}  // namespace

std::string ToString(Device d) { return d.is_cpu() ? "cpu" : "cuda:" + std::to_string(d.index); }
std::ostream& operator<<(std::ostream& os, Device d) { return os << ToString(d); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << (t == DeviceType::kCPU ? "cpu" : "cuda"); }

Device ParseDevice(std::string_view text) {
  if (text == "cpu") return kCPU;
  if (text == "cuda") return CUDA(0);
  constexpr std::string_view kPrefix = "cuda:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = text.substr(kPrefix.size());
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0) return CUDA(index);
  }
  OCTET_FAIL("unknown device '", text, "' (expected cpu, cuda or cuda:N)");
}

void RegisterDeviceBackend(DeviceType type, DeviceBackendInfo info) { BackendInfo(type) = info; }

int DeviceCount(DeviceType type) {
  if (type == DeviceType::kCPU) return 1;
  const DeviceBackendInfo& info = BackendInfo(type);
  return info.count != nullptr ? info.count() : 0;
}

std::string DeviceUnavailableReason(DeviceType type) {
  if (DeviceCount(type) > 0) return "";
  const DeviceBackendInfo& info = BackendInfo(type);
  if (info.count == nullptr) return "this build of octet has no CUDA backend (configure with -DOCTET_CUDA=ON)";
  return info.unavailable_reason != nullptr ? info.unavailable_reason() : "no device found";
}

void CheckDeviceExists(Device device, std::string_view what) {
  const int n = DeviceCount(device.type);
  OCTET_CHECK(n > 0, what, ": ", device, " is not available: ", DeviceUnavailableReason(device.type));
  OCTET_CHECK(device.index >= 0 && device.index < n, what, ": ", device, " does not exist (this machine has ", n, " ",
              device.type, " device", n == 1 ? "" : "s", ")");
}

void Synchronize(Device device) {
  if (device.is_cpu()) return;
  CheckDeviceExists(device, "octet::Synchronize");
  const DeviceBackendInfo& info = BackendInfo(device.type);
  OCTET_CHECK(info.synchronize != nullptr, "octet::Synchronize: the ", device.type, " backend registered no synchronize");
  info.synchronize(device.index);
}

void* NativeStream(Device device) {
  if (device.is_cpu()) return nullptr;
  CheckDeviceExists(device, "octet::NativeStream");
  const DeviceBackendInfo& info = BackendInfo(device.type);
  OCTET_CHECK(info.native_stream != nullptr, "octet::NativeStream: the ", device.type,
              " backend registered no stream");
  return info.native_stream(device.index);
}

}  // namespace octet
