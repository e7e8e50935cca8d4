// GlooProcessGroup over real processes on loopback: every collective for
// world sizes 2, 3 and 4 and dtypes f32, bf16, fp8_e4m3 and fp8_e5m2 against
// the sequential result, rendezvous through a FileStore.
//
// Each rank builds every rank's input itself (deterministic values), so it
// computes the reference locally: the f32 sum in rank order of the values as
// the inputs hold them (FP8 dequantized with each rank's own scale), then the
// single rounding to the output dtype (NOTE [reduce in fp32] in
// distributed/process_group.h). Results must match that bit for bit. Each is
// also checked against the float64 sum within the bound its dtype implies:
//   |result - exact| <= |exact| * 2^-(m+1) + 0.5 * ulp_sub / scale + slack,
// m = mantissa bits (23, 7, 3, 2), ulp_sub = smallest subnormal of the FP8
// format (2^-9, 2^-16) over the output scale, slack = 2^-22 * sum |x| for the
// f32 additions.
#include <octet/distributed/process_group.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/scaling.h>
#include <octet/distributed/init.h>
#include "tests/distributed/multiprocess.h"

namespace octet::dist {
namespace {

using testing::ExpectAllPassed;
using testing::FreshDir;
using testing::IsWorker;
using testing::RunRanks;

const DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2};

int MantissaBits(DType dt) {
  switch (dt) {
    case DType::kFloat32: return 23;
    case DType::kBFloat16: return 7;
    case DType::kFloat8E4M3: return 3;
    default: return 2;
  }
}
double SmallestSubnormal(DType dt) {
  return dt == DType::kFloat8E4M3 ? std::ldexp(1.0, -9) : dt == DType::kFloat8E5M2 ? std::ldexp(1.0, -16) : 0.0;
}

// Rank r's real input value i of test `salt`: in [-2, 2) * (r + 1), so FP8
// ranks quantize with different scales.
float Value(int r, int64_t i, int salt) {
  uint32_t h = static_cast<uint32_t>(r * 7919 + i * 104729 + salt * 1299709) * 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
  return (u * 4.0f - 2.0f) * static_cast<float>(r + 1);
}

float Fp8Max(DType dt) { return static_cast<float>(Info(dt).max_finite); }

// A tensor of `dt` holding `values` (FP8: current scaling, scale = max/amax).
Tensor Encode(const std::vector<float>& values, DType dt, float fixed_scale = 0.0f) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (!IsFp8(dt)) return FromVector(values, {n}).To(dt);
  const float amax = AmaxRow(values.data(), n);
  const float scale = fixed_scale > 0 ? fixed_scale : ComputeScale(amax, Fp8Max(dt), 0, 1.0f, false);
  Tensor t = Empty({n}, {.dtype = dt});
  QuantizeRow(values.data(), scale, dt, Fp8Saturation::kSatFinite, static_cast<uint8_t*>(t.raw_data()), n);
  t.impl()->set_scale_meta(MakePerTensorScale(scale, amax));
  return t;
}

std::vector<float> RankValues(int r, int64_t n, int salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Value(r, i, salt);
  return v;
}

// What rank r's input of dtype dt really holds.
std::vector<float> Held(int r, int64_t n, int salt, DType dt) { return Encode(RankValues(r, n, salt), dt).ToFloats(); }

float Combine(float a, float b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return a + b;
    case ReduceOp::kMax: return b > a ? b : a;
    case ReduceOp::kMin: return b < a ? b : a;
  }
  return 0;
}

// The sequential reference: f32 reduction in rank order of what the inputs hold.
std::vector<float> SequentialF32(int world, int64_t n, int salt, DType dt, ReduceOp op) {
  std::vector<float> acc = Held(0, n, salt, dt);
  for (int r = 1; r < world; ++r) {
    const std::vector<float> h = Held(r, n, salt, dt);
    for (int64_t i = 0; i < n; ++i) acc[i] = Combine(acc[i], h[i], op);
  }
  return acc;
}

void ExpectSameBytes(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  ASSERT_EQ(std::memcmp(got.raw_data(), want.raw_data(), got.nbytes()), 0)
      << what << "\n got " << got.ToString() << "\nwant " << want.ToString();
  if (IsFp8(got.dtype())) EXPECT_EQ(ScaleInvValue(got), ScaleInvValue(want)) << what;
}

// The float64 bound of the header comment, for a sum.
void ExpectWithinBound(const Tensor& got, int world, int64_t n, int salt, DType dt, const std::string& what) {
  const std::vector<float> g = got.ToFloats();
  const double scale = IsFp8(dt) ? ScaleValue(got) : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    double exact = 0, abs_sum = 0;
    for (int r = 0; r < world; ++r) {
      const double x = Held(r, n, salt, dt)[i];
      exact += x;
      abs_sum += std::fabs(x);
    }
    const double bound = std::fabs(exact) * std::ldexp(1.0, -(MantissaBits(dt) + 1)) +
                         0.5 * SmallestSubnormal(dt) / scale + std::ldexp(abs_sum, -22);
    ASSERT_LE(std::fabs(g[i] - exact), bound) << what << " element " << i;
  }
}

void CheckAllReduce(ProcessGroup& pg, DType dt, int64_t n, ReduceOp op, int salt) {
  const int world = pg.size();
  const std::string what = std::string("AllReduce ") + Name(op) + " " + Name(dt) + " n=" + std::to_string(n);
  Tensor t = Encode(RankValues(pg.rank(), n, salt), dt);
  pg.AllReduce(t, op)->Wait();
  const std::vector<float> ref = SequentialF32(world, n, salt, dt, op);
  ExpectSameBytes(t, Encode(ref, dt), what);
  if (op == ReduceOp::kSum) ExpectWithinBound(t, world, n, salt, dt, what);
}

void CheckReduceScatter(ProcessGroup& pg, DType dt, int64_t m, ReduceOp op, int salt) {
  const int world = pg.size();
  const std::string what = std::string("ReduceScatter ") + Name(op) + " " + Name(dt) + " m=" + std::to_string(m);
  Tensor in = Encode(RankValues(pg.rank(), m * world, salt), dt);
  Tensor out = Empty({m}, {.dtype = dt});
  pg.ReduceScatter(in, out, op)->Wait();
  const std::vector<float> full = SequentialF32(world, m * world, salt, dt, op);
  const std::vector<float> mine(full.begin() + pg.rank() * m, full.begin() + (pg.rank() + 1) * m);
  ExpectSameBytes(out, Encode(mine, dt), what);
}

void CheckAllGather(ProcessGroup& pg, DType dt, int64_t m, int salt) {
  const int world = pg.size();
  const std::string what = std::string("AllGather ") + Name(dt);
  const float shared = IsFp8(dt) ? 16.0f : 0.0f;  // one scale for every rank
  Tensor in = Encode(RankValues(pg.rank(), m, salt), dt, shared);
  Tensor out = Empty({m * world}, {.dtype = dt});
  pg.AllGather(in, out)->Wait();
  std::vector<float> want;
  for (int r = 0; r < world; ++r) {
    const std::vector<float> v = RankValues(r, m, salt);
    want.insert(want.end(), v.begin(), v.end());
  }
  ExpectSameBytes(out, Encode(want, dt, shared), what);
}

void CheckBroadcast(ProcessGroup& pg, DType dt, int64_t n, int salt) {
  const int root = pg.size() - 1;
  Tensor t = Encode(RankValues(pg.rank(), n, salt), dt);
  pg.Broadcast(t, root)->Wait();
  ExpectSameBytes(t, Encode(RankValues(root, n, salt), dt), std::string("Broadcast ") + Name(dt));
}

void CheckAllToAll(ProcessGroup& pg, DType dt, int64_t k, int salt) {
  const int world = pg.size();
  const float shared = IsFp8(dt) ? 8.0f : 0.0f;
  Tensor in = Encode(RankValues(pg.rank(), k * world, salt), dt, shared);
  Tensor out = Empty({k * world}, {.dtype = dt});
  pg.AllToAll(in, out)->Wait();
  std::vector<float> want;
  for (int s = 0; s < world; ++s) {
    const std::vector<float> v = RankValues(s, k * world, salt);
    want.insert(want.end(), v.begin() + pg.rank() * k, v.begin() + (pg.rank() + 1) * k);
  }
  ExpectSameBytes(out, Encode(want, dt, shared), std::string("AllToAll ") + Name(dt));
}

// ---- workers (run by the tests below as separate processes) --------------------

TEST(GlooWorker, DISABLED_Collectives) {
  ASSERT_TRUE(IsWorker());
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  EXPECT_EQ(pg.backend(), "gloo");
  int salt = 0;
  for (DType dt : kDTypes) {
    for (int64_t n : {1, 7, 64}) {  // 1 and 7 are not multiples of the world size: padded slices
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) CheckAllReduce(pg, dt, n, op, ++salt);
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) CheckReduceScatter(pg, dt, 5, op, ++salt);
    CheckAllGather(pg, dt, 6, ++salt);
    CheckBroadcast(pg, dt, 9, ++salt);
    CheckAllToAll(pg, dt, 3, ++salt);
    pg.Barrier()->Wait();
  }
  // FP8 AllGather with a different scale per rank: one output cannot hold
  // them; every rank refuses with the same error, and the group stays usable.
  Tensor in = Encode(RankValues(pg.rank(), 4, 99), DType::kFloat8E4M3);
  Tensor out = Empty({4 * pg.size()}, {.dtype = DType::kFloat8E4M3});
  try {
    pg.AllGather(in, out)->Wait();
    ADD_FAILURE() << "AllGather with per-rank scales did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared scale"), std::string::npos) << e.what();
  }
  // Asynchronous: several collectives in flight, waited in reverse order.
  std::vector<Tensor> ts;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 4; ++i) {
    ts.push_back(Full({3}, pg.rank() + i));
    works.push_back(pg.AllReduce(ts.back()));
  }
  for (int i = 3; i >= 0; --i) works[i]->Wait();
  const int rank_sum = pg.size() * (pg.size() - 1) / 2;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ts[i].At({0}), rank_sum + pg.size() * i);
  // Bytes sent by an f32 AllReduce of 4·N elements: 2·(N-1) slices of 4 elements.
  pg.ResetCounters();
  pg.AllReduce(Zeros({4 * pg.size()}))->Wait();
  EXPECT_EQ(pg.counters().bytes_sent, 2 * (pg.size() - 1) * 4 * 4);
}

// ---- the tests -------------------------------------------------------------------

class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, EveryCollectiveEveryDtypeMatchesSequentialResult) {
  if (IsWorker()) GTEST_SKIP();
  const int world = GetParam();
  const std::string dir = FreshDir("coll" + std::to_string(world));
  auto results = RunRanks(world, "GlooWorker.DISABLED_Collectives",
                          {{"OCTET_MASTER", dir + "/store"}, {"OCTET_TIMEOUT_MS", "20000"}}, dir);
  ExpectAllPassed(results);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectives, ::testing::Values(2, 3, 4));

TEST(GlooSingleRank, CollectivesAreIdentityWithoutAStore) {
  if (IsWorker()) GTEST_SKIP();
  DistEnv env;  // rank 0 of 1, no OCTET_MASTER
  DistContext dist;
  ASSERT_NO_THROW(dist = InitProcessGroup(env));
  Tensor t = FromVector(std::vector<float>{1.5f, -2.0f}, {2});
  dist.group->AllReduce(t)->Wait();
  EXPECT_EQ(t.ToFloats(), (std::vector<float>{1.5f, -2.0f}));
  Tensor out = Empty({2});
  dist.group->AllGather(t, out)->Wait();
  EXPECT_EQ(out.ToFloats(), (std::vector<float>{1.5f, -2.0f}));
  dist.group->Barrier()->Wait();
}

TEST(GlooSingleRank, BadTensorsAreRejectedWhenIssued) {
  if (IsWorker()) GTEST_SKIP();
  DistContext dist;
  ASSERT_NO_THROW(dist = InitProcessGroup(DistEnv{}));
  ProcessGroup& pg = *dist.group;
  EXPECT_THROW(pg.AllReduce(Zeros({2}, {.dtype = DType::kInt64})), Error);
  EXPECT_THROW(pg.AllReduce(Zeros({2, 2}).T()), Error);  // not contiguous
  EXPECT_THROW(pg.ReduceScatter(Zeros({3}), Zeros({2})), Error);
  EXPECT_THROW(pg.Broadcast(Zeros({3}), 1), Error);
}

}  // namespace
}  // namespace octet::dist
