// octet::Graph's host side (core/graph.h, NOTE [captured steps]) where no
// CUDA graph exists: the CPU refuses to capture, the capture rules throw with
// messages naming the call, replay hooks run in order, and storages whose
// versions a captured step bumped are bumped again after each replay.
// tests/cuda/graph_cuda_test.cc runs real captures on a GPU.
#include <octet/core/graph.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <octet/core/graph_internal.h>
#include <octet/core/host_reads.h>
#include <octet/core/random.h>
#include <octet/ops/random.h>

#include "tests/test_util.h"

namespace octet {
namespace {

void ExpectError(const std::string& msg, const std::string& text) {
  EXPECT_NE(msg.find(text), std::string::npos) << "message: '" << msg << "', expected to contain '" << text << "'";
}

TEST(Graph, TheCpuHasNothingToCapture) {
  Graph g;
  bool ran = false;
  ExpectError(testing::ErrorOf([&] { g.Capture(kCPU, [&] { ran = true; }); }), "nothing to capture");
  EXPECT_FALSE(ran);
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(IsCapturing());
  ExpectError(testing::ErrorOf([&] { g.Replay(); }), "nothing was captured");
}

TEST(Graph, CaptureRulesNameTheCall) {
  const Tensor t = Full({3}, 2.0);
  internal::CaptureEmulationForTesting capture;
  EXPECT_TRUE(IsCapturing());
  ExpectError(testing::ErrorOf([&] { (void)t.Narrow(0, 0, 1).Item(); }), "reading a tensor's values on the host");
  ExpectError(testing::ErrorOf([&] { (void)t.ToDoubles(); }), "inside a captured graph");
  ExpectError(testing::ErrorOf([&] { (void)FromVector(std::vector<float>{1, 2}, {2}); }), "host values");
  ExpectError(testing::ErrorOf([&] { (void)Arange(4); }), "host values");
  ExpectError(testing::ErrorOf([&] { (void)Randn({4}); }), "drawing random numbers");
  ExpectError(testing::ErrorOf([&] { (void)Dropout(t, 0.5, /*training=*/true); }), "dropout");
  // What a captured step is made of still runs: device-side work.
  Tensor u = Full({3}, 1.0);
  EXPECT_NO_THROW(u.Fill_(3.0));
  EXPECT_NO_THROW((void)Dropout(t, 0.5, /*training=*/false));
  ExpectError(testing::ErrorOf([] { internal::CaptureEmulationForTesting nested; }), "already under way");
}

TEST(Graph, ReplayHooksRunBeforeAndAfterTheReplay) {
  std::vector<std::string> log;
  {
    internal::CaptureEmulationForTesting capture;
    internal::AtReplay(
        [&] {
          // The host work of a replay is not part of the capture.
          log.push_back(IsCapturing() ? "before (capturing)" : "before");
          (void)FromVector(std::vector<float>{1}, {1});
        },
        [&] { log.push_back(IsCapturing() ? "after (capturing)" : "after"); });
    log.push_back("captured work");
  }
  EXPECT_EQ(log, (std::vector<std::string>{"before", "captured work", "after"}));
  // Outside a capture AtReplay does nothing.
  internal::AtReplay([&] { log.push_back("x"); }, [&] { log.push_back("y"); });
  EXPECT_EQ(log.size(), 3u);
}

TEST(Graph, VersionBumpsOfACapturedStepAreRepeatedAfterTheReplay) {
  Tensor kept = Zeros({2});
  uint64_t inside = 0;
  {
    internal::CaptureEmulationForTesting capture;
    kept.Fill_(1.0);  // bumps the version
    inside = kept.storage()->version();
    Tensor temp = Zeros({2});
    temp.Fill_(2.0);  // a storage that dies before the replay's bump
  }
  EXPECT_GT(kept.storage()->version(), inside);
  const uint64_t outside = kept.storage()->version();
  kept.Fill_(3.0);  // not capturing: one bump, nothing recorded
  EXPECT_EQ(kept.storage()->version(), outside + 1);
}

}  // namespace
}  // namespace octet
