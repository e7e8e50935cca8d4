#include <octet/core/error.h>

#include <cstring>

namespace octet::internal {

void ThrowError(const char* file, int line, const std::string& msg) {
  // Keep only the path below the project root to make messages readable.
  const char* short_file = file;
  for (const char* root : {"/core/", "/ops/", "/autograd/", "/nn/", "/optim/", "/distributed/", "/examples/"}) {
    if (const char* p = std::strstr(file, root)) {
      short_file = p + 1;
      break;
    }
  }
  throw Error(msg + " [" + short_file + ":" + std::to_string(line) + "]");
}

}  // namespace octet::internal
