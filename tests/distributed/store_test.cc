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
#include "tests/test_util.h"

namespace octet::dist {
namespace {

using octet::testing::MessageOf;
using std::chrono::milliseconds;

using FileStoreTest = testing::FileStoreFixture;

TEST_F(FileStoreTest, SetThenGetReturnsBinaryValue) {
  std::string value(128, '\0');
  for (int i = 0; i < 128; ++i) value[i] = static_cast<char>(i * 37);
  ASSERT_NO_THROW(store_->Set("nccl/unique_id", value));
  EXPECT_EQ(store_->Get("nccl/unique_id", milliseconds(0)), value);
}

TEST_F(FileStoreTest, KeysWithAnyBytesMapToDistinctFiles) {
  const std::vector<std::string> keys = {"a/b", "a%2Fb", "a.b", ".tmp.x", "rank 3", "ü"};
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_NO_THROW(store_->Set(keys[i], std::to_string(i)));
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string got;
    ASSERT_NO_THROW(got = store_->Get(keys[i], milliseconds(0))) << keys[i];
    EXPECT_EQ(got, std::to_string(i)) << keys[i];
  }
  // Every file is directly inside the store directory, no key made a subdirectory.
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) EXPECT_TRUE(entry.is_regular_file());
}

TEST_F(FileStoreTest, SetReplacesValue) {
  store_->Set("k", "first value");
  store_->Set("k", "2");
  EXPECT_EQ(store_->Get("k", milliseconds(0)), "2");
}

TEST_F(FileStoreTest, GetTimesOutNamingKeyAndWait) {
  const std::string msg = MessageOf<StoreTimeoutError>([&] { store_->Get("never_set", milliseconds(30)); });
  EXPECT_NE(msg.find("key 'never_set' (timeout 30 ms, waited "), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
}

TEST_F(FileStoreTest, GetWaitsForAnotherThreadsSet) {
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    store_->Set("late", "here");
  });
  std::string got;
  EXPECT_NO_THROW(got = store_->Get("late", milliseconds(10000)));
  writer.join();
  EXPECT_EQ(got, "here");
}

TEST_F(FileStoreTest, WaitReportsOnlyMissingKeys) {
  store_->Set("rank0", "x");
  const std::string msg =
      MessageOf<StoreTimeoutError>([&] { store_->Wait({"rank0", "rank1", "rank2"}, milliseconds(20)); });
  EXPECT_EQ(msg.find("'rank0'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("keys 'rank1', 'rank2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("timeout 20 ms"), std::string::npos) << msg;
  store_->Set("rank1", "x");
  store_->Set("rank2", "x");
  EXPECT_NO_THROW(store_->Wait({"rank0", "rank1", "rank2"}, milliseconds(0)));
}

TEST_F(FileStoreTest, ReaderNeverSeesPartialValue) {
  const std::string big_a(1 << 20, 'a'), big_b(1 << 20, 'b');
  store_->Set("blob", big_a);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 20 && !stop; ++i) EXPECT_NO_THROW(store_->Set("blob", i % 2 ? big_a : big_b));
  });
  int bad = 0;
  for (int i = 0; i < 50; ++i) {
    std::string got;
    EXPECT_NO_THROW(got = store_->Get("blob", milliseconds(1000)));
    if (!(got == big_a || got == big_b)) ++bad;
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
      for (int i = 0; i < kAdds; ++i) EXPECT_NO_THROW(store_->Add("counter", 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->Add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(store_->Add("counter", -100), 0);
}

TEST_F(FileStoreTest, AddOnNonIntegerIsAnError) {
  store_->Set("text", "hello");
  const std::string msg = MessageOf<Error>([&] { store_->Add("text", 1); });
  EXPECT_NE(msg.find("key 'text' holds 'hello', not an integer"), std::string::npos) << msg;
  // The lock was released: the key can be replaced and counted.
  store_->Set("text", "41");
  EXPECT_EQ(store_->Add("text", 1), 42);
}

TEST_F(FileStoreTest, DeleteAndCheck) {
  EXPECT_FALSE(store_->Check({"k"}));
  store_->Set("k", "v");
  EXPECT_TRUE(store_->Check({"k"}));
  store_->Delete("k");
  EXPECT_FALSE(store_->Check({"k"}));
  EXPECT_NO_THROW(store_->Delete("k"));  // deleting a missing key is fine
}

TEST_F(FileStoreTest, EmptyKeyAndBadDirectoryAreErrors) {
  EXPECT_NE(MessageOf<Error>([&] { store_->Set("", "v"); }).find("FileStore: empty key"), std::string::npos);
  EXPECT_NE(MessageOf<Error>([&] { store_->Get(std::string(201, 'k'), milliseconds(0)); })
                .find("key of 201 bytes is longer than 200"),
            std::string::npos);
  const std::string file = (dir_ / "plain_file").string();
  store_->Set("plain_file", "x");
  // Exists and is not a directory: the error names it.
  const std::string msg = MessageOf<Error>([&] { FileStore::Open(file); });
  EXPECT_NE(msg.find("FileStore: "), std::string::npos) << msg;
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
}

}  // namespace
}  // namespace octet::dist
