#include <octet/core/storage.h>

#include <octet/core/allocator.h>
#include <octet/core/graph_internal.h>

namespace octet {

Storage::Storage(size_t nbytes, Device device)
    : data_(GetAllocator(device).Allocate(nbytes, device)), nbytes_(nbytes), device_(device) {}

Storage::Storage(void* data, size_t nbytes, Device device, bool owned)
    : data_(data), nbytes_(nbytes), device_(device), owned_(owned) {}

Storage::~Storage() {
  if (owned_ && data_ != nullptr) GetAllocator(device_.type).Free(data_, nbytes_, device_);
}

void Storage::BumpVersion() {
  BumpVersionUnrecorded();
  internal::RecordCapturedVersionBump(this);
}

}  // namespace octet
