// The caching allocator's bookkeeping (core/caching_allocator.h), driven by a
// fake device: segments are fake addresses (never dereferenced), events
// complete only when the test says so. Graph pools: caching_allocator_pool_test.cc.
#include <octet/core/caching_allocator.h>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tests/core/fake_allocator_backend.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using namespace ::octet::fake_device;  // NOLINT(build/namespaces): the fake device's names

TEST(CachingAllocator, RoundsTo512AndPicksSegmentSizes) {
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(3 * kMiB + 1), 3 * kMiB + 512);
  EXPECT_EQ(CachingAllocator::SegmentSize(512), 2 * kMiB);           // small pool
  EXPECT_EQ(CachingAllocator::SegmentSize(1 * kMiB), 2 * kMiB);      // still small
  EXPECT_EQ(CachingAllocator::SegmentSize(1 * kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(10 * kMiB), 10 * kMiB);    // own segment, 2 MiB multiple
  EXPECT_EQ(CachingAllocator::SegmentSize(10 * kMiB + 512), 12 * kMiB);
}

TEST(CachingAllocator, ZeroBytesIsNullAndFreeOfNullIsANoOp) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  EXPECT_EQ(a.Allocate(0, kS1), nullptr);
  a.Free(nullptr);
  EXPECT_EQ(fake.raw_alloc_calls, 0);
  EXPECT_EQ(a.Stats().num_allocs, 0u);
}

TEST(CachingAllocator, SmallRequestsSplitOneTwoMiBSegment) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(1000, kS1);
  void* q = a.Allocate(100, kS1);
  void* r = a.Allocate(4096, kS1);
  ASSERT_EQ(fake.segments.size(), 1u);
  const auto [base, seg_size] = *fake.segments.begin();
  EXPECT_EQ(seg_size, 2 * kMiB);
  EXPECT_EQ(p, base);
  EXPECT_EQ(Ptr(q), Ptr(base) + 1024);  // 1000 rounds to 1024
  EXPECT_EQ(Ptr(r), Ptr(base) + 1536);  // 100 rounds to 512
  const CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.allocated_bytes, 1024u + 512u + 4096u);
  EXPECT_EQ(s.requested_bytes, 1000u + 100u + 4096u);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.cached_bytes, 2 * kMiB - (1024 + 512 + 4096));
  EXPECT_EQ(s.cache_hits, 2u);  // q and r came from the split remainder
  EXPECT_EQ(s.num_segment_allocs, 1u);
  a.Free(p);
  a.Free(q);
  a.Free(r);
}

TEST(CachingAllocator, FreedNeighboursMergeBackIntoAWholeSegment) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(1024, kS1);
  void* q = a.Allocate(1024, kS1);
  void* r = a.Allocate(1024, kS1);
  void* base = fake.segments.begin()->first;
  // Free out of order: the middle block merges with both sides last.
  a.Free(p);
  a.Free(r);
  a.Free(q);
  // The whole segment is one free block again: a 1 MiB request (the largest
  // small one) fits at the base without a new segment...
  void* big = a.Allocate(1 * kMiB, kS1);
  EXPECT_EQ(big, base);
  EXPECT_EQ(fake.raw_alloc_calls, 1);
  a.Free(big);
  // ...and EmptyCache can hand the segment back, which it only does for
  // unsplit segments.
  a.EmptyCache();
  EXPECT_TRUE(fake.segments.empty());
  ASSERT_EQ(fake.freed.size(), 1u);
  EXPECT_EQ(fake.freed[0], base);
  EXPECT_EQ(a.Stats().reserved_bytes, 0u);
  EXPECT_EQ(a.Stats().num_segment_frees, 1u);
}

TEST(CachingAllocator, BestFitPicksTheSmallestBlockThatFits) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* big_hole = a.Allocate(8 * kKiB, kS1);
  void* keep1 = a.Allocate(512, kS1);
  void* small_hole = a.Allocate(4 * kKiB, kS1);
  void* keep2 = a.Allocate(512, kS1);
  a.Free(big_hole);
  a.Free(small_hole);  // neighbours are live: no merge
  EXPECT_EQ(a.Allocate(4 * kKiB, kS1), small_hole);
  EXPECT_EQ(a.Allocate(6 * kKiB, kS1), big_hole);  // 8 KiB hole, split
  a.Free(keep1);
  a.Free(keep2);
}

TEST(CachingAllocator, LargeRequestsUseTwentyMiBSegmentsAndSplitOnlyAboveOneMiB) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(3 * kMiB, kS1);
  ASSERT_EQ(fake.segments.size(), 1u);
  EXPECT_EQ(fake.segments.begin()->second, 20 * kMiB);
  void* q = a.Allocate(5 * kMiB, kS1);  // from the 17 MiB remainder
  EXPECT_EQ(Ptr(q), Ptr(p) + 3 * kMiB);
  EXPECT_EQ(fake.raw_alloc_calls, 1);
  // 12 MiB remain; asking for 11.5 MiB leaves 0.5 MiB (not > 1 MiB): no split.
  void* r = a.Allocate(11 * kMiB + 512 * kKiB, kS1);
  EXPECT_EQ(Ptr(r), Ptr(p) + 8 * kMiB);
  EXPECT_EQ(a.Stats().allocated_bytes, 20 * kMiB);
  EXPECT_EQ(a.Stats().cached_bytes, 0u);
  // Small requests never come from the large pool.
  a.Free(q);
  void* s = a.Allocate(4 * kKiB, kS1);
  EXPECT_EQ(fake.raw_alloc_calls, 2);
  EXPECT_EQ(fake.segments.at(s), 2 * kMiB);
  a.Free(p);
  a.Free(r);
  a.Free(s);
}

TEST(CachingAllocator, RequestsOfTenMiBOrMoreGetTheirOwnRoundedSegment) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(19 * kMiB, kS1);  // 20 MiB segment, 1 MiB left: not split
  EXPECT_EQ(fake.segments.at(p), 20 * kMiB);
  EXPECT_EQ(a.Stats().allocated_bytes, 20 * kMiB);
  void* q = a.Allocate(10 * kMiB + 1, kS1);
  EXPECT_EQ(fake.segments.at(q), 12 * kMiB);  // split: 1.5 MiB remainder > 1 MiB
  EXPECT_EQ(a.Stats().allocated_bytes, 20 * kMiB + 10 * kMiB + 512);
  a.Free(p);
  a.Free(q);
}

TEST(CachingAllocator, BlocksAreReusedOnlyOnTheirOwnStream) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(4096, kS1);
  a.Free(p);
  void* q = a.Allocate(4096, kS2);  // other stream: new segment
  EXPECT_NE(q, p);
  EXPECT_EQ(fake.raw_alloc_calls, 2);
  EXPECT_EQ(a.Stats().cache_hits, 0u);
  void* r = a.Allocate(4096, kS1);  // own stream: cached
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.Stats().cache_hits, 1u);
  a.Free(q);
  a.Free(r);
}

TEST(CachingAllocator, CrossStreamUseDefersReuseUntilTheEventCompletes) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(4096, kS1);
  void* guard = a.Allocate(4096, kS1);  // keeps p's block from merging with the rest
  a.RecordStream(p, kS2);
  a.RecordStream(p, kS2);  // twice: one event
  a.RecordStream(p, kS1);  // the allocation stream: nothing to record
  a.Free(p);
  ASSERT_EQ(fake.events.size(), 1u);
  EXPECT_EQ(fake.events[0].stream, kS2);
  CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.num_pending_frees, 1u);
  EXPECT_EQ(s.allocated_bytes, 4096u);           // only `guard`
  EXPECT_EQ(s.cached_bytes, 2 * kMiB - 8192);    // p's 4 KiB is neither allocated nor cached
  // While stream 2 may still be reading p, its memory is not handed out.
  void* q = a.Allocate(4096, kS1);
  EXPECT_NE(q, p);
  EXPECT_FALSE(fake.events[0].destroyed);
  // Stream 2 catches up: the next allocation sees the event and reuses p.
  fake.CompleteEventsOn(kS2);
  void* r = a.Allocate(4096, kS1);
  EXPECT_EQ(r, p);
  EXPECT_TRUE(fake.events[0].destroyed);
  EXPECT_EQ(fake.syncs, 0);
  a.Free(q);
  a.Free(r);
  a.Free(guard);
}

TEST(CachingAllocator, OneEventPerRecordedStream) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(4096, kS1);
  void* guard = a.Allocate(4096, kS1);
  a.RecordStream(p, kS2);
  a.RecordStream(p, 0x3000);
  a.Free(p);
  ASSERT_EQ(fake.events.size(), 2u);
  fake.CompleteEventsOn(kS2);
  EXPECT_NE(a.Allocate(4096, kS1), p);  // 0x3000 still pending
  fake.CompleteEventsOn(0x3000);
  EXPECT_EQ(a.Allocate(4096, kS1), p);
  a.Free(guard);
}

TEST(CachingAllocator, EmptyCacheWaitsForPendingFreesAndKeepsLiveSegments) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* live = a.Allocate(4096, kS1);  // segment A stays (live block)
  void* big = a.Allocate(12 * kMiB, kS1);  // segment B
  void* other = a.Allocate(4096, kS2);     // segment C
  a.RecordStream(big, kS2);
  a.Free(big);    // pending on stream 2
  a.Free(other);  // cached
  EXPECT_EQ(a.Stats().reserved_bytes, 2 * kMiB + 12 * kMiB + 2 * kMiB);
  a.EmptyCache();
  EXPECT_EQ(fake.syncs, 1);  // waited for the pending free
  EXPECT_EQ(fake.segments.size(), 1u);
  EXPECT_TRUE(fake.segments.count(static_cast<char*>(live)));
  const CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.allocated_bytes, 512u * 8);
  EXPECT_EQ(s.num_segment_frees, 2u);
  EXPECT_TRUE(fake.events[0].destroyed);
  a.Free(live);
  a.EmptyCache();
  EXPECT_TRUE(fake.segments.empty());
  EXPECT_EQ(fake.syncs, 1);  // nothing pending: no synchronisation needed
}

TEST(CachingAllocator, StatisticsCountAllocsFreesHitsAndPeaks) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  void* p = a.Allocate(3 * kMiB, kS1);
  void* q = a.Allocate(2 * kMiB, kS1);
  a.Free(p);
  void* r = a.Allocate(1000, kS1);
  CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.num_allocs, 3u);
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(s.cache_hits, 1u);  // q from p's segment
  EXPECT_EQ(s.num_segment_allocs, 2u);
  EXPECT_EQ(s.allocated_bytes, 2 * kMiB + 1024);
  EXPECT_EQ(s.requested_bytes, 2 * kMiB + 1000);
  EXPECT_EQ(s.peak_allocated_bytes, 5 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 22 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 22 * kMiB);
  a.ResetPeakStats();
  s = a.Stats();
  EXPECT_EQ(s.peak_allocated_bytes, 2 * kMiB + 1024);
  a.Free(q);
  a.Free(r);
  s = a.Stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.num_frees, 3u);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes);
  // A backend that commits whole segments: everything reserved is committed.
  EXPECT_EQ(s.committed_bytes, s.reserved_bytes);
  EXPECT_EQ(s.peak_committed_bytes, 22 * kMiB);
}

// ---- NOTE [arena segments] ----

TEST(CachingAllocatorArena, EverySizeComesFromOneSegmentAndFreedBlocksMergeAcrossSizes) {
  FakeBackend fake;
  fake.lazy = true;
  CachingAllocator a(&fake, {.arena_segment_size = 64 * kMiB});
  void* small = a.Allocate(4 * kKiB, kS1);
  void* mid = a.Allocate(3 * kMiB, kS1);
  void* big = a.Allocate(12 * kMiB, kS1);
  ASSERT_EQ(fake.segments.size(), 1u);
  EXPECT_EQ(fake.segments.begin()->second, 64 * kMiB);
  EXPECT_EQ(small, fake.segments.begin()->first);
  EXPECT_EQ(Ptr(mid), Ptr(small) + 4 * kKiB);
  EXPECT_EQ(Ptr(big), Ptr(mid) + 3 * kMiB);
  CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.reserved_bytes, 64 * kMiB);
  // Only what was handed out counts as committed: untouched pages are not resident.
  EXPECT_EQ(s.committed_bytes, 4 * kKiB + 15 * kMiB);
  // The 3 MiB and 12 MiB blocks merge when freed, and a 15 MiB request
  // reuses them: with the regular segments they would sit in a 20 MiB
  // segment and a 12 MiB one, and 15 MiB would need a third.
  a.Free(mid);
  a.Free(big);
  EXPECT_EQ(a.Stats().committed_bytes, 4 * kKiB + 15 * kMiB);  // cached, still resident
  void* again = a.Allocate(15 * kMiB, kS1);
  EXPECT_EQ(again, mid);
  EXPECT_EQ(fake.raw_alloc_calls, 1);
  s = a.Stats();
  EXPECT_EQ(s.committed_bytes, 4 * kKiB + 15 * kMiB);
  EXPECT_EQ(s.peak_committed_bytes, 4 * kKiB + 15 * kMiB);
  // A request larger than the arena gets a segment of its own size.
  void* huge = a.Allocate(65 * kMiB, kS1);
  EXPECT_EQ(fake.segments.at(huge), 66 * kMiB);
  a.Free(huge);
  a.Free(again);
  a.Free(small);
}

TEST(CachingAllocatorArena, ARefusedArenaFallsBackToTheRegularSegmentSize) {
  FakeBackend fake(30 * kMiB);
  fake.lazy = true;
  CachingAllocator a(&fake, {.arena_segment_size = 64 * kMiB});
  void* p = a.Allocate(3 * kMiB, kS1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(fake.raw_alloc_calls, 2);  // the arena, refused; then 20 MiB
  EXPECT_EQ(fake.segments.at(p), 20 * kMiB);
  // One pool: a small request is carved from the same segment.
  void* q = a.Allocate(1000, kS1);
  EXPECT_EQ(Ptr(q), Ptr(p) + 3 * kMiB);
  EXPECT_EQ(fake.raw_alloc_calls, 2);
  EXPECT_EQ(a.Stats().committed_bytes, 3 * kMiB + 1024);
  a.Free(p);
  a.Free(q);
  a.EmptyCache();
  EXPECT_TRUE(fake.segments.empty());
  EXPECT_EQ(a.Stats().committed_bytes, 0u);
}

TEST(CachingAllocatorArena, EmptyCacheGivesBackThePagesOfFreeBlocksInALiveArena) {
  FakeBackend fake;
  fake.lazy = true;
  CachingAllocator a(&fake, {.arena_segment_size = 64 * kMiB});
  void* first = a.Allocate(1 * kMiB, kS1);
  void* middle = a.Allocate(8 * kMiB, kS1);
  void* last = a.Allocate(4 * kKiB, kS1);
  a.Free(middle);
  EXPECT_EQ(a.Stats().committed_bytes, 9 * kMiB + 4 * kKiB);
  a.EmptyCache();
  // The middle block's pages go back; the never-touched tail of the arena
  // has nothing to give back; the live arena stays mapped.
  ASSERT_EQ(fake.decommits.size(), 1u);
  EXPECT_EQ(fake.decommits[0].first, middle);
  EXPECT_EQ(fake.decommits[0].second, 8 * kMiB);
  EXPECT_EQ(fake.segments.size(), 1u);
  CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.committed_bytes, 1 * kMiB + 4 * kKiB);
  EXPECT_EQ(s.reserved_bytes, 64 * kMiB);
  EXPECT_EQ(s.allocated_bytes, 1 * kMiB + 4 * kKiB);
  // Handed out again, the block counts as committed again; a second
  // EmptyCache has nothing more to decommit.
  void* reused = a.Allocate(8 * kMiB, kS1);
  EXPECT_EQ(reused, middle);
  EXPECT_EQ(a.Stats().committed_bytes, 9 * kMiB + 4 * kKiB);
  a.Free(reused);
  a.EmptyCache();
  a.EmptyCache();
  EXPECT_EQ(fake.decommits.size(), 2u);
  // Once every block is free the arena is one whole free block again and
  // goes back to the backend.
  a.Free(first);
  a.Free(last);
  a.EmptyCache();
  EXPECT_TRUE(fake.segments.empty());
  s = a.Stats();
  EXPECT_EQ(s.committed_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
}

TEST(CachingAllocatorArena, WithoutArenasNothingIsDecommitted) {
  FakeBackend fake;  // commits whole segments: Decommit is never called
  CachingAllocator a(&fake, {});
  void* keep = a.Allocate(1 * kMiB + 512, kS1);
  void* freed = a.Allocate(4 * kMiB, kS1);
  a.Free(freed);
  a.EmptyCache();
  EXPECT_TRUE(fake.decommits.empty());
  EXPECT_EQ(a.Stats().committed_bytes, 20 * kMiB);
  a.Free(keep);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  FakeBackend fake(40 * kMiB);
  CachingAllocator a(&fake, {.device_name = "fake:0"});
  void* p = a.Allocate(12 * kMiB, kS1);
  void* q = a.Allocate(14 * kMiB, kS2);
  a.Free(p);
  a.Free(q);
  // 26 MiB cached; a 30 MiB segment fits only once they are given back.
  void* r = a.Allocate(30 * kMiB, kS1);
  ASSERT_NE(r, nullptr);
  const CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_EQ(s.num_segment_frees, 2u);
  EXPECT_EQ(s.reserved_bytes, 30 * kMiB);
  EXPECT_EQ(s.num_ooms, 0u);
  a.Free(r);
}

TEST(CachingAllocator, OutOfMemoryErrorSaysWhatWasAskedAllocatedAndReserved) {
  FakeBackend fake(40 * kMiB);
  CachingAllocator a(&fake, {.device_name = "fake:0"});
  void* p = a.Allocate(30 * kMiB, kS1);
  void* small = a.Allocate(1000, kS1);
  const std::string msg = testing::ErrorOf([&] { a.Allocate(100 * kMiB, kS1); });
  EXPECT_NE(msg.find("out of memory on fake:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tried to allocate 100.00 MiB (104857600 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("30.00 MiB allocated"), std::string::npos) << msg;  // 30 MiB + 1 KiB rounds to 30.00
  EXPECT_NE(msg.find("32.00 MiB reserved"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fake device: 33554432 bytes in use"), std::string::npos) << msg;
  const CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.num_alloc_retries, 1u);
  // The failed request changed nothing else; the allocator still works.
  EXPECT_EQ(s.allocated_bytes, 30 * kMiB + 1024);
  void* q = a.Allocate(1000, kS1);
  EXPECT_NE(q, nullptr);
  a.Free(p);
  a.Free(small);
  a.Free(q);
}

TEST(CachingAllocator, FreeOfAForeignPointerIsAnError) {
  FakeBackend fake;
  CachingAllocator a(&fake, {.device_name = "fake:0"});
  void* p = a.Allocate(4096, kS1);
  int local = 0;
  const std::string msg = testing::ErrorOf([&] { a.Free(&local); });
  EXPECT_NE(msg.find("caching allocator (fake:0): Free of pointer"), std::string::npos) << msg;
  a.Free(p);
  EXPECT_NE(testing::ErrorOf([&] { a.Free(p); }).find("already freed"), std::string::npos);
  EXPECT_NE(testing::ErrorOf([&] { a.RecordStream(p, kS2); }).find("not a live allocation"), std::string::npos);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  FakeBackend fake;
  CachingAllocator a(&fake, {.max_split_size = 4 * kMiB});
  void* p = a.Allocate(12 * kMiB, kS1);
  a.Free(p);
  // A small-large request does not carve up the oversize block.
  void* q = a.Allocate(2 * kMiB, kS1);
  EXPECT_NE(Ptr(q), Ptr(p));
  EXPECT_EQ(fake.segments.at(q), 20 * kMiB);
  // An oversize request takes it whole (7 MiB waste < 20 MiB), unsplit.
  void* r = a.Allocate(5 * kMiB, kS1);
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.Stats().allocated_bytes, 2 * kMiB + 12 * kMiB);
  a.Free(q);
  a.Free(r);
}

TEST(CachingAllocator, ConcurrentAllocateAndFreeKeepTheBooksBalanced) {
  FakeBackend fake;
  CachingAllocator a(&fake, {});
  auto work = [&](CachingAllocator::StreamId stream) {
    std::vector<void*> live;
    for (int i = 0; i < 2000; ++i) {
      live.push_back(a.Allocate(static_cast<size_t>(512 * (1 + i % 37)), stream));
      if (i % 3 == 2) {
        a.Free(live.front());
        live.erase(live.begin());
      }
    }
    for (void* p : live) a.Free(p);
  };
  std::thread t1(work, kS1), t2(work, kS2);
  t1.join();
  t2.join();
  const CachingAllocatorStats s = a.Stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.num_allocs, 4000u);
  EXPECT_EQ(s.num_frees, 4000u);
  a.EmptyCache();
  EXPECT_TRUE(fake.segments.empty());
}

TEST(CachingAllocator, FormatsByteCounts) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(FormatBytes(size_t{80} << 30), "80.00 GiB");
}

}  // namespace
}  // namespace octet
