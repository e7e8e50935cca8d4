#include <octet/core/version.h>

#define OCTET_STRINGIFY_(x) #x
#define OCTET_STRINGIFY(x) OCTET_STRINGIFY_(x)

namespace octet {

VersionInfo LibraryVersion() { return {OCTET_VERSION_MAJOR, OCTET_VERSION_MINOR, OCTET_VERSION_PATCH}; }

const char* LibraryVersionString() {
  return OCTET_STRINGIFY(OCTET_VERSION_MAJOR) "." OCTET_STRINGIFY(OCTET_VERSION_MINOR) "." OCTET_STRINGIFY(
      OCTET_VERSION_PATCH);
}

}  // namespace octet
