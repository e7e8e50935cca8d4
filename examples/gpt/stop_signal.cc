#include "examples/gpt/stop_signal.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace octet::gpt {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_catching{false};

sigset_t StopSignals() {
  sigset_t set;
  ::sigemptyset(&set);
  ::sigaddset(&set, SIGINT);
  ::sigaddset(&set, SIGTERM);
  return set;
}

// Ends the process by `sig`: its default action, taken in this thread.
[[noreturn]] void DieBy(int sig) {
  ::signal(sig, SIG_DFL);
  sigset_t one;
  ::sigemptyset(&one);
  ::sigaddset(&one, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(sig);  // pending in this thread, unblocked: the process ends here
  std::_Exit(128 + sig);
}

}  // namespace

void StartStopSignalThread() {
  const sigset_t set = StopSignals();
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0) {
    std::fprintf(stderr, "train_gpt: error: cannot block SIGINT and SIGTERM (pthread_sigmask: %d)\n", rc);
    std::exit(1);
  }
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (::sigwait(&set, &sig) != 0) continue;
      int none = 0;
      if (g_catching.load() && g_stop_signal.compare_exchange_strong(none, sig)) continue;  // the first
      DieBy(sig);
    }
  }).detach();
}

void CatchStopSignals(bool on) {
  g_catching.store(on);
  if (!on && g_stop_signal.load() != 0) DieBy(g_stop_signal.load());
}

int StopSignal() { return g_stop_signal.load(); }

void SetStopSignal(int sig) { g_stop_signal.store(sig); }

}  // namespace octet::gpt
