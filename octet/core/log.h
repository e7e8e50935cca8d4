// The library's own messages (a GEMM or attention path falling back, the CPU
// GEMM path chosen, ...) and how an application routes or silences them.
//
// octet never writes to stderr or stdout directly: every message goes
// through Log, which filters it by level, drops a repeat of a message already
// emitted (unless the caller asks for every occurrence) and hands it to the
// sink. The default sink writes "octet: <level>: <message>\n" to stderr.
//
//   octet::SetLogSink([&](octet::LogLevel level, std::string_view msg) {
//     my_logger.Write(octet::ToString(level), msg);
//   });
//   octet::SetLogLevel(octet::LogLevel::kWarning);  // or OCTET_LOG_LEVEL=warning
//
// The default level is kInfo, or what the environment variable
// OCTET_LOG_LEVEL says when the first message is logged: debug, info,
// warning, error or off (any case). An unknown value is reported once (a
// warning) and ignored. SetLogLevel overrides the environment.
//
// All functions are thread-safe. The sink is called outside octet's locks,
// possibly from several threads at once, and must not throw (an exception it
// throws is dropped: logging never fails an op).
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include <octet/core/error.h>

namespace octet {

// kOff is a threshold only (SetLogLevel(kOff) silences everything); a
// message is never logged at kOff.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

// "debug", "info", "warning", "error", "off".
std::string_view ToString(LogLevel level);
// The inverse of ToString, ignoring case; std::nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view text);

// Receives each message that passes the level filter (no "octet:" prefix,
// no trailing newline).
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Replaces the sink; nullptr restores the default (stderr).
void SetLogSink(LogSink sink);
// Messages below `level` are dropped.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Whether a message at `level` would reach the sink (to skip building it).
bool LogEnabled(LogLevel level);

// kOnce: a message is emitted the first time it passes the filter and never
// again in this process (its text is the key), so a fallback hit on every
// step is reported once. kEvery: every occurrence is emitted.
enum class LogRepeat { kOnce, kEvery };

// Emits `message` at `level` (kOff is rejected with octet::Error).
void Log(LogLevel level, std::string_view message, LogRepeat repeat = LogRepeat::kOnce);

}  // namespace octet

// Builds the message from parts (anything with operator<<) only when the
// level is enabled: OCTET_LOG(kWarning, "GEMM falls back: ", reason).
#define OCTET_LOG(level, ...)                                                                          \
  do {                                                                                                 \
    if (::octet::LogEnabled(::octet::LogLevel::level))                                                 \
      ::octet::Log(::octet::LogLevel::level, ::octet::internal::StrCatStream(__VA_ARGS__));            \
  } while (0)
