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
#include "tests/test_util.h"

namespace octet::dist {
namespace {

using octet::testing::MessageOf;
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
        try {
          store_ = RedisStore::Connect("127.0.0.1", port_, milliseconds(200));
        } catch (const Error&) {  // not listening yet
        }
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
  ASSERT_NO_THROW(store_->Set("nccl/unique id", value));
  EXPECT_EQ(store_->Get("nccl/unique id", milliseconds(0)), value);
  store_->Set("nccl/unique id", "x");
  EXPECT_EQ(store_->Get("nccl/unique id", milliseconds(0)), "x");
}

TEST_F(RedisTest, AddCheckDeleteAndWaitTimeoutNamesTheKey) {
  EXPECT_EQ(store_->Add("counter", 5), 5);
  EXPECT_EQ(store_->Add("counter", -2), 3);
  EXPECT_TRUE(store_->Check({"counter"}));
  EXPECT_FALSE(store_->Check({"counter", "absent"}));
  store_->Delete("counter");
  EXPECT_FALSE(store_->Check({"counter"}));
  store_->Set("rank0", "x");
  std::string msg = MessageOf<StoreTimeoutError>([&] { store_->Wait({"rank0", "never", "nor"}, milliseconds(50)); });
  EXPECT_EQ(msg.find("'rank0'"), std::string::npos) << msg;  // only the missing keys
  EXPECT_NE(msg.find("keys 'never', 'nor'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("timeout 50 ms, waited "), std::string::npos) << msg;
  EXPECT_NE(msg.find("RedisStore 127.0.0.1:"), std::string::npos) << msg;
  msg = MessageOf<StoreTimeoutError>([&] { store_->Get("never", milliseconds(30)); });
  EXPECT_NE(msg.find("key 'never' (timeout 30 ms, waited "), std::string::npos) << msg;
}

TEST_F(RedisTest, GetWaitsForAnotherClientsSet) {
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_NO_THROW(RedisStore::Connect("127.0.0.1", port_)->Set("late", "value"));
  });
  std::string got;
  EXPECT_NO_THROW(got = store_->Get("late", milliseconds(5000)));
  writer.join();
  EXPECT_EQ(got, "value");
}

TEST_F(RedisTest, LostServerIsAnErrorNotAHang) {
  StopServer();
  const std::string msg = MessageOf<Error>([&] { store_->Set("k", "v"); });
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port_)), std::string::npos) << msg;
}

TEST(RedisConnect, UnreachableServerNamesTheAddress) {
  if (IsWorker()) GTEST_SKIP();
  const int port = testing::FreePort();  // nobody listens there
  const std::string msg =
      MessageOf<Error>([&] { RedisStore::Connect("127.0.0.1:" + std::to_string(port), milliseconds(500)); });
  EXPECT_NE(msg.find("cannot reach Redis at 127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
  const std::string bad_port = MessageOf<Error>([] { RedisStore::Connect("127.0.0.1:notaport"); });
  EXPECT_NE(bad_port.find("bad port in '127.0.0.1:notaport'"), std::string::npos) << bad_port;
}

TEST(RedisWorker, DISABLED_AllReduce) {
  DistContext dist = InitFromEnvironment();
  Tensor t = Full({5}, dist.group->rank() + 1.0);
  dist.group->AllReduce(t)->Wait();
  const double n = dist.group->size();
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
  EXPECT_TRUE(store_->Check({"run-" + std::to_string(::getpid()) + "/rank/1"}));
}

}  // namespace
}  // namespace octet::dist
