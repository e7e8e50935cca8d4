// Storage: a reference-counted block of device memory shared by a tensor and
// all of its views. It also carries the version counter that autograd uses to
// detect in-place changes of tensors saved for backward (views share it, so a
// write through any view is seen).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include <octet/core/device.h>

namespace octet {

struct AmaxNote;  // core/amax_note.h

// Held by std::shared_ptr (Tensor::storage()); weak_from_this lets a graph
// capture remember the storages it bumped without keeping them alive.
class Storage : public std::enable_shared_from_this<Storage> {
 public:
  // Allocates nbytes on device through the registered allocator.
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere (no free on destruction).
  Storage(void* data, size_t nbytes, Device device, bool owned);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  // Marks the data as changed. Inside a graph capture the bump is also
  // repeated after every replay (NOTE [captured steps] in core/graph.h).
  void BumpVersion();
  void BumpVersionUnrecorded() { version_.fetch_add(1, std::memory_order_relaxed); }

  // NOTE [amax notes] in core/amax_note.h: a consumer of the elements' amax
  // asks for notes; the writer that can take the amax on the way leaves one.
  void WantAmaxNotes() { wants_amax_notes_.store(true, std::memory_order_relaxed); }
  bool wants_amax_notes() const { return wants_amax_notes_.load(std::memory_order_relaxed); }
  void SetAmaxNote(std::shared_ptr<const AmaxNote> note) { amax_note_.store(std::move(note)); }
  std::shared_ptr<const AmaxNote> amax_note() const { return amax_note_.load(); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
  std::atomic<uint64_t> version_{0};
  std::atomic<bool> wants_amax_notes_{false};
  std::atomic<std::shared_ptr<const AmaxNote>> amax_note_;
};

}  // namespace octet
