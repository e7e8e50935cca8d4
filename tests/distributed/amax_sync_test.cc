// AllReduceAmaxes: after one O1 step on different data per rank, every rank
// holds the elementwise MAX of the ranks' amax histories and the MIN of their
// scales (one collective), and the next quantization uses the same scale on
// every rank.
#include <octet/distributed/amax_sync.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include <octet/distributed/init.h>
#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/linear.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/distributed/multiprocess.h"

namespace octet::dist {
namespace {

Tensor Data(int rank, const Shape& shape) {
  std::vector<float> v(Numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * i + rank) * (rank + 1);
  return FromVector(v, shape);
}

TEST(AmaxWorker, DISABLED_ReducesEverySlot) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  const int world = pg.size();
  nn::Linear lin({.in = 16, .out = 16});
  lin.SetAmp(nn::amp::Level::kO1);
  nn::amp::Fp8State fp8(lin);
  // Without the hook: each rank rolls its own amaxes, so the histories differ.
  for (int step = 0; step < 2; ++step) {
    Sum(Square(lin(Data(pg.rank() + step, {16, 16})))).Backward();
    fp8.Update();
  }
  const nn::NamedTensors state = nn::amp::ScalingState(lin);
  ASSERT_EQ(state.size(), 6u) << "three slots, each with a history and a scale";
  // Every rank's values before the reduction.
  std::vector<std::vector<float>> before;
  for (const auto& [name, t] : state) {
    Tensor all = Empty({world * t.numel()});
    pg.AllGather(t.Contiguous(), all)->Wait();
    before.push_back(all.ToFloats());
  }
  const int64_t n = AllReduceAmaxes(pg, lin);
  int64_t expected_n = 0;
  for (const auto& [name, t] : state) expected_n += t.numel();
  EXPECT_EQ(n, expected_n);
  bool ranks_differed = false;
  for (size_t k = 0; k < state.size(); ++k) {
    const bool is_scale = state[k].first.find("_scale") != std::string::npos;
    const std::vector<float> got = state[k].second.ToFloats();
    for (size_t i = 0; i < got.size(); ++i) {
      float want = before[k][i];
      for (int r = 1; r < world; ++r) {
        const float v = before[k][r * got.size() + i];
        ranks_differed |= v != want;
        want = is_scale ? std::min(want, v) : std::max(want, v);
      }
      EXPECT_EQ(got[i], want) << state[k].first << "[" << i << "]";
    }
  }
  EXPECT_TRUE(ranks_differed) << "the test data should give different amaxes per rank";

  // Through the manager's hook (what train_gpt uses): Update() MAX-reduces the
  // step's pending amaxes first, so the newest history entry is the max over
  // the ranks and every rank ends with identical histories and scales.
  SyncAmaxesThrough(pg, fp8);
  Sum(Square(lin(Data(3 * pg.rank() + 5, {16, 16})))).Backward();
  const int64_t slots = fp8.num_slots();
  Tensor pending = Empty({world * slots});
  pg.AllGather(fp8.amax().Contiguous(), pending)->Wait();
  const std::vector<float> pend = pending.ToFloats();
  fp8.Update();
  const std::vector<float> hist = fp8.amax_history().ToFloats();  // [S, H], newest first
  const int64_t h = fp8.amax_history().numel() / slots;
  bool pending_differed = false;
  for (int64_t s = 0; s < slots; ++s) {
    float want = pend[s];
    for (int r = 1; r < world; ++r) {
      pending_differed |= pend[r * slots + s] != want;
      want = std::max(want, pend[r * slots + s]);
    }
    // A slot no rank recorded this step (the weight: its FP8 copy is reused
    // until the next optimizer step) holds -1 and keeps its history.
    if (want >= 0) EXPECT_EQ(hist[s * h], want) << "slot " << s;
  }
  EXPECT_TRUE(pending_differed) << "the test data should give different amaxes per rank";
  for (const Tensor& t : {fp8.amax_history(), fp8.scale()}) {
    Tensor all = Empty({world * t.numel()});
    pg.AllGather(t.Contiguous(), all)->Wait();
    const std::vector<float> v = all.ToFloats();
    for (int r = 1; r < world; ++r)
      for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(v[r * t.numel() + i], v[i]) << "rank " << r << " [" << i << "]";
  }
}

TEST(AmaxSync, ThreeRanksHoldTheMaxHistoryAndMinScale) {
  if (testing::IsWorker()) GTEST_SKIP();
  const std::string dir = testing::FreshDir("amax");
  testing::ExpectAllPassed(testing::RunRanks(
      3, "AmaxWorker.DISABLED_ReducesEverySlot", {{"OCTET_MASTER", dir + "/store"}, {"OCTET_TIMEOUT_MS", "20000"}},
      dir));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace octet::dist
