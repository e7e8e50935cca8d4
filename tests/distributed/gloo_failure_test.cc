// Failures of a Gloo job, with real processes: a rank killed mid-job and a
// rank that stops answering become errors on every other rank (naming the
// lost rank where the transport tells), never a hang; a stale store, a wrong
// world size and bad variables are clear set-up errors.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string>
#include <thread>

#include <octet/distributed/init.h>
#include <octet/distributed/process_group.h>
#include "tests/distributed/multiprocess.h"
#include "tests/test_util.h"

namespace octet::dist {
namespace {

using octet::testing::MessageOf;
using testing::Describe;
using testing::FreshDir;
using testing::IsWorker;
using testing::RunRanks;

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

// Rank OCTET_TEST_VICTIM dies (SIGKILL) or, with OCTET_TEST_STALL, stops
// answering for a while; every other rank must get an error naming
// OCTET_TEST_EXPECT, then exits 0.
TEST(FailureWorker, DISABLED_LosePeer) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  pg.Barrier()->Wait();
  const int victim = std::atoi(EnvOr("OCTET_TEST_VICTIM", "1").c_str());
  if (pg.rank() == victim) {
    if (std::getenv("OCTET_TEST_STALL") != nullptr) {
      std::this_thread::sleep_for(std::chrono::seconds(4));
      std::_Exit(0);
    }
    ::raise(SIGKILL);
  }
  try {
    for (int i = 0; i < 100; ++i) pg.AllReduce(Zeros({256}))->Wait();
    ADD_FAILURE() << "no error after the peer was lost";
  } catch (const Error& e) {
    std::printf("rank %d error: %s\n", pg.rank(), e.what());
    EXPECT_NE(std::string(e.what()).find(EnvOr("OCTET_TEST_EXPECT", "?")), std::string::npos) << e.what();
  }
  // The group is broken: later collectives fail at once with the first error.
  try {
    pg.Barrier()->Wait();
    ADD_FAILURE() << "a broken group ran a barrier";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
  }
}

// Initialisation must fail with an octet::Error containing OCTET_TEST_EXPECT.
TEST(FailureWorker, DISABLED_InitFails) {
  const std::string msg = MessageOf<Error>([] { InitFromEnvironment(); });
  std::printf("rank error: %s\n", msg.c_str());
  EXPECT_NE(msg.find(EnvOr("OCTET_TEST_EXPECT", "?")), std::string::npos) << msg;
}

void ExpectEveryOtherRankSawIt(const std::vector<testing::RankResult>& results, int victim) {
  for (const auto& r : results) {
    EXPECT_FALSE(r.timed_out) << Describe(results);
    if (r.rank == victim) continue;
    EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe(results);
  }
}

TEST(GlooFailure, KilledRankIsNamedOnEveryOtherRank) {
  if (IsWorker()) GTEST_SKIP();
  const std::string dir = FreshDir("killed");
  auto results = RunRanks(3, "FailureWorker.DISABLED_LosePeer",
                          {{"OCTET_MASTER", dir + "/store"},
                           {"OCTET_TIMEOUT_MS", "10000"},
                           {"OCTET_TEST_VICTIM", "1"},
                           {"OCTET_TEST_EXPECT", "lost rank 1"}},
                          dir, std::chrono::seconds(30));
  EXPECT_EQ(results[1].term_signal, SIGKILL) << Describe(results);
  ExpectEveryOtherRankSawIt(results, 1);
  std::filesystem::remove_all(dir);
}

TEST(GlooFailure, StalledRankTimesOutInsteadOfHanging) {
  if (IsWorker()) GTEST_SKIP();
  const std::string dir = FreshDir("stalled");
  auto results = RunRanks(2, "FailureWorker.DISABLED_LosePeer",
                          {{"OCTET_MASTER", dir + "/store"},
                           {"OCTET_TIMEOUT_MS", "1000"},
                           {"OCTET_TEST_VICTIM", "1"},
                           {"OCTET_TEST_STALL", "1"},
                           {"OCTET_TEST_EXPECT", "1000 ms"}},
                          dir, std::chrono::seconds(30));
  ExpectEveryOtherRankSawIt(results, 1);
  std::filesystem::remove_all(dir);
}

TEST(GlooFailure, StaleStoreDirectoryIsRefused) {
  if (IsWorker()) GTEST_SKIP();
  const std::string dir = FreshDir("stale");
  {
    std::unique_ptr<FileStore> store = FileStore::Open(dir + "/store");
    for (int r = 0; r < 2; ++r) store->Set("octet/rank/" + std::to_string(r), "2");
  }
  auto results = RunRanks(2, "FailureWorker.DISABLED_InitFails",
                          {{"OCTET_MASTER", dir + "/store"},
                           {"OCTET_TIMEOUT_MS", "2000"},
                           {"OCTET_TEST_EXPECT", "stale store"}},
                          dir, std::chrono::seconds(30));
  testing::ExpectAllPassed(results);
  std::filesystem::remove_all(dir);
}

TEST(GlooFailure, WrongWorldSizeIsNamed) {
  if (IsWorker()) GTEST_SKIP();
  const std::string dir = FreshDir("worldsize");
  // Rank 0 thinks the world has 2 ranks, rank 1 thinks 3.
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  const char* expect[] = {"rank 1 was started with world size 3 but rank 0 with 2", "rank 2 never joined"};
  for (int r = 0; r < 2; ++r) {
    logs.push_back(dir + "/rank" + std::to_string(r) + ".log");
    pids.push_back(testing::Spawn({testing::SelfExe(), "--gtest_filter=FailureWorker.DISABLED_InitFails",
                                   "--gtest_also_run_disabled_tests"},
                                  {{"OCTET_RANK", std::to_string(r)},
                                   {"OCTET_WORLD_SIZE", r == 0 ? "2" : "3"},
                                   {"OCTET_MASTER", dir + "/store"},
                                   {"OCTET_TIMEOUT_MS", "2000"},
                                   {"OCTET_TEST_WORKER", "1"},
                                   {"OCTET_TEST_EXPECT", expect[r]}},
                                  logs.back()));
  }
  auto results = testing::WaitAll(pids, logs, std::chrono::seconds(30));
  testing::ExpectAllPassed(results);
  std::filesystem::remove_all(dir);
}

// ---- the environment, in process ------------------------------------------------

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (IsWorker()) GTEST_SKIP();
    for (const char* v : kVars) ::unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
  static constexpr const char* kVars[] = {"OCTET_RANK",   "OCTET_WORLD_SIZE", "OCTET_MASTER",     "OCTET_RUN_ID",
                                          "SLURM_PROCID", "SLURM_NTASKS",     "OCTET_TIMEOUT_MS", "OCTET_BACKEND",
                                          "OCTET_LOCAL_RANK"};
};

TEST_F(EnvTest, DefaultsToASingleRank) {
  DistEnv env;
  ASSERT_NO_THROW(env = ReadDistEnv());
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
}

TEST_F(EnvTest, ReadsSlurmVariables) {
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_NTASKS", "4", 1);
  ::setenv("OCTET_MASTER", "/tmp/x", 1);
  DistEnv env;
  ASSERT_NO_THROW(env = ReadDistEnv());
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.source, "SLURM_*");
}

TEST_F(EnvTest, OctetVariablesWinOverSlurm) {
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_NTASKS", "4", 1);
  ::setenv("OCTET_RANK", "1", 1);
  ::setenv("OCTET_WORLD_SIZE", "2", 1);
  ::setenv("OCTET_MASTER", "/tmp/x", 1);
  DistEnv env;
  ASSERT_NO_THROW(env = ReadDistEnv());
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
}

TEST_F(EnvTest, BackendIsGlooOrNccl) {
  ::setenv("OCTET_BACKEND", "mpi", 1);
  const std::string msg = MessageOf<Error>([] { ReadDistEnv(); });
  EXPECT_NE(msg.find("OCTET_BACKEND='mpi'"), std::string::npos) << msg;
  ::setenv("OCTET_BACKEND", "nccl", 1);
  DistEnv env;
  ASSERT_NO_THROW(env = ReadDistEnv());
  EXPECT_EQ(env.backend, "nccl");
}

TEST_F(EnvTest, BadValuesNameTheVariable) {
  ::setenv("OCTET_RANK", "2", 1);
  ::setenv("OCTET_WORLD_SIZE", "2", 1);
  ::setenv("OCTET_MASTER", "/tmp/x", 1);
  std::string msg = MessageOf<Error>([] { ReadDistEnv(); });
  EXPECT_NE(msg.find("OCTET_RANK=2 is not a rank of a world of 2"), std::string::npos) << msg;
  ::setenv("OCTET_RANK", "x", 1);
  msg = MessageOf<Error>([] { ReadDistEnv(); });
  EXPECT_NE(msg.find("OCTET_RANK='x' is not an integer"), std::string::npos) << msg;
  ::setenv("OCTET_RANK", "0", 1);
  ::unsetenv("OCTET_MASTER");
  msg = MessageOf<Error>([] { ReadDistEnv(); });
  EXPECT_NE(msg.find("OCTET_MASTER is not set"), std::string::npos) << msg;
  ::unsetenv("OCTET_WORLD_SIZE");
  msg = MessageOf<Error>([] { ReadDistEnv(); });
  EXPECT_NE(msg.find("set both OCTET_RANK and OCTET_WORLD_SIZE"), std::string::npos) << msg;
  ::unsetenv("OCTET_RANK");
  ::setenv("OCTET_TIMEOUT_MS", "0", 1);
  msg = MessageOf<Error>([] { ReadDistEnv(); });
  EXPECT_NE(msg.find("OCTET_TIMEOUT_MS=0 must be positive"), std::string::npos) << msg;
  ::unsetenv("OCTET_TIMEOUT_MS");
  ::setenv("OCTET_LOCAL_RANK", "-1", 1);
  msg = MessageOf<Error>([] { ReadDistEnv(); });
  EXPECT_NE(msg.find("OCTET_LOCAL_RANK=-1 is not a local rank in [0, 4095]"), std::string::npos) << msg;
  ::setenv("OCTET_LOCAL_RANK", "1", 1);
  DistEnv env;
  ASSERT_NO_THROW(env = ReadDistEnv());
  EXPECT_EQ(env.local_rank, 1);
}

}  // namespace
}  // namespace octet::dist
