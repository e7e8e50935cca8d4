// A fake device for the caching allocator's tests: segments are fake
// addresses (never dereferenced) spaced apart, events complete only when the
// test says so, and every call is counted.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <octet/core/caching_allocator.h>

namespace octet::fake_device {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

class FakeBackend : public CachingAllocatorBackend {
 public:
  explicit FakeBackend(size_t capacity = SIZE_MAX) : capacity_(capacity) {}

  void* RawAlloc(size_t nbytes) override {
    ++raw_alloc_calls;
    if (nbytes > capacity_ - in_use_) return nullptr;
    in_use_ += nbytes;
    // Segments are spaced apart so no two are adjacent.
    const uintptr_t p = next_;
    next_ += nbytes + 64 * kMiB;
    segments[reinterpret_cast<void*>(p)] = nbytes;
    return reinterpret_cast<void*>(p);
  }
  void RawFree(void* ptr, size_t nbytes) override {
    auto it = segments.find(ptr);
    ASSERT_NE(it, segments.end()) << "RawFree of a pointer that is not a segment";
    EXPECT_EQ(it->second, nbytes);
    in_use_ -= nbytes;
    segments.erase(it);
    freed.push_back(ptr);
  }
  EventId RecordEvent(StreamId stream) override {
    events.push_back({stream, false, false});
    return events.size();  // ids start at 1 (0 is kNoEvent)
  }
  bool EventCompleted(EventId e) override {
    ++event_queries;
    return events.at(e - 1).completed;
  }
  void DestroyEvent(EventId e) override {
    EXPECT_FALSE(events.at(e - 1).destroyed) << "event destroyed twice";
    events.at(e - 1).destroyed = true;
  }
  void Synchronize() override {
    ++syncs;
    for (auto& e : events) e.completed = true;
  }
  std::string MemoryReport() override { return "fake device: " + std::to_string(in_use_) + " bytes in use"; }
  bool CommitsOnTouch() const override { return lazy; }
  void Decommit(void* ptr, size_t nbytes) override { decommits.emplace_back(ptr, nbytes); }

  void CompleteEventsOn(StreamId stream) {
    for (auto& e : events)
      if (e.stream == stream) e.completed = true;
  }

  struct Event {
    StreamId stream;
    bool completed;
    bool destroyed;
  };
  std::map<void*, size_t> segments;
  std::vector<void*> freed;
  std::vector<Event> events;
  bool lazy = false;  // CommitsOnTouch, as CPU pages
  std::vector<std::pair<void*, size_t>> decommits;
  int raw_alloc_calls = 0;
  int syncs = 0;
  int event_queries = 0;

 private:
  size_t capacity_;
  size_t in_use_ = 0;
  uintptr_t next_ = uintptr_t{1} << 40;
};

inline char* Ptr(void* p) { return static_cast<char*>(p); }

constexpr CachingAllocator::StreamId kS1 = 0x1000, kS2 = 0x2000;

}  // namespace octet::fake_device
