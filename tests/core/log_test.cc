// The logging hook (core/log.h): sinks, the level filter, once-per-message,
// OCTET_LOG_LEVEL, the default stderr sink, and a real library message
// arriving at an application's sink.
#include <octet/core/log.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <octet/core/log_testing.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>
#include <octet/ops/gemm_layout.h>

#include "tests/scoped_env.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::ScopedEnv;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Collects what reaches the sink. Each test starts from a fresh log state
// with OCTET_LOG_LEVEL unset and ends with the default sink again.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    internal::ResetLogForTesting();
    SetLogSink([this](LogLevel level, std::string_view msg) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.emplace_back(level, std::string(msg));
    });
  }
  void TearDown() override { internal::ResetLogForTesting(); }
  std::vector<std::pair<LogLevel, std::string>> Got() {
    std::lock_guard<std::mutex> lock(mu_);
    return got_;
  }

  ScopedEnv env_{"OCTET_LOG_LEVEL", nullptr};
  std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> got_;
};

TEST_F(LogTest, SinkReceivesMessagesWithTheirLevel) {
  SetLogLevel(LogLevel::kDebug);
  Log(LogLevel::kDebug, "d");
  Log(LogLevel::kInfo, "i");
  Log(LogLevel::kWarning, "w");
  Log(LogLevel::kError, "e");
  OCTET_LOG(kWarning, "parts ", 1, " and ", 2.5);
  EXPECT_THAT(Got(), ElementsAre(Pair(LogLevel::kDebug, "d"), Pair(LogLevel::kInfo, "i"),
                                 Pair(LogLevel::kWarning, "w"), Pair(LogLevel::kError, "e"),
                                 Pair(LogLevel::kWarning, "parts 1 and 2.5")));
}

TEST_F(LogTest, LevelFilterDropsMessagesBelowIt) {
  EXPECT_EQ(GetLogLevel(), LogLevel::kInfo);  // the default without OCTET_LOG_LEVEL
  Log(LogLevel::kDebug, "hidden by default");
  SetLogLevel(LogLevel::kWarning);
  EXPECT_EQ(GetLogLevel(), LogLevel::kWarning);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  Log(LogLevel::kInfo, "dropped");
  Log(LogLevel::kWarning, "kept");
  SetLogLevel(LogLevel::kOff);
  Log(LogLevel::kError, "silenced");
  // A message dropped by the filter was not "seen": it appears once allowed.
  SetLogLevel(LogLevel::kDebug);
  Log(LogLevel::kInfo, "dropped");
  EXPECT_THAT(Got(), ElementsAre(Pair(LogLevel::kWarning, "kept"), Pair(LogLevel::kInfo, "dropped")));
  EXPECT_THAT(ErrorOf([] { Log(LogLevel::kOff, "x"); }), HasSubstr("debug, info, warning or error"));
}

TEST_F(LogTest, EachDistinctMessageOnceUnlessEveryIsAsked) {
  for (int i = 0; i < 3; ++i) {
    Log(LogLevel::kWarning, "fallback A");
    Log(LogLevel::kWarning, "fallback B");
    Log(LogLevel::kInfo, "step", LogRepeat::kEvery);
  }
  EXPECT_THAT(Got(), ElementsAre(Pair(LogLevel::kWarning, "fallback A"), Pair(LogLevel::kWarning, "fallback B"),
                                 Pair(LogLevel::kInfo, "step"), Pair(LogLevel::kInfo, "step"),
                                 Pair(LogLevel::kInfo, "step")));
}

TEST_F(LogTest, OnceHoldsAcrossThreads) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 100; ++i) Log(LogLevel::kWarning, "raced " + std::to_string(i % 10));
    });
  for (std::thread& t : threads) t.join();
  const auto got = Got();
  ASSERT_EQ(got.size(), 10u);
  std::vector<std::string> texts;
  for (const auto& [level, text] : got) texts.push_back(text);
  std::sort(texts.begin(), texts.end());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(texts[i], "raced " + std::to_string(i));
}

TEST(LogLevelNames, ParseIgnoresCaseAndRejectsTheRest) {
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("INFO"), LogLevel::kInfo);
  EXPECT_EQ(ParseLogLevel("Warning"), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("eRRor"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("OFF"), LogLevel::kOff);
  for (const char* bad : {"", "warn", "debug ", "2", "errors"}) EXPECT_EQ(ParseLogLevel(bad), std::nullopt) << bad;
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError, LogLevel::kOff})
    EXPECT_EQ(ParseLogLevel(ToString(l)), l);
}

TEST_F(LogTest, EnvironmentSetsTheDefaultLevel) {
  const std::pair<const char*, LogLevel> cases[] = {{"debug", LogLevel::kDebug},   {"Info", LogLevel::kInfo},
                                                    {"WARNING", LogLevel::kWarning}, {"error", LogLevel::kError},
                                                    {"off", LogLevel::kOff},       {"", LogLevel::kInfo}};
  for (const auto& [value, level] : cases) {
    ScopedEnv env("OCTET_LOG_LEVEL", value);
    internal::ResetLogForTesting();
    EXPECT_EQ(GetLogLevel(), level) << value;
  }
  {
    ScopedEnv env("OCTET_LOG_LEVEL", "error");
    internal::ResetLogForTesting();
    SetLogLevel(LogLevel::kDebug);  // overrides the environment
    EXPECT_EQ(GetLogLevel(), LogLevel::kDebug);
  }
  EXPECT_TRUE(Got().empty());
}

TEST_F(LogTest, UnknownEnvironmentValueIsReportedOnceAndIgnored) {
  ScopedEnv env("OCTET_LOG_LEVEL", "loud");
  internal::ResetLogForTesting();
  SetLogSink([this](LogLevel level, std::string_view msg) { got_.emplace_back(level, std::string(msg)); });
  EXPECT_EQ(GetLogLevel(), LogLevel::kInfo);
  EXPECT_EQ(GetLogLevel(), LogLevel::kInfo);
  Log(LogLevel::kInfo, "after");
  EXPECT_THAT(Got(), ElementsAre(Pair(LogLevel::kWarning, HasSubstr("OCTET_LOG_LEVEL='loud' is not a log level")),
                                 Pair(LogLevel::kInfo, "after")));
}

TEST_F(LogTest, NullSinkRestoresTheStderrDefault) {
  SetLogSink(nullptr);
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kWarning, "to stderr");
  Log(LogLevel::kError, "to stderr");  // same text: already seen
  Log(LogLevel::kError, "second", LogRepeat::kEvery);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "octet: warning: to stderr\noctet: error: second\n");
  EXPECT_TRUE(Got().empty());
}

TEST_F(LogTest, ThrowingSinkDoesNotFailTheCaller) {
  SetLogSink([](LogLevel, std::string_view) { throw std::runtime_error("sink broke"); });
  EXPECT_NO_THROW(Log(LogLevel::kError, "into a broken sink"));
}

// The library's own messages: the FP8 GEMM fallback report (what the CUDA
// GEMM calls; plain host code) and the CPU GEMM path decision.
TEST_F(LogTest, LibraryMessagesReachTheSink) {
  RecordGemmFallback("K=40 is not a multiple of 16 [log test]");
  RecordGemmFallback("K=40 is not a multiple of 16 [log test]");
  RecordGemmPadded("N=8 [log test]");
  EXPECT_THAT(Got(), ElementsAre(Pair(LogLevel::kWarning,
                                      "FP8 GEMM falls back to BF16: K=40 is not a multiple of 16 [log test]"),
                                 Pair(LogLevel::kInfo, "FP8 GEMM padded: N=8 [log test]")));
  got_.clear();

  ScopedEnv gemm("OCTET_CPU_GEMM", "fp32");
  SetLogLevel(LogLevel::kDebug);
  internal::SetCpuGemmPathForTesting(std::nullopt);  // decide again, now
  const CpuGemmPathInfo info = GetCpuGemmPath();
  internal::SetCpuGemmPathForTesting(std::nullopt);  // later tests decide from their own environment
  EXPECT_EQ(info.path, CpuGemmPath::kFp32Fma);
  EXPECT_THAT(Got(), ElementsAre(Pair(LogLevel::kDebug, HasSubstr("CPU BF16/FP8 GEMMs compute with FP32 FMAs "
                                                                  "(OCTET_CPU_GEMM=fp32"))));
}

}  // namespace
}  // namespace octet
