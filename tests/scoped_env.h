// An environment variable set for a scope (tests of switches read from the
// environment: OCTET_REQUIRE_CUDA, OCTET_CPU_GEMM, ...).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace octet::testing {

// Sets `name` to `value` (unsets it for nullptr) and restores its old value,
// or its absence, on destruction.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    Set(value);
  }
  ~ScopedEnv() { Set(old_ ? old_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void Set(const char* value) const {
    if (value != nullptr)
      setenv(name_.c_str(), value, 1);
    else
      unsetenv(name_.c_str());
  }
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace octet::testing
