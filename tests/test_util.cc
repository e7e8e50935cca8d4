#include "tests/test_util.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace octet::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

std::string FreshTestDir(const std::string& tag, bool create) {
  namespace fs = std::filesystem;
  // A parameterised test's name has a '/' ("Name/0"): it would make the
  // directory a subdirectory of one that removing it leaves behind.
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  const fs::path dir = fs::temp_directory_path() / ("octet_" + tag + "_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  if (create) fs::create_directories(dir);
  return dir.string();
}

std::string UnwritableDir(const std::string& parent) {
  namespace fs = std::filesystem;
  const auto refuses_mkdir = [](const fs::path& dir) {
    const fs::path probe = dir / (".octet_unwritable_probe_" + std::to_string(::getpid()));
    if (::mkdir(probe.c_str(), 0755) != 0) return true;
    ::rmdir(probe.c_str());
    return false;
  };
  if (::geteuid() != 0) {
    const fs::path dir = fs::path(parent) / "unwritable";
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                             fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
    if (refuses_mkdir(dir)) return dir.string();
  }
  if (fs::is_directory("/sys/kernel") && refuses_mkdir("/sys")) return "/sys";
  return "";
}

std::string ShellQuote(const std::string& word) {
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

CommandResult RunCommand(const std::string& command, const CommandOptions& options) {
  namespace fs = std::filesystem;
  static std::atomic<int> counter{0};
  const std::string stem = (fs::temp_directory_path() / ("octet_test_cmd_" + std::to_string(::getpid()) + "_" +
                                                         std::to_string(counter++))).string();
  const std::string out = stem + ".out", err = stem + ".err";
  // timeout(1) answers 124 when the limit ended the command (TERM, then KILL
  // 10 s later if it is still there).
  const std::string line = "timeout -k 10 " + std::to_string(options.timeout_s) + " /bin/sh -c " +
                           ShellQuote(command) + " > " + ShellQuote(out) +
                           (options.merge_stderr ? " 2>&1" : " 2> " + ShellQuote(err));
  const int status = std::system(line.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.timed_out = r.exit_code == 124;
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  if (r.timed_out)
    (options.merge_stderr ? r.out : r.err) +=
        "\n[RunCommand: stopped after " + std::to_string(options.timeout_s) + " s: " + command + "]\n";
  std::error_code ec;
  fs::remove(out, ec);
  fs::remove(err, ec);
  return r;
}

namespace {
// Shell commands that wait (`seconds` at most, polling every 50 ms) until
// `condition`, a shell test, holds; their status is the condition's.
std::string WaitUntil(const std::string& condition, int seconds = 10) {
  return "i=0; until " + condition + " || [ $i -ge " + std::to_string(seconds * 20) +
         " ]; do sleep 0.05; i=$((i+1)); done; " + condition;
}
}  // namespace

CommandResult RunUntilOutputThen(const std::string& command, const std::string& out, const std::string& marker,
                                 const std::string& then, int timeout_s) {
  return RunCommand(command + " > " + ShellQuote(out) + " 2>&1 & p=$!; " +
                        WaitUntil("grep -qF -- " + ShellQuote(marker) + " " + ShellQuote(out), 60) + "; " + then,
                    {.timeout_s = timeout_s});
}

FileLockHolder::FileLockHolder(const std::string& path, const std::string& line_format) : path_(path) {
  namespace fs = std::filesystem;
  static std::atomic<int> counter{0};
  pid_file_ = (fs::temp_directory_path() / ("octet_lock_holder_" + std::to_string(::getpid()) + "_" +
                                            std::to_string(counter++))).string();
  fs::remove(pid_file_);
  // The shell locks its fd 9, writes its line ($2, a printf format), then its
  // pid (what the wait below sees last), and becomes sleep, which keeps fd 9
  // and the lock.
  const CommandResult r = RunCommand(
      "sh -c 'exec 9>>\"$0\"; flock 9; [ -z \"$2\" ] || printf \"$2\" $$ > \"$0\"; echo $$ > \"$1\"; "
      "exec sleep 60' " + ShellQuote(path_) + " " + ShellQuote(pid_file_) + " " + ShellQuote(line_format) +
      " > /dev/null 2>&1 & " + WaitUntil("[ -s " + ShellQuote(pid_file_) + " ]"));
  EXPECT_EQ(r.exit_code, 0) << "no process took the lock of " << path_ << ": " << r.err;
  pid_ = ReadFile(pid_file_);
  pid_ = pid_.substr(0, pid_.find('\n'));
}

bool FileLockHolder::Release() {
  if (released_) return true;
  released_ = true;
  const bool done =
      !pid_.empty() && RunCommand("kill " + pid_ + " && " + WaitUntil("flock -n " + ShellQuote(path_) + " true"))
                               .exit_code == 0;
  std::error_code ec;
  std::filesystem::remove(pid_file_, ec);
  return done;
}

std::vector<double> RandomValues(int64_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

Tensor RandomTensor(const Shape& shape, uint64_t seed, DType dtype, double lo, double hi) {
  return FromVector(RandomValues(Numel(shape), seed, lo, hi), shape, {.dtype = dtype});
}

::testing::AssertionResult AllClose(const Tensor& actual, const std::vector<double>& expected, double rtol,
                                    double atol) {
  const std::vector<double> a = actual.ToDoubles();
  if (a.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size mismatch: " << a.size() << " vs " << expected.size();
  }
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = atol + rtol * std::abs(expected[i]);
    const bool ok = std::abs(a[i] - expected[i]) <= tol || (std::isnan(a[i]) && std::isnan(expected[i])) ||
                    (std::isinf(a[i]) && a[i] == expected[i]);
    if (!ok) {
      if (bad < 8) os << "\n  [" << i << "] actual " << a[i] << " expected " << expected[i] << " (tol " << tol << ")";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ:" << os.str();
}

::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape mismatch: " << ShapeStr(actual.shape()) << " vs "
                                         << ShapeStr(expected.shape());
  }
  return AllClose(actual, expected.ToDoubles(), rtol, atol);
}

std::vector<uint8_t> Bytes(const Tensor& t) {
  const Tensor c = t.To(kCPU).Contiguous();
  std::vector<uint8_t> out(c.nbytes());
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

void AppendBytes(std::vector<uint8_t>* all, const Tensor& t) {
  const std::vector<uint8_t> bytes = Bytes(t);
  all->insert(all->end(), bytes.begin(), bytes.end());
}

}  // namespace octet::testing
