// FileStore: set/get round trips of arbitrary keys and binary values,
// waiting for a key another thread publishes, timeouts that name the key and
// the wait, atomic visibility (a reader never sees a partial value), Add as
// an atomic counter across threads, Delete and Check.
#include <octet/distributed/store.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/distributed/file_store_fixture.h"

namespace octet::dist {
namespace {

using std::chrono::milliseconds;

using FileStoreTest = testing::FileStoreFixture;

TEST_F(FileStoreTest, SetThenGetReturnsBinaryValue) {
  std::string value(128, '\0');
  for (int i = 0; i < 128; ++i) value[i] = static_cast<char>(i * 37);
  ASSERT_TRUE(store_->Set("nccl/unique_id", value).ok());
  auto got = store_->Get("nccl/unique_id", milliseconds(0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
}

TEST_F(FileStoreTest, KeysWithAnyBytesMapToDistinctFiles) {
  const std::vector<std::string> keys = {"a/b", "a%2Fb", "a.b", ".tmp.x", "rank 3", "ü"};
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_TRUE(store_->Set(keys[i], std::to_string(i)).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = store_->Get(keys[i], milliseconds(0));
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status();
    EXPECT_EQ(*got, std::to_string(i)) << keys[i];
  }
  // Every file is directly inside the store directory, no key made a subdirectory.
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) EXPECT_TRUE(entry.is_regular_file());
}

TEST_F(FileStoreTest, SetReplacesValue) {
  ASSERT_TRUE(store_->Set("k", "first value").ok());
  ASSERT_TRUE(store_->Set("k", "2").ok());
  EXPECT_EQ(*store_->Get("k", milliseconds(0)), "2");
}

TEST_F(FileStoreTest, GetTimesOutNamingKeyAndWait) {
  auto got = store_->Get("never_set", milliseconds(30));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string msg(got.status().message());
  EXPECT_NE(msg.find("'never_set'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("timeout 30 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
}

TEST_F(FileStoreTest, GetWaitsForAnotherThreadsSet) {
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    ASSERT_TRUE(store_->Set("late", "here").ok());
  });
  auto got = store_->Get("late", milliseconds(10000));
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "here");
}

TEST_F(FileStoreTest, WaitReportsOnlyMissingKeys) {
  ASSERT_TRUE(store_->Set("rank0", "x").ok());
  absl::Status s = store_->Wait({"rank0", "rank1", "rank2"}, milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  const std::string msg(s.message());
  EXPECT_EQ(msg.find("'rank0'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'rank1', 'rank2'"), std::string::npos) << msg;
  ASSERT_TRUE(store_->Set("rank1", "x").ok());
  ASSERT_TRUE(store_->Set("rank2", "x").ok());
  EXPECT_TRUE(store_->Wait({"rank0", "rank1", "rank2"}, milliseconds(0)).ok());
}

TEST_F(FileStoreTest, ReaderNeverSeesPartialValue) {
  const std::string big_a(1 << 20, 'a'), big_b(1 << 20, 'b');
  ASSERT_TRUE(store_->Set("blob", big_a).ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 20 && !stop; ++i) ASSERT_TRUE(store_->Set("blob", i % 2 ? big_a : big_b).ok());
  });
  int bad = 0;
  for (int i = 0; i < 50; ++i) {
    auto got = store_->Get("blob", milliseconds(1000));
    ASSERT_TRUE(got.ok()) << got.status();
    if (!(*got == big_a || *got == big_b)) ++bad;
  }
  stop = true;
  writer.join();
  EXPECT_EQ(bad, 0);
  // No temporary files are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().rfind(".tmp.", 0), std::string::npos) << entry.path();
  }
}

TEST_F(FileStoreTest, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 4, kAdds = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) ASSERT_TRUE(store_->Add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  auto v = store_->Add("counter", 0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, kThreads * kAdds);
  EXPECT_EQ(*store_->Add("counter", -100), 0);
}

TEST_F(FileStoreTest, AddOnNonIntegerIsAnError) {
  ASSERT_TRUE(store_->Set("text", "hello").ok());
  auto v = store_->Add("text", 1);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.status().message()).find("not an integer"), std::string::npos) << v.status();
}

TEST_F(FileStoreTest, DeleteAndCheck) {
  EXPECT_FALSE(*store_->Check({"k"}));
  ASSERT_TRUE(store_->Set("k", "v").ok());
  EXPECT_TRUE(*store_->Check({"k"}));
  ASSERT_TRUE(store_->Delete("k").ok());
  EXPECT_FALSE(*store_->Check({"k"}));
  EXPECT_TRUE(store_->Delete("k").ok());  // deleting a missing key is fine
}

TEST_F(FileStoreTest, EmptyKeyAndBadDirectoryAreErrors) {
  EXPECT_EQ(store_->Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  const std::string file = (dir_ / "plain_file").string();
  ASSERT_TRUE(store_->Set("plain_file", "x").ok());
  auto bad = FileStore::Open(file);  // exists and is not a directory
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace octet::dist
