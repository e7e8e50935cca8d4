// The kernel registry: one table per kernel, indexed by device type.
//
//   // ops/norm.h (or .cc):   OCTET_DECLARE_KERNEL(layer_norm_fwd, LayerNormFwdFn);
//   // ops/norm.cc:           OCTET_DEFINE_KERNEL(layer_norm_fwd, LayerNormFwdFn);
//   // ops/cpu/norm_cpu.cc:   OCTET_REGISTER_KERNEL(layer_norm_fwd, kCPU, &LayerNormFwdCpu);
//   // call site:             layer_norm_fwd(x.device())(args...);
//
// Tables are constant-initialised (constexpr constructor, constinit object), so
// registration from another translation unit's static initialiser can never
// run before the table exists. A call for a device with no registered kernel
// throws an error naming the kernel and the device.
#pragma once

#include <octet/core/device.h>
#include <octet/core/error.h>

namespace octet {

template <typename Fn>
class KernelTable {
 public:
  constexpr explicit KernelTable(const char* name) : name_(name) {}

  void Register(DeviceType type, Fn* fn) { fns_[static_cast<int>(type)] = fn; }

  Fn* operator()(Device device) const {
    Fn* fn = fns_[static_cast<int>(device.type)];
    OCTET_CHECK(fn != nullptr, name_, ": no kernel registered for device ", device,
                device.is_cuda() ? " (this build has no CUDA backend, or the op has no CUDA kernel)" : "");
    return fn;
  }
  bool Has(DeviceType type) const { return fns_[static_cast<int>(type)] != nullptr; }
  const char* name() const { return name_; }

 private:
  const char* name_;
  Fn* fns_[kNumDeviceTypes] = {};
};

}  // namespace octet

#define OCTET_DECLARE_KERNEL(name, FnType) extern ::octet::KernelTable<FnType> name
#define OCTET_DEFINE_KERNEL(name, FnType) constinit ::octet::KernelTable<FnType> name(#name)
#define OCTET_REGISTER_KERNEL_IMPL2(name, device, fn, line) \
  static const bool octet_registered_##name##_##line = (name.Register((device), (fn)), true)
#define OCTET_REGISTER_KERNEL_IMPL(name, device, fn, line) OCTET_REGISTER_KERNEL_IMPL2(name, device, fn, line)
#define OCTET_REGISTER_KERNEL(name, device, fn) OCTET_REGISTER_KERNEL_IMPL(name, device, fn, __LINE__)
