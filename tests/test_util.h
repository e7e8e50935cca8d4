// Helpers shared by the tests: tensor comparison against float64 references,
// seeded random inputs, files and test directories, a program run as a child.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <octet/core/tensor.h>

namespace octet::testing {

// The bytes of the file at `path` ("" when it cannot be read): a program's
// captured output, a log, a metrics file.
std::string ReadFile(const std::string& path);
// Writes `bytes` to `path`, replacing what was there; a test failure when it
// cannot.
void WriteFile(const std::string& path, const std::string& bytes);

// A directory for the running test: <temp>/octet_<tag>_<pid>_<test name>,
// emptied (removed, then created again when `create`). The fixture removes it
// in its TearDown.
std::string FreshTestDir(const std::string& tag, bool create = true);

// A directory that exists and in which this process cannot create entries,
// for tests of write errors: for a non-root user `parent`/unwritable made
// read-only (mode 0555); for root, who may write anywhere a mode forbids,
// /sys (sysfs refuses mkdir even to root); "" when neither is so here.
std::string UnwritableDir(const std::string& parent);

// `word` as one /bin/sh word: in single quotes, a single quote inside it
// closed, escaped and reopened.
std::string ShellQuote(const std::string& word);

struct CommandOptions {
  // stderr into `out` (interleaved as written), `err` left empty.
  bool merge_stderr = false;
  // Ended (SIGTERM, SIGKILL 10 s later) after this long: a hung child fails
  // its test with timed_out instead of stalling the suite.
  int timeout_s = 600;
};

struct CommandResult {
  // The exit status, 128 + N when signal N ended the command (the shell's
  // convention); -1 when no shell could run it.
  int exit_code = -1;
  bool timed_out = false;  // ended by CommandOptions::timeout_s (exit_code 124)
  std::string out, err;
};

// Runs `command`, a /bin/sh command line (VAR=value prefixes, pipes and
// redirections allowed; quote each argument with ShellQuote), with stdout and
// stderr captured through files in the temporary directory, removed after.
CommandResult RunCommand(const std::string& command, const CommandOptions& options = {});

// Starts `command` (a /bin/sh command line) in the background with its stdout
// and stderr in the file `out`; once `out` holds the text `marker` (at most
// 60 s later) runs the shell commands `then`, which see the command's pid as
// $p (e.g. "kill -TERM $p; wait $p"). Returns what RunCommand returns.
CommandResult RunUntilOutputThen(const std::string& command, const std::string& out, const std::string& marker,
                                 const std::string& then, int timeout_s = 120);

// Another process holding an exclusive flock(2) on the file `path` (created
// when missing) until Release: a shell that takes the lock, writes
// `line_format` into the file with its own pid for %s (nothing when empty)
// and sleeps. The constructor returns once all that is done (a test failure
// after 10 s).
class FileLockHolder {
 public:
  explicit FileLockHolder(const std::string& path, const std::string& line_format = "");
  ~FileLockHolder() { Release(); }
  FileLockHolder(const FileLockHolder&) = delete;
  FileLockHolder& operator=(const FileLockHolder&) = delete;

  // The holding process's pid, as text.
  const std::string& pid() const { return pid_; }
  // Ends the holder and waits until the lock is free (10 s at most); false
  // when it did not end or the lock stayed taken. Idempotent.
  bool Release();

 private:
  std::string path_, pid_file_, pid_;
  bool released_ = false;
};

// Random values in [lo, hi) from a fixed-seed std::mt19937_64 (independent of
// octet's own RNG so tests don't test the RNG with itself).
std::vector<double> RandomValues(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
Tensor RandomTensor(const Shape& shape, uint64_t seed, DType dtype = DType::kFloat64, double lo = -1.0,
                    double hi = 1.0);

// The bytes of t as stored (a contiguous copy on the CPU): FP8 codes, or the
// element bytes of any dtype, for bit-exact comparisons.
std::vector<uint8_t> Bytes(const Tensor& t);
// Appends Bytes(t) to *all: one byte log of many results, compared whole.
void AppendBytes(std::vector<uint8_t>* all, const Tensor& t);

// Asserts every element of `actual` is within atol + rtol*|expected|.
::testing::AssertionResult AllClose(const Tensor& actual, const std::vector<double>& expected, double rtol,
                                    double atol);
::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected, double rtol, double atol);

// Runs fn and returns the octet::Error message it throws ("" if none).
template <typename F>
std::string ErrorOf(F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The message of the E (an octet::Error or a subclass) that fn throws; a test
// failure and "" when fn throws nothing or something else.
template <typename E, typename F>
std::string MessageOf(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another exception than expected: " << e.what();
    return "";
  }
  ADD_FAILURE() << "threw nothing";
  return "";
}

}  // namespace octet::testing
