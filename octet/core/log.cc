#include <octet/core/log.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include <octet/core/log_testing.h>

namespace octet {
namespace {

constexpr int kUnset = -1;  // level not decided yet: read OCTET_LOG_LEVEL first

struct LogState {
  std::mutex mu;
  std::shared_ptr<const LogSink> sink;     // guarded by mu; null: the default sink
  std::unordered_set<std::string> seen;    // guarded by mu; keys of kOnce messages emitted
  std::atomic<int> level{kUnset};
};

LogState& State() {
  static LogState* state = new LogState;  // never destroyed: messages may come during static destruction
  return *state;
}

void DefaultSink(LogLevel level, std::string_view message) {
  std::string line = "octet: ";
  line.append(ToString(level)).append(": ").append(message).append("\n");
  // One write per line, so lines from several threads do not interleave.
  std::fwrite(line.data(), 1, line.size(), stderr);
}

// The threshold, deciding it from OCTET_LOG_LEVEL on first use.
LogLevel Threshold() {
  LogState& s = State();
  int level = s.level.load(std::memory_order_acquire);
  if (level != kUnset) return static_cast<LogLevel>(level);
  std::string unknown;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    level = s.level.load(std::memory_order_acquire);
    if (level == kUnset) {
      level = static_cast<int>(LogLevel::kInfo);
      if (const char* env = std::getenv("OCTET_LOG_LEVEL"); env != nullptr && env[0] != '\0') {
        if (const std::optional<LogLevel> parsed = ParseLogLevel(env))
          level = static_cast<int>(*parsed);
        else
          unknown = env;
      }
      s.level.store(level, std::memory_order_release);
    }
  }
  // Reported after the level is set (Log reads it) and outside the lock.
  if (!unknown.empty())
    Log(LogLevel::kWarning, "OCTET_LOG_LEVEL='" + unknown +
                                "' is not a log level (debug, info, warning, error or off); using info");
  return static_cast<LogLevel>(level);
}

}  // namespace

std::string_view ToString(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "unknown";
}

std::optional<LogLevel> ParseLogLevel(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError, LogLevel::kOff})
    if (lower == ToString(l)) return l;
  return std::nullopt;
}

void SetLogSink(LogSink sink) {
  std::shared_ptr<const LogSink> p = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink.swap(p);
  // The old sink (p) is destroyed after the lock is released.
}

void SetLogLevel(LogLevel level) {
  OCTET_CHECK(static_cast<int>(level) >= 0 && static_cast<int>(level) <= static_cast<int>(LogLevel::kOff),
              "SetLogLevel: invalid level ", static_cast<int>(level));
  State().level.store(static_cast<int>(level), std::memory_order_release);
}

LogLevel GetLogLevel() { return Threshold(); }

bool LogEnabled(LogLevel level) { return level != LogLevel::kOff && level >= Threshold(); }

void Log(LogLevel level, std::string_view message, LogRepeat repeat) {
  OCTET_CHECK(static_cast<int>(level) >= 0 && static_cast<int>(level) < static_cast<int>(LogLevel::kOff),
              "octet::Log: messages take debug, info, warning or error, got ", static_cast<int>(level));
  if (!LogEnabled(level)) return;
  LogState& s = State();
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (repeat == LogRepeat::kOnce && !s.seen.emplace(message).second) return;
    sink = s.sink;
  }
  try {
    if (sink)
      (*sink)(level, message);
    else
      DefaultSink(level, message);
  } catch (...) {
    // NOTE: dropped on purpose (see log.h): a failing sink must not fail the op that logged.
  }
}

namespace internal {

void ResetLogForTesting() {
  LogState& s = State();
  std::shared_ptr<const LogSink> old;
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink.swap(old);
  s.seen.clear();
  s.level.store(kUnset, std::memory_order_release);
}

}  // namespace internal
}  // namespace octet
