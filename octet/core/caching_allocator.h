// A stream-ordered caching allocator: the bookkeeping behind octet's CUDA
// memory (ops/cuda/cuda_allocator.cc wires it to cudaMalloc/cudaFree and CUDA
// events). It is plain host C++ with the device behind an abstract backend,
// so every rule below is unit-tested on the CPU with a fake backend
// (tests/core/caching_allocator_test.cc).
//
// NOTE [caching allocator]: the design follows PyTorch's
// CUDACachingAllocator (see /work/shared/CUDA_NOTES.md §4):
//  - Sizes round up to a multiple of 512 bytes (kMinBlockSize).
//  - Requests <= 1 MiB come from the small pool, backed by 2 MiB segments;
//    larger ones from the large pool: 1-10 MiB requests get a 20 MiB segment,
//    >= 10 MiB requests a segment rounded up to 2 MiB.
//  - Free blocks are kept in a set ordered by (stream, size, address); a
//    request takes the best fit (smallest block >= size) on its own stream.
//  - A block larger than the request is split when the remainder is >= 512 B
//    (small pool) or > 1 MiB (large pool, and only below max_split_size);
//    blocks of max_split_size or more are never split and serve only
//    requests >= max_split_size that waste less than 20 MiB.
//  - Freed blocks merge with free neighbours of the same segment.
//  - Stream order: a block belongs to the stream it was allocated on and is
//    reused only by that stream, so reuse needs no synchronisation. A block
//    used on other streams must be declared with RecordStream; on Free an
//    event is recorded on each of those streams and the block returns to the
//    pool only once every event has completed (checked at the next Allocate).
//  - Out of memory: release every cached segment (after a device
//    synchronisation) and retry once; then throw an octet::Error that says
//    how much was asked for, allocated and reserved.
//
// NOTE [arena segments]: with Options::arena_segment_size set (the CPU's,
// core/allocator.cc), every request, whatever its size, comes from one pool
// of segments at least that large, and a new one is mapped only when no free
// block fits; every block splits down to kMinBlockSize. On a backend that
// commits memory on first touch (CPU pages) a large segment costs only the
// pages handed out, and what one phase of a program frees merges with its
// neighbours into blocks the next phase can use whatever their sizes, where
// the pools and 2/20 MiB segments above keep a freed block for requests of
// its own size class and segment. Measured on the wide GPT training step (2
// layers, width 768, T=256, B=4, 2 threads; octet_train_step_bench peak
// RSS): O0 355 -> 332 MiB, O1 327 -> 317, O2 288 -> 280, O1 with the
// FP8/FP16 AdamW state 252 -> 248, for the same tensors (docs/cpu-speed.md,
// 2026-11-28, seventh session). A backend that cannot map an arena segment
// gets the size above instead.
// committed_bytes estimates what such a backend holds resident: the bytes of
// blocks handed out since their segment was mapped or they were last given
// back (Decommit, by EmptyCache). An estimate: a free block's committed bytes
// are taken to lie at its front, where a request carves its block from, and
// Decommit keeps the pages a free block shares with its neighbours.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace octet {

// The device side of a CachingAllocator. Streams and events are opaque
// integers (the CUDA backend stores cudaStream_t / cudaEvent_t in them).
class CachingAllocatorBackend {
 public:
  using StreamId = uintptr_t;
  using EventId = uintptr_t;
  // An event that needs no waiting (RecordEvent may return it).
  static constexpr EventId kNoEvent = 0;

  virtual ~CachingAllocatorBackend() = default;
  // A fresh segment of `nbytes` device memory, or nullptr when the device is
  // out of memory. Other failures throw octet::Error.
  virtual void* RawAlloc(size_t nbytes) = 0;
  // Returns a segment obtained from RawAlloc. Must not throw.
  virtual void RawFree(void* ptr, size_t nbytes) = 0;
  // Records an event on `stream` (after the work queued so far) and returns
  // it, or kNoEvent when it has waited for that work itself. Must not throw
  // (it runs inside Free, i.e. inside destructors).
  virtual EventId RecordEvent(StreamId stream) = 0;
  // True once the work before `event` has completed.
  virtual bool EventCompleted(EventId event) = 0;
  virtual void DestroyEvent(EventId event) = 0;
  // Waits for all work on the device; afterwards every recorded event has
  // completed.
  virtual void Synchronize() = 0;
  // Extra text for out-of-memory errors (e.g. the device's free/total memory).
  virtual std::string MemoryReport() { return ""; }
  // True when a segment's memory becomes resident only where it is first
  // written (CPU pages), false when RawAlloc commits all of it (CUDA). See
  // NOTE [arena segments].
  virtual bool CommitsOnTouch() const { return false; }
  // Gives back the physical memory of the whole pages inside [ptr, ptr +
  // nbytes), a free part of a live segment, keeping the addresses valid
  // (called by EmptyCache only when CommitsOnTouch). Must not throw.
  virtual void Decommit(void* /*ptr*/, size_t /*nbytes*/) {}
};

struct CachingAllocatorStats {
  size_t allocated_bytes = 0;       // in blocks handed out (rounded sizes)
  size_t requested_bytes = 0;       // as asked for by the callers
  size_t reserved_bytes = 0;        // in segments held from the backend
  size_t committed_bytes = 0;       // of those, possibly resident (NOTE [arena segments]; = reserved
                                    // on a backend that does not commit on touch)
  size_t peak_committed_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  size_t cached_bytes = 0;          // free bytes in the pools (reserved - allocated - pending)
  uint64_t num_allocs = 0;          // successful Allocate calls with nbytes > 0
  uint64_t num_frees = 0;
  uint64_t cache_hits = 0;          // allocations served without a new segment
  uint64_t num_segment_allocs = 0;  // RawAlloc calls that succeeded
  uint64_t num_segment_frees = 0;
  uint64_t num_alloc_retries = 0;   // times the cache was flushed to retry an allocation
  uint64_t num_ooms = 0;            // Allocate calls that threw out of memory
  uint64_t num_pending_frees = 0;   // freed blocks waiting for cross-stream events
  uint64_t pool_bytes = 0;          // reserved in segments of open or live graph pools
};

class CachingAllocator {
 public:
  using StreamId = CachingAllocatorBackend::StreamId;

  static constexpr size_t kMinBlockSize = 512;               // rounding granularity
  static constexpr size_t kSmallSize = size_t{1} << 20;      // largest small-pool request
  static constexpr size_t kSmallBuffer = size_t{2} << 20;    // small-pool segment size
  static constexpr size_t kLargeBuffer = size_t{20} << 20;   // segment for 1-10 MiB requests
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20; // from here: own segment
  static constexpr size_t kRoundLarge = size_t{2} << 20;     // rounding of own segments

  struct Options {
    // Name used in error messages, e.g. "cuda:0".
    std::string device_name = "device";
    // Blocks at least this large are never split (default: no limit).
    size_t max_split_size = SIZE_MAX;
    // When non-zero: one pool for all sizes, served from segments of at
    // least this many bytes (NOTE [arena segments]).
    size_t arena_segment_size = 0;
  };

  // `backend` must outlive the allocator.
  CachingAllocator(CachingAllocatorBackend* backend, Options options);
  // Returns every cached segment to the backend. Blocks still allocated are
  // leaked (their owners may outlive the allocator at process exit).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nbytes of memory for use on `stream` (nullptr for 0 bytes). Throws
  // octet::Error when the backend has no memory left even after the cache has
  // been released.
  void* Allocate(size_t nbytes, StreamId stream);
  // Returns a pointer from Allocate (nullptr is ignored). Throws on a pointer
  // this allocator did not hand out.
  void Free(void* ptr);
  // Declares that the block holding `ptr` is also used on `stream`: its
  // memory is not reused until the work queued on `stream` before the Free
  // has completed. A no-op for the allocation stream itself.
  void RecordStream(void* ptr, StreamId stream);
  // Releases every cached (free, unsplit) segment to the backend, after
  // waiting for pending cross-stream frees.
  void EmptyCache();

  // NOTE [graph pools]: while a pool is open for `stream` (BeginPool), every
  // allocation made on that stream comes from segments private to the pool:
  // its blocks carry a pool key (a StreamId with the top bit set, which no
  // stream pointer has) in place of the stream, so only requests routed to
  // the same pool can reuse them, during the capture. After EndPool nothing
  // allocates from the pool any more: a captured graph goes on writing its
  // blocks at every replay, freed or not, so no eager allocation may get
  // them. ReleasePool (the graph is gone) gives the pool's blocks back to
  // `stream`: free ones become ordinary cache, live ones return there when
  // freed. While any pool is open the allocator makes no event queries and
  // no device synchronisation (illegal during a CUDA stream capture): frees
  // of blocks used on other streams wait until the last pool closes, and an
  // allocation the device cannot serve throws instead of flushing the cache.
  using PoolId = uint64_t;
  PoolId BeginPool(StreamId stream);
  void EndPool(StreamId stream);
  void ReleasePool(PoolId pool);

  CachingAllocatorStats Stats() const;
  void ResetPeakStats();

  // The rounded size Allocate would use for a request (for tests/diagnostics).
  static size_t RoundSize(size_t nbytes);
  // The segment size Allocate would request from the backend.
  static size_t SegmentSize(size_t rounded);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "20.00 MiB" style rendering of a byte count.
std::string FormatBytes(size_t nbytes);

}  // namespace octet
