#include <octet/core/version.h>

#include <string>

#include <gtest/gtest.h>

namespace octet {
namespace {

TEST(Version, TheLibraryIsTheVersionOfItsHeadersAndOfTheBuild) {
  const VersionInfo v = LibraryVersion();
  EXPECT_EQ(v.major, OCTET_VERSION_MAJOR);
  EXPECT_EQ(v.minor, OCTET_VERSION_MINOR);
  EXPECT_EQ(v.patch, OCTET_VERSION_PATCH);
  const std::string expected =
      std::to_string(OCTET_VERSION_MAJOR) + "." + std::to_string(OCTET_VERSION_MINOR) + "." +
      std::to_string(OCTET_VERSION_PATCH);
  EXPECT_EQ(std::string(LibraryVersionString()), expected);
  // CMake's project(VERSION), read from the same header, is what the
  // package config files and the .pc file carry.
  EXPECT_EQ(std::string(LibraryVersionString()), OCTET_TEST_PROJECT_VERSION);
}

}  // namespace
}  // namespace octet
