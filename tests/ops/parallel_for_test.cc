// ParallelFor (ops/cpu/loops.h, NOTE [balanced split]): every index of
// [0, n) is visited exactly once, in ranges that lie inside [0, n), for any
// n, grain and thread count; a thread that stalls has its pieces taken by
// the others; nested and single-thread calls run the whole range inline.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <octet/ops/cpu/loops.h>

namespace octet::cpu {
namespace {

// Counts of body calls per index; fails on a range outside [0, n) or empty.
std::vector<int> Visits(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> counts(static_cast<size_t>(n));
  std::atomic<bool> bad_range{false};
  ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > n || begin >= end) bad_range = true;
    for (int64_t i = begin; i < end && i >= 0 && i < n; ++i) counts[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_FALSE(bad_range) << "n " << n << " grain " << grain;
  std::vector<int> out;
  for (const auto& c : counts) out.push_back(c.load());
  return out;
}

TEST(ParallelFor, VisitsEveryIndexOnceForAnySplit) {
  for (int threads : {1, 2, 3, 4, 7}) {
    const ScopedOmpThreads t(threads);
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4097, 100003}) {
      for (int64_t grain : {1, 2, 16, 1000, 200000}) {
        const std::vector<int> v = Visits(n, grain);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(v[static_cast<size_t>(i)], 1) << "threads " << threads << " n " << n << " grain " << grain
                                                  << " index " << i;
      }
    }
  }
}

// Thread 0 stalls in its first piece; thread 1 must take the rest of thread
// 0's share, from its back, and every index is still visited once. Each
// thread's first call waits until both have taken a piece, so a thread
// woken late cannot find all the work gone.
TEST(ParallelFor, OtherThreadsTakeAStalledThreadsPieces) {
  const ScopedOmpThreads t(2);
  const int64_t n = 1 << 16;
  std::vector<std::atomic<int>> owner(static_cast<size_t>(n));
  for (auto& o : owner) o = -1;
  std::atomic<int> arrived{0};
  std::atomic<int> calls_by_0{0};
  ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    const int me = omp_get_thread_num();
    arrived.fetch_or(1 << me);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (arrived.load() != 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (me == 0 && calls_by_0.fetch_add(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int64_t i = begin; i < end; ++i) {
      int expected = -1;
      ASSERT_TRUE(owner[static_cast<size_t>(i)].compare_exchange_strong(expected, me)) << "index " << i;
    }
  });
  ASSERT_EQ(arrived.load(), 3) << "the team had one thread";
  // Thread 0's share is [0, n/2) in 8 pieces; it slept in the first.
  for (int64_t i = 0; i < n; ++i) ASSERT_NE(owner[static_cast<size_t>(i)].load(), -1) << "index " << i;
  EXPECT_EQ(owner[0].load(), 0) << "thread 0 starts at the front of its share";
  EXPECT_EQ(calls_by_0.load(), 1) << "thread 0 ran only the piece it slept in";
  for (int64_t i = n / 16; i < n; ++i) ASSERT_EQ(owner[static_cast<size_t>(i)].load(), 1) << "index " << i;
}

TEST(ParallelFor, NestedAndSmallCallsRunInline) {
  const ScopedOmpThreads t(2);
  std::vector<std::pair<int64_t, int64_t>> calls;
  std::mutex mu;
  // Below the grain: one call with the whole range.
  ParallelFor(10, 100, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    calls.emplace_back(b, e);
  });
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{0}, int64_t{10}));
  // Inside a parallel region: inline on the calling thread.
  std::atomic<int> inline_calls{0};
#pragma omp parallel num_threads(2)
  {
    ParallelFor(1000, 1, [&](int64_t b, int64_t e) {
      if (b == 0 && e == 1000) inline_calls.fetch_add(1);
    });
  }
  EXPECT_EQ(inline_calls.load(), omp_get_max_threads() >= 2 ? 2 : 1);
}

// ParallelJobs: every index of every job exactly once, within the job's own
// range, with empty jobs first, between and last, for any grain and team.
TEST(ParallelJobs, VisitEveryIndexOfEveryJobOnce) {
  const std::vector<int64_t> sizes = {0, 5, 0, 0, 70001, 1, 3000, 0};
  for (int threads : {1, 2, 3}) {
    const ScopedOmpThreads t(threads);
    for (int64_t grain : {1, 7, 1000, 1 << 20}) {
      std::vector<std::vector<std::atomic<int>>> counts;
      for (int64_t n : sizes) counts.emplace_back(static_cast<size_t>(n));
      std::atomic<bool> bad_range{false};
      std::vector<RangeJob> jobs;
      for (size_t j = 0; j < sizes.size(); ++j) {
        jobs.push_back({sizes[j], [&, j](int64_t begin, int64_t end) {
                          if (begin < 0 || end > sizes[j] || begin >= end) bad_range = true;
                          for (int64_t i = std::max<int64_t>(begin, 0); i < std::min(end, sizes[j]); ++i)
                            counts[j][static_cast<size_t>(i)].fetch_add(1);
                        }});
      }
      ParallelJobs(jobs, grain);
      EXPECT_FALSE(bad_range) << "threads " << threads << " grain " << grain;
      for (size_t j = 0; j < sizes.size(); ++j)
        for (int64_t i = 0; i < sizes[j]; ++i)
          ASSERT_EQ(counts[j][static_cast<size_t>(i)].load(), 1)
              << "threads " << threads << " grain " << grain << " job " << j << " index " << i;
    }
  }
}

}  // namespace
}  // namespace octet::cpu
