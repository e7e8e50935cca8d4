// Grad mode: whether ops record the autograd graph on this thread.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

namespace octet::autograd {

class GradMode {
 public:
  static bool IsEnabled();
  static void SetEnabled(bool enabled);
};

}  // namespace octet::autograd

namespace octet {

// Disables graph recording for its lifetime (e.g. optimizer steps, eval).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::GradMode::IsEnabled()) { autograd::GradMode::SetEnabled(false); }
  ~NoGradGuard() { autograd::GradMode::SetEnabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace octet
