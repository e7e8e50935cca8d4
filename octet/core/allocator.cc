#include <octet/core/allocator.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

#include <octet/core/caching_allocator.h>
#include <octet/core/device.h>
#include <octet/core/env.h>
#include <octet/core/error.h>

namespace octet {
namespace {

// NOTE [cpu caching]: glibc returns large blocks to the kernel on free (mmap
// or heap trim), so every large temporary of a training step comes back as
// fresh pages and pays a page fault per 4 KiB on first touch — measured at
// ~6000 faults and 13.4 ms for one (4096,768) f32 AddLayerNorm forward, vs
// 1.5-2 ms with the blocks kept. Blocks of kCpuCacheMin bytes or more are
// therefore served by the same caching bookkeeping as CUDA memory (one
// "stream", events that are always complete). Untouched parts of a cached
// segment are never resident, so RSS still tracks what is used.
// The threshold is 64 KiB, not 1 MiB: the bf16/FP8 activations of a small
// model (e.g. (2048,128) bf16 = 512 KiB, its FP8 copy 256 KiB) are below
// 1 MiB, and glibc serves such blocks from a heap whose mmap threshold it
// raises on every free of a mapped block; the heap then fragments and RSS
// drifts up by 15+ MB over a training run (GPT example at O1: peak RSS 88-95
// MB with 1 MiB, a steady 73.8 MB with 64 KiB, same ms/step). Smaller blocks
// stay with malloc.
// OCTET_CPU_CACHING=0 turns it off; EmptyCpuCache() returns cached blocks.
// Transparent huge pages (segments of 2 MiB and more 2 MiB-aligned and
// madvise(MADV_HUGEPAGE); the kernel's THP mode here is "madvise") were
// tried and not kept: the GPT steps ran no faster (octet_train_step_bench,
// 2026-11-27, three alternating rounds: wide O2 149-151 ms against 150-156,
// O0 283-288 against 277-291) and peak RSS rose 1-46 MiB (wide O2 297 ->
// 319-321 MiB, O0 356 -> 376-380): a touched byte makes 2 MiB resident.
// The cache's segments are 1 GiB arenas of address space (NOTE [arena
// segments] in core/caching_allocator.h), mapped with mmap: only the pages
// blocks were handed out on become resident, and EmptyCpuCache gives back
// the pages of free blocks (madvise MADV_DONTNEED) as well as whole free
// arenas. MAP_NORESERVE: the kernel charges the pages as they are touched,
// not the whole arena up front (under strict overcommit, vm.overcommit_memory
// = 2, it charges them anyway and a refused arena falls back to the cache's
// regular segment sizes).
// Under AddressSanitizer (scripts/sanitize.sh) the arenas are poisoned but
// for the bytes of live blocks, so a kernel that reads or writes past its
// tensor, into free cache memory, is reported like a heap overflow.
constexpr size_t kCpuCacheMin = size_t{64} << 10;
constexpr size_t kCpuArena = size_t{1} << 30;

size_t AlignedSize(size_t nbytes) { return (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment; }

void* AlignedAlloc(size_t nbytes) { return std::aligned_alloc(kCpuAlignment, AlignedSize(nbytes)); }

class CpuBackend final : public CachingAllocatorBackend {
 public:
  void* RawAlloc(size_t nbytes) override {
    void* p = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    ASAN_POISON_MEMORY_REGION(p, nbytes);
    return p;
  }
  void RawFree(void* ptr, size_t nbytes) override {
    ASAN_UNPOISON_MEMORY_REGION(ptr, nbytes);
    munmap(ptr, nbytes);
  }
  bool CommitsOnTouch() const override { return true; }
  void Decommit(void* ptr, size_t nbytes) override {
    static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(ptr) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(ptr) + nbytes) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
  EventId RecordEvent(StreamId) override { return kNoEvent; }
  bool EventCompleted(EventId) override { return true; }
  void DestroyEvent(EventId) override {}
  void Synchronize() override {}
};

class CpuAllocator final : public Allocator {
 public:
  void* Allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    CachingAllocator* const c = cache();
    const bool cached = c != nullptr && nbytes >= kCpuCacheMin;
    void* p = cached ? c->Allocate(nbytes, 0) : AlignedAlloc(nbytes);
    OCTET_CHECK(p != nullptr, "CPU out of memory: failed to allocate ", nbytes, " bytes");
    if (cached) ASAN_UNPOISON_MEMORY_REGION(p, nbytes);
    Count(cached, nbytes, +1);
    return p;
  }
  void Free(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    CachingAllocator* const c = cache();
    const bool cached = c != nullptr && nbytes >= kCpuCacheMin;
    if (cached) {
      ASAN_POISON_MEMORY_REGION(ptr, nbytes);
      c->Free(ptr);
    } else {
      std::free(ptr);
    }
    Count(cached, nbytes, -1);
  }
  // The cache, or null with OCTET_CPU_CACHING=0: decided at the first
  // allocation, not when the registry is built during static initialisation,
  // where a bad value could only terminate the program (NOTE [environment
  // switches] in env.h). A function-local static, not std::call_once: an
  // initialisation that throws leaves it to be tried again, so every call
  // until the value is fixed throws the same error.
  static CachingAllocator* cache() {
    static CachingAllocator* const cache = []() -> CachingAllocator* {
      // NOTE [every switch checked at every read]: the first allocation of
      // every process checks all of octet's switches here.
      if (internal::ReadEnvSwitch("OCTET_CPU_CACHING") == 1) return nullptr;  // "0"
      // Leaked on purpose: tensors may be freed during static destruction.
      return new CachingAllocator(new CpuBackend, {.device_name = "cpu", .arena_segment_size = kCpuArena});
    }();
    return cache;
  }

  // Every allocation, cached or not (GetCpuMemoryStats): relaxed atomics,
  // a few per tensor allocation, none per element.
  std::atomic<int64_t> in_use{0};        // bytes, as allocated (rounded)
  std::atomic<int64_t> uncached_in_use{0};
  std::atomic<int64_t> peak_in_use{0};
  std::atomic<int64_t> allocs{0};
  std::atomic<int64_t> frees{0};

 private:
  void Count(bool cached, size_t nbytes, int sign) {
    const int64_t size = static_cast<int64_t>(cached ? CachingAllocator::RoundSize(nbytes) : AlignedSize(nbytes));
    if (sign < 0) {
      in_use.fetch_sub(size, std::memory_order_relaxed);
      if (!cached) uncached_in_use.fetch_sub(size, std::memory_order_relaxed);
      frees.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const int64_t now = in_use.fetch_add(size, std::memory_order_relaxed) + size;
    if (!cached) uncached_in_use.fetch_add(size, std::memory_order_relaxed);
    allocs.fetch_add(1, std::memory_order_relaxed);
    int64_t peak = peak_in_use.load(std::memory_order_relaxed);
    while (now > peak && !peak_in_use.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

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
  static Registry* registry = new Registry;  // never destroyed, see NOTE [cpu caching]
  return *registry;
}

}  // namespace

Allocator& GetAllocator(DeviceType type) {
  Allocator* a = GetRegistry().allocators[static_cast<int>(type)];
  OCTET_CHECK(a != nullptr, "no allocator for device type ", type,
              ": this build of octet has no backend for it (configure with OCTET_CUDA=ON)");
  return *a;
}

Allocator& GetAllocator(Device device) {
  if (GetRegistry().allocators[static_cast<int>(device.type)] == nullptr)
    CheckDeviceExists(device, "allocating memory");  // throws: the backend is not built or has no device
  return GetAllocator(device.type);
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

void EmptyCpuCache() {
  if (CachingAllocator* c = GetRegistry().cpu.cache()) c->EmptyCache();
}

CpuMemoryStats GetCpuMemoryStats() {
  CpuMemoryStats s;
  CpuAllocator& cpu = GetRegistry().cpu;
  s.allocated_bytes = cpu.in_use.load(std::memory_order_relaxed);
  s.peak_allocated_bytes = cpu.peak_in_use.load(std::memory_order_relaxed);
  s.reserved_bytes = cpu.uncached_in_use.load(std::memory_order_relaxed);
  s.num_allocs = cpu.allocs.load(std::memory_order_relaxed);
  s.num_frees = cpu.frees.load(std::memory_order_relaxed);
  if (CachingAllocator* c = cpu.cache()) {
    const CachingAllocatorStats st = c->Stats();
    s.cached_allocated_bytes = st.allocated_bytes;
    s.cached_reserved_bytes = st.reserved_bytes;
    s.cached_committed_bytes = st.committed_bytes;
    s.peak_cached_allocated_bytes = st.peak_allocated_bytes;
    s.caching_enabled = true;
    s.reserved_bytes += static_cast<int64_t>(st.committed_bytes);  // pages, not address space
  }
  return s;
}

void ResetCpuPeakMemoryStats() {
  CpuAllocator& cpu = GetRegistry().cpu;
  cpu.peak_in_use.store(cpu.in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (CachingAllocator* c = cpu.cache()) c->ResetPeakStats();
}

}  // namespace octet
