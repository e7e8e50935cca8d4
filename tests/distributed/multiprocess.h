// Multi-process tests: the test binary starts copies of itself, one per rank,
// each running a single (DISABLED_) worker test with the rank's environment
// (OCTET_RANK, OCTET_WORLD_SIZE, OCTET_MASTER, ...), and collects their exit
// status and output. A worker fails by failing its gtest assertions (exit 1).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

extern char** environ;

namespace octet::dist::testing {

struct RankResult {
  int rank = 0;
  bool exited = false;  // normal exit (exit_code valid)
  int exit_code = -1;
  int term_signal = 0;  // killed by this signal
  bool timed_out = false;
  std::string output;
};

inline std::string SelfExe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

// A directory of its own per test, removed first.
inline std::string FreshDir(const std::string& tag) {
  return ::octet::testing::FreshTestDir("dist_" + tag);
}

// Spawns `argv` with `env` added to this process's environment; stdout and
// stderr go to `log`. Returns the pid (or -1).
inline pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                   const std::string& log) {
  std::map<std::string, std::string> all;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) all[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) all[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : all) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

using ::octet::testing::ReadFile;

// Waits for `pids` up to `timeout`; kills what is left (SIGKILL) and marks it timed out.
inline std::vector<RankResult> WaitAll(const std::vector<pid_t>& pids, const std::vector<std::string>& logs,
                                       std::chrono::milliseconds timeout) {
  std::vector<RankResult> results(pids.size());
  std::vector<bool> done(pids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t r = pids[i] > 0 ? ::waitpid(pids[i], &status, WNOHANG) : -1;
      if (r == 0) continue;
      done[i] = true;
      --left;
      results[i].rank = static_cast<int>(i);
      if (r > 0 && WIFEXITED(status)) {
        results[i].exited = true;
        results[i].exit_code = WEXITSTATUS(status);
      } else if (r > 0 && WIFSIGNALED(status)) {
        results[i].term_signal = WTERMSIG(status);
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        results[i].rank = static_cast<int>(i);
        results[i].timed_out = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < pids.size(); ++i) results[i].output = ReadFile(logs[i]);
  return results;
}

// Runs worker test `worker` (e.g. "GlooWorker.DISABLED_Collectives") of this
// binary as `world` ranks with `env` (plus OCTET_RANK / OCTET_WORLD_SIZE).
inline std::vector<RankResult> RunRanks(int world, const std::string& worker,
                                        const std::map<std::string, std::string>& env, const std::string& dir,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < world; ++r) {
    std::map<std::string, std::string> e = env;
    e["OCTET_RANK"] = std::to_string(r);
    e["OCTET_WORLD_SIZE"] = std::to_string(world);
    e["OCTET_TEST_WORKER"] = "1";
    e["OMP_NUM_THREADS"] = "1";
    logs.push_back(dir + "/rank" + std::to_string(r) + ".log");
    pids.push_back(Spawn({SelfExe(), "--gtest_filter=" + worker, "--gtest_also_run_disabled_tests"}, e, logs.back()));
  }
  return WaitAll(pids, logs, timeout);
}

inline std::string Describe(const std::vector<RankResult>& results) {
  std::ostringstream os;
  for (const RankResult& r : results) {
    os << "---- rank " << r.rank << ": "
       << (r.timed_out ? "TIMED OUT"
           : r.exited  ? "exit " + std::to_string(r.exit_code)
                       : "signal " + std::to_string(r.term_signal))
       << "\n"
       << r.output << "\n";
  }
  return os.str();
}

inline void ExpectAllPassed(const std::vector<RankResult>& results) {
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe(results);
    if (!(r.exited && r.exit_code == 0)) return;
  }
}

// A TCP port that was free a moment ago (bound to 0, read, closed).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

inline bool IsWorker() { return std::getenv("OCTET_TEST_WORKER") != nullptr; }

}  // namespace octet::dist::testing
