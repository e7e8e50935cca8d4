// train_gpt under octet-run: a small GPT trained by 2 ranks with FP8 gradient
// sync ends within 1 % of the validation loss of FP32 sync; ZeRO-1 (fp32
// weight gather) within 1 % too, with FP32 or FP8 gradients; 4 ranks and BF16
// sync run; a checkpoint written by 2 ZeRO-1 ranks resumes in a single
// process; ZeRO-1 refuses a narrow AdamW state before reading the data.
// Default corpus: Debian's fortunes (skipped, saying so, when absent).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "examples/gpt/data.h"
#include "tests/examples/programs.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

using ::octet::testing::kOctetRun;
using ::octet::testing::kTrainGpt;

// A short run: 2 layers, width 64, 40 steps of 8 × 64 tokens per rank.
const char* kSmall =
    " --steps 40 --n_layer 2 --n_embd 64 --n_head 2 --batch 8 --seq_len 64 --block_size 64 --warmup 5"
    " --eval_every 0 --eval_batches 8 --log_every 10 --sample_tokens 0 --threads 1";

struct TrainRun {
  int exit_code = -1;
  std::string out;
  double val_loss = -1;
};

TrainRun Train(int ranks, const std::string& flags) {
  const octet::testing::CommandResult run = octet::testing::RunCommand(
      octet::testing::ShellQuote(kOctetRun) + " -n " + std::to_string(ranks) + " --timeout-ms 60000 -- " +
          octet::testing::ShellQuote(kTrainGpt) + kSmall + " " + flags,
      {.merge_stderr = true});
  TrainRun r;
  r.exit_code = run.exit_code;
  r.out = run.out;
  const size_t at = r.out.find("final val loss ");
  if (at != std::string::npos) r.val_loss = std::atof(r.out.c_str() + at + 15);
  return r;
}

class TrainDist : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTrainGpt) || !fs::exists(kOctetRun)) GTEST_SKIP() << "train_gpt or octet-run not built";
    if (!fs::exists(octet::gpt::kDefaultCorpusPath)) GTEST_SKIP() << "no fortunes corpus (scripts/setup.sh installs it)";
    dir_ = octet::testing::FreshTestDir("train_dist");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(TrainDist, Fp8SyncEndsWithinOnePercentOfFp32SyncAndZero1WithEitherToo) {
  const TrainRun fp32 = Train(2, "--grad_sync=fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.out;
  ASSERT_GT(fp32.val_loss, 0) << fp32.out;
  EXPECT_NE(fp32.out.find("distributed: 2 ranks, DDP, grad sync fp32"), std::string::npos) << fp32.out;
  const TrainRun fp8 = Train(2, "--grad_sync=fp8");
  ASSERT_EQ(fp8.exit_code, 0) << fp8.out;
  EXPECT_NEAR(fp8.val_loss, fp32.val_loss, 0.01 * fp32.val_loss) << fp8.out;
  const TrainRun zero = Train(2, "--zero1");
  ASSERT_EQ(zero.exit_code, 0) << zero.out;
  EXPECT_NE(zero.out.find("ZeRO-1"), std::string::npos) << zero.out;
  EXPECT_NEAR(zero.val_loss, fp32.val_loss, 0.01 * fp32.val_loss) << zero.out;
  const TrainRun zero_fp8 = Train(2, "--zero1 --grad_sync=fp8");
  ASSERT_EQ(zero_fp8.exit_code, 0) << zero_fp8.out;
  EXPECT_NE(zero_fp8.out.find("ZeRO-1 ("), std::string::npos) << zero_fp8.out;
  EXPECT_NE(zero_fp8.out.find("grads fp8_e4m3"), std::string::npos) << zero_fp8.out;
  EXPECT_NEAR(zero_fp8.val_loss, fp32.val_loss, 0.01 * fp32.val_loss) << zero_fp8.out;
  // The loss went down from ln(256) = 5.55: the runs trained.
  EXPECT_LT(fp32.val_loss, 4.5) << fp32.out;
}

TEST_F(TrainDist, FourRanksBf16SyncAndO1Run) {
  const TrainRun r = Train(4, "--grad_sync=bf16 --amp O1 --steps 4 --log_every 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank 0] step     4/4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank 1] step"), std::string::npos) << "only rank 0 logs progress:\n" << r.out;
}

TEST_F(TrainDist, Zero1RefusesNarrowAdamWStateBeforeReadingData) {
  const TrainRun r = Train(2, "--zero1 --state_dtype=fp8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--zero1 shards float32 AdamW state only; --state_dtype is fp8"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("data: "), std::string::npos) << "nothing read first:\n" << r.out;
}

TEST_F(TrainDist, Zero1CheckpointResumesInOneProcess) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const TrainRun two = Train(2, "--zero1 --steps 6 --stop_after 4 --ckpt_dir " + octet::testing::ShellQuote(ckpt));
  ASSERT_EQ(two.exit_code, 0) << two.out;
  const TrainRun one = Train(1, "--steps 6 --ckpt_dir " + octet::testing::ShellQuote(ckpt) + " --resume");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  EXPECT_NE(one.out.find("resumed from " + ckpt + " at step 4"), std::string::npos) << one.out;
}

// A SIGTERM to octet-run reaches every rank; they agree on one step, save it
// (ZeRO-1: the state gathered by collectives) and exit 143, which octet-run
// reports as stopped, not failed. The checkpoint resumes in one process.
TEST_F(TrainDist, ASignalToOctetRunStopsTheRanksAtOneStepWithACheckpoint) {
  const std::string ckpt = (dir_ / "ckpt").string(), out = (dir_ / "out.txt").string();
  using octet::testing::ShellQuote;
  const octet::testing::CommandResult run = octet::testing::RunUntilOutputThen(
      ShellQuote(kOctetRun) + " -n 2 --timeout-ms 60000 --grace-ms 30000 -- " + ShellQuote(kTrainGpt) + kSmall +
          " --zero1 --steps 100000 --log_every 1 --ckpt_dir " + ShellQuote(ckpt),
      out, "step     3/", "kill -TERM $p; wait $p");
  const std::string log = octet::testing::ReadFile(out);
  EXPECT_EQ(run.exit_code, 128 + 15) << log;
  EXPECT_NE(log.find("octet-run: got signal 15; stopping every rank"), std::string::npos) << log;
  const size_t at = log.find("[rank 0] stopping after step ");
  ASSERT_NE(at, std::string::npos) << log;
  const int k = std::atoi(log.c_str() + at + 29);
  EXPECT_GE(k, 3) << log;
  EXPECT_EQ(log.find("FAILED"), std::string::npos) << log;
  EXPECT_EQ(log.find("error"), std::string::npos) << log;
  const TrainRun one = Train(1, "--steps 100000 --stop_after " + std::to_string(k + 1) + " --ckpt_dir " +
                                    ShellQuote(ckpt) + " --resume");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  EXPECT_NE(one.out.find("resumed from " + ckpt + " at step " + std::to_string(k)), std::string::npos) << one.out;
}

}  // namespace
