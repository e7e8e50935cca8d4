// A GoogleTest fixture with a fresh FileStore in a directory of its own per
// test (named after the process and the test), removed afterwards. Shared by
// the store tests and the NCCL bootstrap test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <octet/distributed/store.h>
#include "tests/test_util.h"

namespace octet::dist::testing {

class FileStoreFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::octet::testing::FreshTestDir("file_store", /*create=*/false);
    ASSERT_NO_THROW(store_ = FileStore::Open(dir_.string()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::unique_ptr<FileStore> store_;
};

}  // namespace octet::dist::testing
