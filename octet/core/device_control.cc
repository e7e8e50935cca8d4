#include <octet/core/device_control.h>

#include <octet/core/allocator.h>
#include <octet/core/device_control_internal.h>
#include <octet/core/error.h>

namespace octet {
namespace {

internal::DeviceControlHooks& Hooks(DeviceType type);

// The CPU's entries: it has one "stream" (the caller's thread), so a stream
// guard only checks that a CUDA stream it is given could mean something in
// this build; the memory functions read the CPU caching allocator.
void* CpuExchangeStream(int, void* stream) {
  OCTET_CHECK(stream == nullptr || Hooks(DeviceType::kCUDA).exchange_stream != nullptr,
              "octet::StreamGuard: a CUDA stream was given, but this build of octet has no CUDA backend");
  return nullptr;
}

MemoryStats CpuStats(int) {
  const CpuMemoryStats c = GetCpuMemoryStats();
  MemoryStats s;
  s.allocated_bytes = c.allocated_bytes;
  s.reserved_bytes = c.reserved_bytes;
  s.cached_bytes = c.reserved_bytes - c.allocated_bytes;
  s.peak_allocated_bytes = c.peak_allocated_bytes;
  s.num_allocs = c.num_allocs;
  s.num_frees = c.num_frees;
  return s;
}

internal::DeviceControlHooks& Hooks(DeviceType type) {
  static internal::DeviceControlHooks* hooks = [] {  // never destroyed: guards may run at exit
    auto* h = new internal::DeviceControlHooks[kNumDeviceTypes];
    h[static_cast<int>(DeviceType::kCPU)] = {.exchange_stream = CpuExchangeStream,
                                             .memory_stats = CpuStats,
                                             .reset_peak_memory_stats = [](int) { ResetCpuPeakMemoryStats(); },
                                             .empty_cache = [](int) { EmptyCpuCache(); }};
    return h;
  }();
  return hooks[static_cast<int>(type)];
}

// The backend's `hook`, after checking that `device` exists.
template <typename Hook>
Hook BackendHook(Device device, Hook internal::DeviceControlHooks::*hook, const char* what) {
  CheckDeviceExists(device, what);
  const Hook h = Hooks(device.type).*hook;
  OCTET_CHECK(h != nullptr, what, ": the ", device.type, " backend does not support it");
  return h;
}

}  // namespace

namespace internal {
void RegisterDeviceControl(DeviceType type, DeviceControlHooks hooks) { Hooks(type) = hooks; }
}  // namespace internal

StreamGuard::StreamGuard(Device device, void* cuda_stream) : device_(device) {
  const auto exchange = BackendHook(device, &internal::DeviceControlHooks::exchange_stream, "octet::StreamGuard");
  prev_ = exchange(device.index, cuda_stream);
  active_ = true;
}

StreamGuard::~StreamGuard() {
  if (active_) Hooks(device_.type).exchange_stream(device_.index, prev_);
}

MemoryStats GetMemoryStats(Device device) {
  return BackendHook(device, &internal::DeviceControlHooks::memory_stats, "octet::GetMemoryStats")(device.index);
}

void ResetPeakMemoryStats(Device device) {
  BackendHook(device, &internal::DeviceControlHooks::reset_peak_memory_stats,
              "octet::ResetPeakMemoryStats")(device.index);
}

void EmptyCache(Device device) {
  BackendHook(device, &internal::DeviceControlHooks::empty_cache, "octet::EmptyCache")(device.index);
}

}  // namespace octet
