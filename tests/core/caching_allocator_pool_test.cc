// The caching allocator's private pools for graph capture (NOTE [graph
// pools] in core/caching_allocator.h), driven by the fake device of
// fake_allocator_backend.h.
#include <octet/core/caching_allocator.h>

#include <gtest/gtest.h>

#include <string>

#include "tests/core/fake_allocator_backend.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using namespace ::octet::fake_device;  // NOLINT(build/namespaces): the fake device's names

template <typename F>
void ExpectThrowsWith(F&& fn, const std::string& text) {
  const std::string msg = testing::ErrorOf(fn);
  EXPECT_NE(msg.find(text), std::string::npos) << "message: '" << msg << "', expected to contain '" << text << "'";
}

TEST(CachingAllocatorPoolTest, CaptureAllocationsComeFromPrivateSegmentsAndStayPrivate) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, {});
  void* eager = alloc.Allocate(4 * kKiB, kS1);
  alloc.Free(eager);  // cached on kS1
  const CachingAllocator::PoolId pool = alloc.BeginPool(kS1);
  void* a = alloc.Allocate(4 * kKiB, kS1);
  EXPECT_NE(a, eager) << "a capture reused memory cached for eager work";
  EXPECT_EQ(backend.raw_alloc_calls, 2);
  alloc.Free(a);
  void* b = alloc.Allocate(4 * kKiB, kS1);  // reuse inside the capture is fine
  EXPECT_EQ(b, a);
  void* other = alloc.Allocate(4 * kKiB, kS2);  // another stream is not routed
  EXPECT_EQ(backend.raw_alloc_calls, 3);
  alloc.EndPool(kS1);
  EXPECT_EQ(alloc.Stats().pool_bytes, CachingAllocator::kSmallBuffer);

  // After the capture: the freed pool block is the graph's, never an eager block's.
  alloc.Free(b);
  void* c = alloc.Allocate(4 * kKiB, kS1);
  EXPECT_EQ(c, eager);
  void* d = alloc.Allocate(4 * kKiB, kS1);
  EXPECT_NE(Ptr(d), Ptr(a));
  // EmptyCache leaves the live pool's segment alone (the graph writes it at every replay).
  alloc.Free(c);
  alloc.Free(d);
  alloc.Free(other);
  alloc.EmptyCache();
  EXPECT_EQ(backend.segments.count(a), 1u);
  EXPECT_EQ(alloc.Stats().reserved_bytes, CachingAllocator::kSmallBuffer);

  // The graph is gone: its memory becomes ordinary cache of kS1.
  alloc.ReleasePool(pool);
  EXPECT_EQ(alloc.Stats().pool_bytes, 0u);
  void* e = alloc.Allocate(4 * kKiB, kS1);
  EXPECT_EQ(e, a);
  alloc.Free(e);
  alloc.EmptyCache();
  EXPECT_TRUE(backend.segments.empty());
}

TEST(CachingAllocatorPoolTest, LiveBlocksOfAReleasedPoolReturnToTheStream) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, {});
  const CachingAllocator::PoolId pool = alloc.BeginPool(kS1);
  void* kept = alloc.Allocate(3 * kMiB, kS1);  // e.g. a gradient made in the capture
  alloc.EndPool(kS1);
  alloc.ReleasePool(pool);
  alloc.Free(kept);
  void* again = alloc.Allocate(3 * kMiB, kS1);
  EXPECT_EQ(again, kept);
  EXPECT_EQ(backend.raw_alloc_calls, 1);
  alloc.Free(again);
}

TEST(CachingAllocatorPoolTest, NoEventQueriesOrSynchronisationWhileCapturing) {
  FakeBackend backend(/*capacity=*/8 * kMiB);
  CachingAllocator alloc(&backend, {});
  void* shared = alloc.Allocate(4 * kKiB, kS1);
  alloc.RecordStream(shared, kS2);
  alloc.BeginPool(kS1);
  const int queries = backend.event_queries;
  alloc.Free(shared);  // used on kS2: its event is recorded only after the capture
  EXPECT_TRUE(backend.events.empty());
  void* p = alloc.Allocate(4 * kKiB, kS1);
  EXPECT_EQ(backend.event_queries, queries);
  // Out of memory while capturing: an error, not a cache flush (which synchronises).
  ExpectThrowsWith([&] { alloc.Allocate(16 * kMiB, kS1); }, "during a graph capture");
  EXPECT_EQ(backend.syncs, 0);
  ExpectThrowsWith([&] { alloc.EmptyCache(); }, "during a graph capture");
  ExpectThrowsWith([&] { alloc.BeginPool(kS1); }, "already open");
  alloc.EndPool(kS1);
  ASSERT_EQ(backend.events.size(), 1u);
  EXPECT_EQ(backend.events[0].stream, kS2);
  alloc.Free(p);
  ExpectThrowsWith([&] { alloc.EndPool(kS1); }, "no graph pool is open");
  ExpectThrowsWith([&] { alloc.ReleasePool(12345); }, "is not live");
}

TEST(CachingAllocatorPoolTest, ReleasingAnOpenPoolIsRefused) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, {});
  const CachingAllocator::PoolId pool = alloc.BeginPool(kS1);
  ExpectThrowsWith([&] { alloc.ReleasePool(pool); }, "still open");
  alloc.EndPool(kS1);
  alloc.ReleasePool(pool);
}

}  // namespace
}  // namespace octet
