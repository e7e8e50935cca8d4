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

namespace octet::dist::testing {

class FileStoreFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("octet_file_store_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    ASSERT_NO_THROW(store_ = FileStore::Open(dir_.string()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::unique_ptr<FileStore> store_;
};

}  // namespace octet::dist::testing
