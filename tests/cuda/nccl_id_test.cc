// NCCL bootstrap (distributed/cuda/nccl_bootstrap.h) without a GPU:
// ncclGetUniqueId works here, so the unique id really passes through a
// FileStore from a rank-0 thread to a rank-1 thread; a missing rank 0 is a
// timeout naming the key; a corrupt id is DATA_LOSS; the init deadline loop
// reports a stuck communicator; InitNcclComm without a device is an error
// status, not a crash. Communicator init itself needs GPUs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include <octet/distributed/store.h>
#include "tests/cuda/require_cuda.h"
#include "tests/distributed/file_store_fixture.h"

#if OCTET_WITH_CUDA
#include <octet/distributed/cuda/nccl_bootstrap.h>
#include <octet/ops/cuda/device_context.h>
#endif

namespace octet::dist {
namespace {

#if !OCTET_WITH_CUDA

TEST(NcclBootstrap, NotBuilt) { OCTET_SKIP_WITHOUT_CUDA(); }

#else

using std::chrono::milliseconds;

using NcclIdTest = testing::FileStoreFixture;

TEST_F(NcclIdTest, UniqueIdPassesFromRank0ToRank1) {
  absl::StatusOr<ncclUniqueId> id0, id1;
  std::thread rank1([&] { id1 = ExchangeNcclUniqueId(*store_, 1, "nccl/unique_id", milliseconds(20000)); });
  std::thread rank0([&] {
    std::this_thread::sleep_for(milliseconds(10));  // rank 1 is already waiting
    id0 = ExchangeNcclUniqueId(*store_, 0, "nccl/unique_id", milliseconds(20000));
  });
  rank0.join();
  rank1.join();
  ASSERT_TRUE(id0.ok()) << id0.status();
  ASSERT_TRUE(id1.ok()) << id1.status();
  EXPECT_EQ(std::memcmp(id0->internal, id1->internal, NCCL_UNIQUE_ID_BYTES), 0);
  // A real id is not all zeros.
  bool nonzero = false;
  for (char c : id0->internal) nonzero |= c != 0;
  EXPECT_TRUE(nonzero);
  // What is stored is exactly the 128 raw bytes.
  EXPECT_EQ(store_->Get("nccl/unique_id", milliseconds(0)).size(), static_cast<size_t>(NCCL_UNIQUE_ID_BYTES));
}

TEST_F(NcclIdTest, MissingRank0IsATimeoutNamingTheKey) {
  auto id = ExchangeNcclUniqueId(*store_, 3, "run42/nccl_id", milliseconds(30));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string msg(id.status().message());
  EXPECT_NE(msg.find("rank 3 did not get the unique id"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'run42/nccl_id'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("timeout 30 ms"), std::string::npos) << msg;
}

TEST_F(NcclIdTest, CorruptIdIsDataLoss) {
  ASSERT_NO_THROW(store_->Set("id", "short"));
  auto id = ExchangeNcclUniqueId(*store_, 1, "id", milliseconds(0));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(id.status().message()).find("holds 5 bytes, expected a 128-byte ncclUniqueId"),
            std::string::npos)
      << id.status();
}

TEST(NcclBootstrap, WaitLoopHonoursDeadlineAndErrors) {
  int calls = 0;
  absl::Status s = internal::WaitForNcclComm(
      [&](ncclResult_t* st) {
        ++calls;
        *st = ncclInProgress;
        return ncclSuccess;
      },
      milliseconds(20), "NCCL communicator init of rank 1 of 2");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(s.message()).find("rank 1 of 2 did not finish within 20 ms"), std::string::npos) << s;
  EXPECT_GT(calls, 1);
  // Finishes as soon as the state leaves ncclInProgress.
  int n = 0;
  s = internal::WaitForNcclComm(
      [&](ncclResult_t* st) {
        *st = ++n < 3 ? ncclInProgress : ncclSuccess;
        return ncclSuccess;
      },
      milliseconds(10000), "init");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(n, 3);
  // An async error is reported with NCCL's text.
  s = internal::WaitForNcclComm(
      [](ncclResult_t* st) {
        *st = ncclRemoteError;
        return ncclSuccess;
      },
      milliseconds(10000), "init");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(std::string(s.message()).find(ncclGetErrorString(ncclRemoteError)), std::string::npos) << s;
}

TEST(NcclBootstrap, InitWithoutDeviceIsAnErrorStatus) {
  if (cuda::IsAvailable()) GTEST_SKIP() << "a CUDA device is present";
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  auto comm = InitNcclComm(id, 0, 1, {.device = 0, .timeout = milliseconds(2000)});
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(std::string(comm.status().message()).find("NCCL communicator init of rank 0 of 1 on cuda:0"),
            std::string::npos)
      << comm.status();
  auto bad = InitNcclComm(id, 2, 2, {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet::dist
