// The child-process runner the example tests share (tests/test_util): one
// argument stays one word whatever it holds, stdout and stderr come back
// apart or merged, the exit status is the command's (128 + N for signal N),
// and a hung child is stopped and said to be. And the per-test directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "tests/test_util.h"

namespace octet::testing {
namespace {

using ::testing::HasSubstr;

TEST(RunCommand, AQuotedArgumentStaysOneWord) {
  const std::string word = "it's $HOME \"and\" `this` \\ *";
  const CommandResult r = RunCommand("printf '[%s]' " + ShellQuote(word) + " " + ShellQuote(""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[" + word + "][]");
}

TEST(RunCommand, CapturesStdoutAndStderrApartOrMerged) {
  const std::string cmd = "echo out; echo err >&2; echo out2";
  const CommandResult apart = RunCommand(cmd);
  EXPECT_EQ(apart.out, "out\nout2\n");
  EXPECT_EQ(apart.err, "err\n");
  const CommandResult merged = RunCommand(cmd, {.merge_stderr = true});
  EXPECT_EQ(merged.out, "out\nerr\nout2\n");
  EXPECT_EQ(merged.err, "");
}

TEST(RunCommand, ExitStatusAndSignal) {
  EXPECT_EQ(RunCommand("exit 3").exit_code, 3);
  EXPECT_EQ(RunCommand("VAR=7; exit $VAR").exit_code, 7);
  const CommandResult killed = RunCommand("kill -KILL $$");
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL);
  EXPECT_FALSE(killed.timed_out);
}

TEST(RunCommand, AHungChildIsStoppedAndSaidToBe) {
  const CommandResult r = RunCommand("echo started; sleep 60", {.timeout_s = 1});
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_EQ(r.out, "started\n");
  EXPECT_THAT(r.err, HasSubstr("[RunCommand: stopped after 1 s: echo started; sleep 60]"));
}

// FreshTestDir gives a directory directly in the temporary directory, also
// for a parameterised test, whose name holds a '/' ("Name/1"): the
// directory was then a subdirectory, and removing it left its parent behind
// in /tmp after every run (1442 of them on this machine).
class FreshTestDirTest : public ::testing::TestWithParam<int> {};

TEST_P(FreshTestDirTest, IsADirectChildOfTheTemporaryDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = FreshTestDir("fresh");
  EXPECT_EQ(dir.parent_path(), fs::temp_directory_path());
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
  EXPECT_FALSE(fs::exists(dir));
}

INSTANTIATE_TEST_SUITE_P(Params, FreshTestDirTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace octet::testing
