// Errors of the compute API. OCTET_CHECK(cond, parts...) throws octet::Error
// with a message built from the parts (anything with operator<<) and the
// file:line of the check. The throwing path is out of line and cold so a
// check costs one predictable branch on the hot path.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include <octet/core/macros.h>

namespace octet {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace internal {

template <typename... Args>
std::string StrCatStream(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void ThrowError(const char* file, int line, const std::string& msg);

}  // namespace internal
}  // namespace octet

#define OCTET_CHECK(cond, ...)                                                  \
  do {                                                                          \
    if (OCTET_UNLIKELY(!(cond))) {                                              \
      ::octet::internal::ThrowError(__FILE__, __LINE__,                         \
                                    ::octet::internal::StrCatStream(__VA_ARGS__)); \
    }                                                                           \
  } while (0)

#define OCTET_FAIL(...) \
  ::octet::internal::ThrowError(__FILE__, __LINE__, ::octet::internal::StrCatStream(__VA_ARGS__))

// Internal invariants: checked in debug builds only.
#ifdef NDEBUG
#define OCTET_DCHECK(cond, ...) \
  do {                          \
  } while (0)
#else
#define OCTET_DCHECK(cond, ...) OCTET_CHECK(cond, "internal invariant failed: ", #cond, " ", ##__VA_ARGS__)
#endif
