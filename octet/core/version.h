// The version of octet: of these headers (the macros, at compile time) and of
// the library a program runs with (LibraryVersion, at run time). A program
// built against one release and run with another liboctet can tell:
//
//   if (octet::LibraryVersion().major != OCTET_VERSION_MAJOR) ... // mismatch
//
// The macros are the one place the version is written: CMakeLists.txt reads
// them for project(VERSION), the package config files and the shared
// library's SONAME.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#define OCTET_VERSION_MAJOR 0
#define OCTET_VERSION_MINOR 1
#define OCTET_VERSION_PATCH 0

namespace octet {

struct VersionInfo {
  int major = 0;
  int minor = 0;
  int patch = 0;
};

// The version the running liboctet was built as.
VersionInfo LibraryVersion();

// The same as "MAJOR.MINOR.PATCH", e.g. "0.1.0".
const char* LibraryVersionString();

}  // namespace octet
