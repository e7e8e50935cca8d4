// octet-run end to end: it runs this test binary's worker tests as ranks.
// A healthy job passes with every line prefixed by its rank; a failing rank, a
// killed rank, a bad -n, a stale store directory and an unreachable Redis
// server are each reported clearly, and nothing hangs. Around any program:
// usage errors, a program that cannot start, a signal to octet-run, and ranks
// outstaying the grace period after a failure.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <octet/distributed/init.h>
#include "tests/distributed/multiprocess.h"

namespace octet::dist {
namespace {

using testing::IsWorker;

using Result = ::octet::testing::CommandResult;

// octet-run's path, quoted for a shell command line.
std::string OctetRunBinary() { return ::octet::testing::ShellQuote(std::string(OCTET_BINARY_DIR) + "/octet-run"); }

// Runs octet-run with `args` (the program is this binary's worker `worker`);
// its output and its ranks' in `out`.
Result OctetRun(const std::string& args, const std::string& worker) {
  return ::octet::testing::RunCommand("OCTET_TEST_WORKER=1 " + OctetRunBinary() + " " + args + " -- " +
                                          ::octet::testing::ShellQuote(testing::SelfExe()) +
                                          " --gtest_filter=" + worker +
                                          " --gtest_also_run_disabled_tests",
                                      {.merge_stderr = true, .timeout_s = 60});
}

// The whole line of `text` that contains `needle` ("" when none does).
std::string LineWith(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  const size_t start = text.rfind('\n', at);
  const size_t end = text.find('\n', at);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     (end == std::string::npos ? text.size() : end) - (start == std::string::npos ? 0 : start + 1));
}

// Rank OCTET_TEST_VICTIM exits with status 3 (or, with OCTET_TEST_KILL, is
// killed); every rank prints a line, and healthy ranks all-reduce.
TEST(RunWorker, DISABLED_Job) {
  DistContext dist;
  ASSERT_NO_THROW(dist = InitFromEnvironment());
  ProcessGroup& pg = *dist.group;
  std::printf("hello from rank %d of %d\n", pg.rank(), pg.size());
  pg.Barrier()->Wait();
  const char* victim = std::getenv("OCTET_TEST_VICTIM");
  if (victim != nullptr && std::atoi(victim) == pg.rank()) {
    if (std::getenv("OCTET_TEST_KILL") != nullptr) ::raise(SIGKILL);
    std::fflush(stdout);
    std::_Exit(3);
  }
  Tensor t = Full({4}, 1.0);
  for (int i = 0; i < 50; ++i) pg.AllReduce(t)->Wait();  // throws (gtest fails) when a peer is lost
  std::printf("rank %d done\n", pg.rank());
}

class OctetRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (IsWorker()) GTEST_SKIP();
    dir_ = testing::FreshDir("octetrun");
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(OctetRunTest, HealthyJobPrefixesEveryLineWithItsRank) {
  const Result r = OctetRun("-n 3 --timeout-ms 10000", "RunWorker.DISABLED_Job");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (int k = 0; k < 3; ++k) {
    EXPECT_NE(r.out.find("[rank " + std::to_string(k) + "] hello from rank " + std::to_string(k) + " of 3"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("[rank " + std::to_string(k) + "] rank " + std::to_string(k) + " done"),
              std::string::npos)
        << r.out;
  }
  // The default store is a temporary directory, removed afterwards.
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
}

TEST_F(OctetRunTest, FailingRankIsNamedAndTheOthersStop) {
  ::setenv("OCTET_TEST_VICTIM", "1", 1);
  const Result r = OctetRun("-n 3 --timeout-ms 10000", "RunWorker.DISABLED_Job");
  ::unsetenv("OCTET_TEST_VICTIM");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("octet-run: rank 1 (pid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exited with status 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("octet-run: FAILED: rank 1 exited with status 3"), std::string::npos) << r.out;
  // The other ranks saw the lost peer themselves and said which it was.
  EXPECT_NE(r.out.find("[rank 0] "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lost rank 1"), std::string::npos) << r.out;
}

TEST_F(OctetRunTest, KilledRankMakesEveryOtherRankFailNamingIt) {
  ::setenv("OCTET_TEST_VICTIM", "2", 1);
  ::setenv("OCTET_TEST_KILL", "1", 1);
  const Result r = OctetRun("-n 3 --timeout-ms 5000 --grace-ms 10000", "RunWorker.DISABLED_Job");
  ::unsetenv("OCTET_TEST_VICTIM");
  ::unsetenv("OCTET_TEST_KILL");
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.out;
  EXPECT_NE(r.out.find("rank 2 was killed by signal 9"), std::string::npos) << r.out;
  // Ranks 0 and 1 exited non-zero on their own (within the grace period, not
  // stopped by octet-run), each naming the lost rank. A rank that diagnoses
  // after the other survivor has already exited names that one too ("lost
  // rank 1 (pid ... is gone), lost rank 2 (...)", seen in about 1 run in 12),
  // so the killed rank must be among the ranks named, not the only one.
  for (int k = 0; k < 2; ++k) {
    const std::string line = LineWith(r.out, "ProcessGroup(gloo) rank " + std::to_string(k) +
                                                    "/3: AllReduce(sum, float32[4]) failed: lost rank ");
    EXPECT_EQ(line.rfind("[rank " + std::to_string(k) + "] ", 0), 0u) << r.out;
    EXPECT_NE(line.find("lost rank 2 ("), std::string::npos) << "rank " << k << " does not name rank 2:\n" << r.out;
    EXPECT_NE(r.out.find("rank " + std::to_string(k) + " exited with status 1"), std::string::npos) << r.out;
  }
}

TEST_F(OctetRunTest, BadRankCountIsAUsageError) {
  for (const char* n : {"0", "x", "-3"}) {
    const Result r = OctetRun(std::string("-n ") + n, "RunWorker.DISABLED_Job");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("the number of ranks must be in [1, 1024]"), std::string::npos) << r.out;
  }
}

TEST_F(OctetRunTest, StaleStoreDirectoryIsRefusedBeforeStarting) {
  const std::string store = dir_ + "/store";
  std::filesystem::create_directories(store);
  testing::Spawn({"/bin/true"}, {}, store + "/octet%2Frank%2F0");  // a left-over key file
  const Result r = OctetRun("-n 2 --store " + ::octet::testing::ShellQuote(store), "RunWorker.DISABLED_Job");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("store directory " + store + " is not empty"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << "no rank may start:\n" << r.out;
}

TEST_F(OctetRunTest, FreshStoreDirectoryWorks) {
  const std::string store = ::octet::testing::ShellQuote(dir_ + "/fresh");
  const Result r = OctetRun("-n 2 --timeout-ms 10000 --store " + store, "RunWorker.DISABLED_Job");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST_F(OctetRunTest, UnreachableRedisIsReportedBeforeStarting) {
  const int port = testing::FreePort();
  const Result r = OctetRun("-n 2 --redis 127.0.0.1:" + std::to_string(port), "RunWorker.DISABLED_Job");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot reach Redis at 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << r.out;
}

// octet-run around any program (here sh and sleep): its own behaviour, not
// the collectives'.

TEST_F(OctetRunTest, UsageErrorsAreNamedWithStatus2AndHelpWith0) {
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {Case{"--bogus -- true", "octet-run: unknown argument '--bogus' (the program goes after --)"},
                        Case{"-- true", "octet-run: missing -n N"},
                        Case{"-n 2", "octet-run: no program to run (put it after --)"}}) {
    const Result r = ::octet::testing::RunCommand(OctetRunBinary() + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("usage: octet-run -n N"), std::string::npos) << r.err;
  }
  const Result help = ::octet::testing::RunCommand(OctetRunBinary() + " --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.err.find("usage: octet-run -n N"), std::string::npos) << help.err;
}

TEST_F(OctetRunTest, AProgramThatCannotStartIsNamed) {
  const Result r = ::octet::testing::RunCommand(OctetRunBinary() + " -n 2 -- /nonexistent/octet_program");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot start '/nonexistent/octet_program' for rank 0: No such file or directory"),
            std::string::npos)
      << r.err;
}

// Ctrl-C (or a SIGTERM) to octet-run stops every rank and exits 128 + the
// signal; a rank that prints no final newline keeps its last line. The
// signal goes once both ranks have printed (each then leaves a file; at most
// 20 s is waited for them), however late a loaded machine starts them.
TEST_F(OctetRunTest, ASignalToOctetRunStopsEveryRank) {
  for (const char* sig : {"INT", "TERM"}) {
    const std::string up = ::octet::testing::ShellQuote(dir_ + "/up_" + sig + "_");
    const Result r = ::octet::testing::RunCommand(
        "export UP=" + up + "; " + OctetRunBinary() +
            " -n 2 -- sh -c 'printf \"up $OCTET_RANK\"; touch \"$UP$OCTET_RANK\"; sleep 60' & pid=$!; i=0; " +
            "until [ -e \"${UP}0\" ] && [ -e \"${UP}1\" ] || [ $i -ge 400 ]; do sleep 0.05; i=$((i+1)); done; " +
            "kill -" + sig + " $pid; wait $pid",
        {.merge_stderr = true, .timeout_s = 30});
    EXPECT_FALSE(r.timed_out) << r.out;
    const int signo = std::string(sig) == "INT" ? SIGINT : SIGTERM;
    EXPECT_EQ(r.exit_code, 128 + signo) << r.out;
    EXPECT_NE(r.out.find("octet-run: got signal " + std::to_string(signo) + "; stopping every rank"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("[rank 0] up 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[rank 1] up 1"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;  // stopped, not failed
  }
}

// After a rank fails, the others get --grace-ms to exit on their own; then
// SIGTERM, and SIGKILL 3 s later for one that ignores it. The exit status is
// the failed rank's.
TEST_F(OctetRunTest, RanksThatOutstayTheGraceAreTerminatedThenKilled) {
  const Result r = ::octet::testing::RunCommand(
      OctetRunBinary() + " -n 3 --grace-ms 200 -- sh -c '" +
          "case $OCTET_RANK in 0) exit 3;; 1) exec sleep 60;; *) trap \"\" TERM; sleep 60;; esac'",
      {.merge_stderr = true, .timeout_s = 30});
  EXPECT_FALSE(r.timed_out) << r.out;
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("octet-run: rank 0 (pid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("octet-run: FAILED: rank 0 exited with status 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 was killed by signal 15"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 2 was killed by signal 9"), std::string::npos) << r.out;
}

// Of ranks found ended at the same poll, the one another rank reported lost
// failed first, whatever their numbers. Rank 1 stops octet-run (SIGSTOP)
// and exits 3; rank 0, once it sees octet-run stopped (or after 10 s), says
// it lost rank 1, as octet's collectives do, and exits 1, leaving a child
// that resumes octet-run 0.3 s later, which finds both ended at once
// (before, it named rank 0 and returned 1: once in a loaded ctest run of
// FailingRankIsNamedAndTheOthersStop; and once in CI, where octet-run reaped
// both before its poll had handed over rank 0's line).
TEST_F(OctetRunTest, OfRanksEndedTogetherTheOneReportedLostFailedFirst) {
  const Result r = ::octet::testing::RunCommand(
      OctetRunBinary() + " -n 2 -- sh -c '" +
          "if [ $OCTET_RANK = 1 ]; then kill -STOP $PPID; exit 3; fi; i=0; " +
          "until grep -q \"^State:.*stopped\" /proc/$PPID/status || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done; " +
          "sleep 0.2; echo \"allreduce: lost rank 1 (pid 7 is gone)\"; (sleep 0.3; kill -CONT $PPID) & exit 1'",
      {.merge_stderr = true, .timeout_s = 30});
  EXPECT_FALSE(r.timed_out) << r.out;
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("[rank 0] allreduce: lost rank 1 (pid 7 is gone)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("octet-run: FAILED: rank 1 exited with status 3; then rank 0 exited with status 1"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace octet::dist
