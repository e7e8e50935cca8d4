#include <octet/core/caching_allocator.h>

#include <algorithm>
#include <cstdio>
#include <list>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include <octet/core/error.h>

namespace octet {
namespace {

using StreamId = CachingAllocatorBackend::StreamId;
using EventId = CachingAllocatorBackend::EventId;

// One block of a segment. Blocks of a segment form a doubly linked list in
// address order; a segment is whole when its only block has no neighbours.
struct Block {
  StreamId stream;
  size_t size;
  char* ptr;
  bool small;                         // which pool it belongs to
  bool allocated = false;
  size_t requested = 0;               // caller's size while allocated
  size_t committed = 0;               // bytes possibly resident (NOTE [arena segments])
  Block* prev = nullptr;
  Block* next = nullptr;
  int event_count = 0;                // outstanding cross-stream events
  std::vector<StreamId> stream_uses;  // streams other than `stream` using it

  Block(StreamId s, size_t sz, char* p, bool is_small) : stream(s), size(sz), ptr(p), small(is_small) {}
};

// Best fit within a stream: ordered by (stream, size, address).
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};
using Pool = std::set<Block*, BlockLess>;

}  // namespace

struct CachingAllocator::Impl {
  CachingAllocatorBackend* backend;
  Options options;
  std::mutex mu;
  Pool small_pool;
  Pool large_pool;
  std::unordered_map<void*, Block*> active;        // allocated blocks by address
  std::list<std::pair<EventId, Block*>> pending;   // cross-stream frees in flight
  size_t pending_bytes = 0;
  CachingAllocatorStats stats;
  // NOTE [graph pools]
  std::unordered_map<StreamId, StreamId> routes;       // stream -> key of its open pool
  std::unordered_map<StreamId, StreamId> pool_origin;  // live pool key -> its stream
  std::unordered_map<StreamId, size_t> pool_segments;  // live pool key -> bytes of its segments
  uint64_t next_pool = 1;
  std::vector<Block*> deferred_frees;  // cross-stream frees made while a pool was open

  static constexpr StreamId kPoolKeyBit = StreamId{1} << (sizeof(StreamId) * 8 - 1);
  bool Capturing() const { return !routes.empty(); }
  StreamId Route(StreamId stream) const {
    auto it = routes.find(stream);
    return it == routes.end() ? stream : it->second;
  }

  // The rest of Free for a block used on other streams: its memory returns
  // once their work has finished.
  void FreeCrossStream(Block* b) {
    for (StreamId s : b->stream_uses) {
      const EventId ev = backend->RecordEvent(s);
      if (ev == CachingAllocatorBackend::kNoEvent) continue;
      ++b->event_count;
      pending.emplace_back(ev, b);
    }
    b->stream_uses.clear();
    if (b->event_count > 0) {
      pending_bytes += b->size;
      ++stats.num_pending_frees;
      return;
    }
    ReturnToPool(b);
  }

  Pool& PoolOf(const Block* b) { return b->small ? small_pool : large_pool; }

  // Takes the best-fitting free block for (stream, size) out of `pool`.
  Block* TakeFreeBlock(Pool& pool, StreamId stream, size_t size) {
    Block key(stream, size, nullptr, false);
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    const size_t max_split = options.max_split_size;
    // Oversize blocks are not carved up for smaller requests, and serve
    // oversize requests only when they waste less than kLargeBuffer.
    if (size < max_split && b->size >= max_split) return nullptr;
    if (size >= max_split && b->size - size >= kLargeBuffer) return nullptr;
    pool.erase(it);
    return b;
  }

  bool ShouldSplit(const Block* b, size_t size) const {
    const size_t remaining = b->size - size;
    // In arenas every block splits as small ones do (NOTE [arena segments]).
    if (b->small || options.arena_segment_size > 0) return remaining >= kMinBlockSize;
    return size < options.max_split_size && remaining > kSmallSize;
  }

  // Merges free neighbour `src` into `dst` (which is not in a pool).
  void TryMerge(Block* dst, Block* src) {
    if (src == nullptr || src->allocated || src->event_count > 0 || !src->stream_uses.empty()) return;
    if (dst->prev == src) {
      dst->ptr = src->ptr;
      dst->prev = src->prev;
      if (dst->prev) dst->prev->next = dst;
    } else {
      dst->next = src->next;
      if (dst->next) dst->next->prev = dst;
    }
    dst->size += src->size;
    dst->committed += src->committed;
    PoolOf(src).erase(src);
    delete src;
  }

  // Returns a block whose use is over to its pool, merged with free neighbours.
  void ReturnToPool(Block* b) {
    TryMerge(b, b->prev);
    TryMerge(b, b->next);
    PoolOf(b).insert(b);
  }

  void FinishEvent(EventId ev, Block* b) {
    backend->DestroyEvent(ev);
    if (--b->event_count == 0) {
      pending_bytes -= b->size;
      ReturnToPool(b);
    }
  }

  // Returns blocks whose cross-stream events have all completed.
  void ProcessEvents() {
    for (auto it = pending.begin(); it != pending.end();) {
      if (!backend->EventCompleted(it->first)) {
        ++it;
        continue;
      }
      const auto [ev, b] = *it;
      it = pending.erase(it);
      FinishEvent(ev, b);
    }
  }

  // Waits for pending frees, then returns every whole free segment; on a
  // backend that commits on touch, the free blocks of live segments give
  // back their pages (NOTE [arena segments]).
  void ReleaseCachedBlocks() {
    if (!pending.empty()) {
      backend->Synchronize();
      while (!pending.empty()) {
        const auto [ev, b] = pending.front();
        pending.pop_front();
        FinishEvent(ev, b);
      }
    }
    for (Pool* pool : {&small_pool, &large_pool}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        // A live graph pool's segments stay: the graph writes them at every replay.
        if (b->stream & kPoolKeyBit) {
          ++it;
          continue;
        }
        if (b->prev != nullptr || b->next != nullptr) {
          if (backend->CommitsOnTouch() && b->committed > 0) {
            backend->Decommit(b->ptr, b->size);
            stats.committed_bytes -= b->committed;
            b->committed = 0;
          }
          ++it;
          continue;
        }
        it = pool->erase(it);
        backend->RawFree(b->ptr, b->size);
        stats.reserved_bytes -= b->size;
        stats.committed_bytes -= b->committed;
        ++stats.num_segment_frees;
        delete b;
      }
    }
  }

  [[noreturn]] void ThrowOutOfMemory(size_t nbytes, size_t segment) {
    ++stats.num_ooms;
    if (Capturing()) {
      OCTET_FAIL("out of memory on ", options.device_name, " during a graph capture: tried to allocate ",
                 FormatBytes(nbytes), " (a new ", FormatBytes(segment), " segment); ",
                 FormatBytes(stats.allocated_bytes), " allocated, ", FormatBytes(stats.reserved_bytes),
                 " reserved; the cache cannot be released while capturing (NOTE [graph pools]): call "
                 "octet::EmptyCache before Capture");
    }
    const size_t cached = stats.reserved_bytes - stats.allocated_bytes - pending_bytes;
    std::string report = backend->MemoryReport();
    OCTET_FAIL("out of memory on ", options.device_name, ": tried to allocate ", FormatBytes(nbytes), " (",
               nbytes, " bytes, needing a new ", FormatBytes(segment), " segment); the caching allocator has ",
               FormatBytes(stats.allocated_bytes), " allocated and ", FormatBytes(stats.reserved_bytes),
               " reserved (", FormatBytes(cached), " of it cached but unusable for this request) after releasing "
               "its cache and retrying",
               report.empty() ? "" : "; ", report);
  }
};

CachingAllocator::CachingAllocator(CachingAllocatorBackend* backend, Options options)
    : impl_(std::make_unique<Impl>()) {
  OCTET_CHECK(backend != nullptr, "CachingAllocator: null backend");
  impl_->backend = backend;
  impl_->options = std::move(options);
}

CachingAllocator::~CachingAllocator() {
  try {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ReleaseCachedBlocks();
  } catch (...) {
    // Destructors must not throw; the process is going away anyway.
  }
  // Bookkeeping of blocks still in pools (parts of segments with live blocks)
  // and of live blocks: their memory stays with the backend.
  std::set<Block*> all;
  for (Block* b : impl_->small_pool) all.insert(b);
  for (Block* b : impl_->large_pool) all.insert(b);
  for (auto& [p, b] : impl_->active) all.insert(b);
  for (auto& [ev, b] : impl_->pending) all.insert(b);
  for (Block* b : impl_->deferred_frees) all.insert(b);
  for (Block* b : all) delete b;
}

size_t CachingAllocator::RoundSize(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::SegmentSize(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void* CachingAllocator::Allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.Capturing()) m.ProcessEvents();  // event queries are illegal during a capture
  stream = m.Route(stream);
  OCTET_CHECK(nbytes <= SIZE_MAX - kRoundLarge, "out of memory on ", m.options.device_name, ": tried to allocate ",
              nbytes, " bytes");
  const size_t size = RoundSize(nbytes);
  const size_t arena = m.options.arena_segment_size;
  const bool small = arena == 0 && size <= kSmallSize;  // NOTE [arena segments]: one pool
  Pool& pool = small ? m.small_pool : m.large_pool;

  Block* block = m.TakeFreeBlock(pool, stream, size);
  if (block != nullptr) {
    ++m.stats.cache_hits;
  } else {
    size_t segment = SegmentSize(size);
    void* p = nullptr;
    if (arena > segment) {
      p = m.backend->RawAlloc(arena);
      if (p != nullptr) segment = arena;  // else the regular size (NOTE [arena segments])
    }
    if (p == nullptr) p = m.backend->RawAlloc(segment);
    if (p == nullptr && m.Capturing()) m.ThrowOutOfMemory(nbytes, segment);
    if (p == nullptr) {
      // NOTE [caching allocator] OOM path: give back everything cached, retry once.
      ++m.stats.num_alloc_retries;
      m.ReleaseCachedBlocks();
      block = m.TakeFreeBlock(pool, stream, size);  // a pending free may fit now
      if (block == nullptr) p = m.backend->RawAlloc(segment);
      if (block == nullptr && p == nullptr) m.ThrowOutOfMemory(nbytes, segment);
    }
    if (block == nullptr) {
      block = new Block(stream, segment, static_cast<char*>(p), small);
      block->committed = m.backend->CommitsOnTouch() ? 0 : segment;
      m.stats.committed_bytes += block->committed;
      m.stats.reserved_bytes += segment;
      m.stats.peak_reserved_bytes = std::max(m.stats.peak_reserved_bytes, m.stats.reserved_bytes);
      ++m.stats.num_segment_allocs;
      if (stream & Impl::kPoolKeyBit) {
        m.pool_segments[stream] += segment;
        m.stats.pool_bytes += segment;
      }
    } else {
      ++m.stats.cache_hits;
    }
  }

  // The part handed out is about to be written: all of it counts as
  // committed. A split free block's committed bytes are taken to lie at its
  // front, where the part handed out comes from, so the remainder keeps only
  // what exceeds that part (an estimate: NOTE [arena segments]).
  const size_t was_committed = block->committed;
  size_t rest_committed = 0;
  if (m.ShouldSplit(block, size)) {
    Block* rest = new Block(stream, block->size - size, block->ptr + size, small);
    rest->committed = rest_committed = was_committed - std::min(was_committed, size);
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.insert(rest);
  }
  block->committed = block->size;
  m.stats.committed_bytes = m.stats.committed_bytes - was_committed + block->size + rest_committed;
  m.stats.peak_committed_bytes = std::max(m.stats.peak_committed_bytes, m.stats.committed_bytes);
  block->allocated = true;
  block->requested = nbytes;
  m.active.emplace(block->ptr, block);
  m.stats.allocated_bytes += block->size;
  m.stats.requested_bytes += nbytes;
  m.stats.peak_allocated_bytes = std::max(m.stats.peak_allocated_bytes, m.stats.allocated_bytes);
  ++m.stats.num_allocs;
  return block->ptr;
}

void CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.active.find(ptr);
  OCTET_CHECK(it != m.active.end(), "caching allocator (", m.options.device_name, "): Free of pointer ", ptr,
              " which it did not allocate, or which was already freed");
  Block* b = it->second;
  m.active.erase(it);
  b->allocated = false;
  m.stats.allocated_bytes -= b->size;
  m.stats.requested_bytes -= b->requested;
  b->requested = 0;
  ++m.stats.num_frees;
  if (b->stream_uses.empty()) {
    m.ReturnToPool(b);
  } else if (m.Capturing()) {
    m.deferred_frees.push_back(b);  // no events may be recorded now
    m.pending_bytes += b->size;
  } else {
    m.FreeCrossStream(b);
  }
}

void CachingAllocator::RecordStream(void* ptr, StreamId stream) {
  if (ptr == nullptr) return;
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.active.find(ptr);
  OCTET_CHECK(it != m.active.end(), "caching allocator (", m.options.device_name, "): RecordStream on pointer ",
              ptr, " which is not a live allocation");
  Block* b = it->second;
  if (stream == b->stream) return;
  if (auto o = m.pool_origin.find(b->stream); o != m.pool_origin.end() && o->second == stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  OCTET_CHECK(!impl_->Capturing(), "EmptyCache on ", impl_->options.device_name,
              " during a graph capture: releasing memory would synchronise the device (NOTE [graph pools])");
  impl_->ReleaseCachedBlocks();
}

CachingAllocator::PoolId CachingAllocator::BeginPool(StreamId stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  OCTET_CHECK(!(stream & Impl::kPoolKeyBit), "BeginPool: stream id ", stream, " has the pool-key bit set");
  OCTET_CHECK(!m.routes.count(stream), "BeginPool: a graph pool is already open for this stream on ",
              m.options.device_name, " (captures on one stream do not nest)");
  const PoolId id = m.next_pool++;
  const StreamId key = Impl::kPoolKeyBit | id;
  m.routes[stream] = key;
  m.pool_origin[key] = stream;
  return id;
}

void CachingAllocator::EndPool(StreamId stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  OCTET_CHECK(m.routes.erase(stream) == 1, "EndPool: no graph pool is open for this stream on ",
              m.options.device_name);
  if (m.Capturing()) return;
  std::vector<Block*> deferred;
  deferred.swap(m.deferred_frees);
  for (Block* b : deferred) {
    m.pending_bytes -= b->size;
    m.FreeCrossStream(b);
  }
}

void CachingAllocator::ReleasePool(PoolId pool) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  const StreamId key = Impl::kPoolKeyBit | pool;
  auto origin = m.pool_origin.find(key);
  OCTET_CHECK(origin != m.pool_origin.end(), "ReleasePool: graph pool ", pool, " is not live on ",
              m.options.device_name);
  for (const auto& [stream, routed] : m.routes)
    OCTET_CHECK(routed != key, "ReleasePool: graph pool ", pool, " is still open (EndPool first)");
  const StreamId stream = origin->second;
  // Free blocks move between sets (the stream is part of the key); live,
  // pending and deferred ones are retagged in place.
  for (Pool* set : {&m.small_pool, &m.large_pool}) {
    std::vector<Block*> moved;
    for (auto it = set->begin(); it != set->end();) {
      if ((*it)->stream == key) {
        moved.push_back(*it);
        it = set->erase(it);
      } else {
        ++it;
      }
    }
    for (Block* b : moved) {
      b->stream = stream;
      set->insert(b);
    }
  }
  for (auto& [ptr, b] : m.active)
    if (b->stream == key) b->stream = stream;
  for (auto& [ev, b] : m.pending)
    if (b->stream == key) b->stream = stream;
  for (Block* b : m.deferred_frees)
    if (b->stream == key) b->stream = stream;
  m.stats.pool_bytes -= m.pool_segments[key];
  m.pool_segments.erase(key);
  m.pool_origin.erase(origin);
}

CachingAllocatorStats CachingAllocator::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  CachingAllocatorStats s = impl_->stats;
  s.cached_bytes = s.reserved_bytes - s.allocated_bytes - impl_->pending_bytes;
  return s;
}

void CachingAllocator::ResetPeakStats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
  impl_->stats.peak_reserved_bytes = impl_->stats.reserved_bytes;
  impl_->stats.peak_committed_bytes = impl_->stats.committed_bytes;
}

std::string FormatBytes(size_t nbytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (nbytes < 1024) return std::to_string(nbytes) + " B";
  double v = static_cast<double>(nbytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace octet
