// RedisStore against a real redis-server that the test starts on a free
// port (skipped, saying why, only when the binary is missing; scripts/setup.sh
// installs it), and a 2-rank Gloo job that meets through it.
#include <octet/distributed/redis_store.h>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <thread>

#include <octet/distributed/init.h>
#include "tests/distributed/multiprocess.h"

namespace octet::dist {
namespace {

using std::chrono::milliseconds;
using testing::IsWorker;

std::string RedisServerBinary() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (IsWorker()) GTEST_SKIP();
    const std::string bin = RedisServerBinary();
    if (bin.empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup.sh installs it)";
    dir_ = testing::FreshDir("redis");
    for (int attempt = 0; attempt < 5 && store_ == nullptr; ++attempt) {
      port_ = testing::FreePort();
      pid_ = testing::Spawn({bin, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", dir_},
                            {}, dir_ + "/redis.log");
      ASSERT_GT(pid_, 0);
      for (int i = 0; i < 200 && store_ == nullptr; ++i) {
        std::this_thread::sleep_for(milliseconds(10));
        auto s = RedisStore::Connect("127.0.0.1", port_, milliseconds(200));
        if (s.ok()) store_ = std::move(*s);
      }
      if (store_ == nullptr) StopServer();  // the port was taken meanwhile: try another
    }
    ASSERT_NE(store_, nullptr) << "redis-server did not start: " << testing::ReadFile(dir_ + "/redis.log");
  }
  void TearDown() override {
    store_.reset();
    StopServer();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void StopServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<RedisStore> store_;
};

TEST_F(RedisTest, SetGetBinaryValuesAndOverwrite) {
  std::string value(200, '\0');
  for (int i = 0; i < 200; ++i) value[i] = static_cast<char>(i * 13);
  ASSERT_TRUE(store_->Set("nccl/unique id", value).ok());
  auto got = store_->Get("nccl/unique id", milliseconds(0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  ASSERT_TRUE(store_->Set("nccl/unique id", "x").ok());
  EXPECT_EQ(*store_->Get("nccl/unique id", milliseconds(0)), "x");
}

TEST_F(RedisTest, AddCheckDeleteAndWaitTimeoutNamesTheKey) {
  EXPECT_EQ(*store_->Add("counter", 5), 5);
  EXPECT_EQ(*store_->Add("counter", -2), 3);
  EXPECT_TRUE(*store_->Check({"counter"}));
  EXPECT_FALSE(*store_->Check({"counter", "absent"}));
  ASSERT_TRUE(store_->Delete("counter").ok());
  EXPECT_FALSE(*store_->Check({"counter"}));
  absl::Status s = store_->Wait({"never"}, milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("'never'"), std::string::npos) << s;
  auto g = store_->Get("never", milliseconds(30));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RedisTest, GetWaitsForAnotherClientsSet) {
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    auto other = RedisStore::Connect("127.0.0.1", port_);
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE((*other)->Set("late", "value").ok());
  });
  auto got = store_->Get("late", milliseconds(5000));
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
}

TEST_F(RedisTest, LostServerIsAnErrorNotAHang) {
  StopServer();
  absl::Status s = store_->Set("k", "v");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("127.0.0.1:" + std::to_string(port_)), std::string::npos) << s;
}

TEST(RedisConnect, UnreachableServerNamesTheAddress) {
  if (IsWorker()) GTEST_SKIP();
  const int port = testing::FreePort();  // nobody listens there
  auto s = RedisStore::Connect("127.0.0.1:" + std::to_string(port), milliseconds(500));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("cannot reach Redis at 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << s.status();
  EXPECT_FALSE(RedisStore::Connect("127.0.0.1:notaport").ok());
}

TEST(RedisWorker, DISABLED_AllReduce) {
  absl::StatusOr<DistContext> dist = InitFromEnvironment();
  ASSERT_TRUE(dist.ok()) << dist.status();
  Tensor t = Full({5}, dist->group->rank() + 1.0);
  dist->group->AllReduce(t)->Wait();
  const double n = dist->group->size();
  EXPECT_EQ(t.At({4}), n * (n + 1) / 2);
}

TEST_F(RedisTest, GlooRendezvousThroughRedis) {
  auto results = testing::RunRanks(2, "RedisWorker.DISABLED_AllReduce",
                                   {{"OCTET_MASTER", "redis://127.0.0.1:" + std::to_string(port_)},
                                    {"OCTET_RUN_ID", "run-" + std::to_string(::getpid())},
                                    {"OCTET_TIMEOUT_MS", "10000"}},
                                   dir_, std::chrono::seconds(30));
  testing::ExpectAllPassed(results);
  // The job's keys are in Redis under its run id.
  EXPECT_TRUE(*store_->Check({"run-" + std::to_string(::getpid()) + "/rank/1"}));
}

}  // namespace
}  // namespace octet::dist
