#include "core/allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace octet {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* Allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    OCTET_CHECK(p != nullptr, "CPU out of memory: failed to allocate ", nbytes, " bytes");
    return p;
  }
  void Free(void* ptr, size_t, Device) override { std::free(ptr); }
};

void CpuCopyBytes(void* dst, Device, const void* src, Device, size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

struct Registry {
  CpuAllocator cpu;
  Allocator* allocators[kNumDeviceTypes] = {&cpu, nullptr};
  CopyBytesFn copies[kNumDeviceTypes] = {&CpuCopyBytes, nullptr};
};

Registry& GetRegistry() {
  static Registry registry;
  return registry;
}

}  // namespace

Allocator& GetAllocator(DeviceType type) {
  Allocator* a = GetRegistry().allocators[static_cast<int>(type)];
  OCTET_CHECK(a != nullptr, "no allocator for device type ", type,
              ": this build of octet has no backend for it (configure with OCTET_CUDA=ON)");
  return *a;
}

void RegisterAllocator(DeviceType type, Allocator* allocator) {
  GetRegistry().allocators[static_cast<int>(type)] = allocator;
}

void RegisterCopyBytes(DeviceType type, CopyBytesFn fn) { GetRegistry().copies[static_cast<int>(type)] = fn; }

void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  // A copy that touches a non-CPU device is done by that device's backend.
  const DeviceType t = dst_device.is_cpu() ? src_device.type : dst_device.type;
  CopyBytesFn fn = GetRegistry().copies[static_cast<int>(t)];
  OCTET_CHECK(fn != nullptr, "cannot copy ", src_device, " -> ", dst_device, ": no backend for ", t,
              " in this build");
  fn(dst, dst_device, src, src_device, nbytes);
}

std::string ToString(Device d) { return d.is_cpu() ? "cpu" : "cuda:" + std::to_string(d.index); }
std::ostream& operator<<(std::ostream& os, Device d) { return os << ToString(d); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << (t == DeviceType::kCPU ? "cpu" : "cuda"); }

}  // namespace octet
