// examples/gpt/run_state: where a train_gpt run starts (--resume, --resume=auto,
// --overwrite), whether a checkpoint is the run's own (--resume_anyway), the
// data fingerprint, and the bare --resume flag.
#include "examples/gpt/run_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include <octet/nn/checkpoint.h>
#include <octet/nn/file_util_internal.h>
#include "tests/test_util.h"

namespace octet::gpt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RunStateTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ::octet::testing::FreshTestDir("run_state_test", /*create=*/false); }
  void TearDown() override {
    nn::SetFileFaultHookForTesting(nullptr);
    fs::remove_all(dir_);
  }
  void Save(int64_t step) {
    nn::TrainingState s;
    s.step = step;
    s.model = {{"w", Full({4}, 1.0)}};
    ASSERT_NO_THROW(nn::SaveTrainingState(dir_.string(), s));
  }
  std::string Message(const absl::StatusOr<ResumePlan>& p) { return std::string(p.status().message()); }
  fs::path dir_;
};

TEST_F(RunStateTest, PlansByModeAndWhatTheDirectoryHolds) {
  const std::string d = dir_.string();
  // Nothing there: only --resume (must) fails, naming what it found.
  absl::StatusOr<ResumePlan> p = PlanResume(d, ResumeMode::kMust, false);
  EXPECT_THAT(Message(p), HasSubstr("--resume: no checkpoint to resume from in '" + d +
                                    "' (the directory does not exist); use --resume=auto"));
  for (ResumeMode m : {ResumeMode::kNo, ResumeMode::kAuto}) {
    p = PlanResume(d, m, false);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->step, -1);
  }
  fs::create_directories(dir_);
  EXPECT_THAT(Message(PlanResume(d, ResumeMode::kMust, false)), HasSubstr("(the directory is empty)"));
  std::ofstream(dir_ / "train.log") << "x";
  EXPECT_THAT(Message(PlanResume(d, ResumeMode::kMust, false)), HasSubstr("(1 entry: train.log)"));
  EXPECT_EQ(PlanResume(d, ResumeMode::kAuto, false)->step, -1);

  Save(10);
  Save(20);
  fs::remove(dir_ / "LATEST");
  for (ResumeMode m : {ResumeMode::kMust, ResumeMode::kAuto}) {
    p = PlanResume(d, m, false);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->step, 20);
    ASSERT_EQ(p->notes.size(), 1u);
    EXPECT_EQ(p->notes[0], "note: no LATEST file (the newest complete checkpoint is step_00000020); resuming from "
                           "step_00000020");
  }
  // From scratch over existing steps: refused unless --overwrite, which removes them.
  EXPECT_THAT(Message(PlanResume(d, ResumeMode::kNo, false)),
              HasSubstr("--ckpt_dir '" + d + "' already holds checkpoints (3 entries: step_00000010, step_00000020, "
                        "train.log); pass --resume to continue from the newest, or --overwrite"));
  p = PlanResume(d, ResumeMode::kNo, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, -1);
  // Planning changes nothing; RemoveOverwritten (once the run holds the lock) removes.
  EXPECT_TRUE(p->notes.empty());
  EXPECT_EQ(p->remove, (std::vector<std::string>{"step_00000010", "step_00000020"}));
  EXPECT_TRUE(fs::exists(dir_ / "step_00000010"));
  ASSERT_TRUE(RemoveOverwritten(d, *p).ok());
  EXPECT_TRUE(p->remove.empty());
  EXPECT_EQ(p->notes, std::vector<std::string>{"--overwrite: removed 2 step directories from '" + d +
                                                "' (step_00000010, step_00000020)"});
  EXPECT_FALSE(fs::exists(dir_ / "step_00000010"));
  EXPECT_TRUE(fs::exists(dir_ / "train.log"));  // not ours: kept
  // Only incomplete step directories: --resume=auto does not start over them.
  fs::create_directories(dir_ / "step_00000030");
  EXPECT_THAT(Message(PlanResume(d, ResumeMode::kAuto, false)),
              HasSubstr("(2 entries: step_00000030 (no model.safetensors, no train_state.safetensors), train.log); "
                        "none is complete, or --overwrite"));
}

TEST_F(RunStateTest, RefusesAStepDirectoryAndAnUnreadableDirectory) {
  Save(5);
  const std::string step = (dir_ / "step_00000005").string();
  EXPECT_THAT(Message(PlanResume(step, ResumeMode::kMust, false)),
              HasSubstr("--ckpt_dir '" + step + "' is a step directory (named step_00000005), not a checkpoint "
                        "directory; pass the directory that holds the step directories ('" + dir_.string() + "')"));
  fs::rename(dir_ / "step_00000005", dir_ / "renamed");
  EXPECT_THAT(Message(PlanResume((dir_ / "renamed").string(), ResumeMode::kAuto, false)),
              HasSubstr("is a step directory (it holds model.safetensors)"));
  fs::rename(dir_ / "renamed", dir_ / "step_00000005");
  // EACCES is injected (root reads anything); it must not read as "empty".
  nn::SetFileFaultHookForTesting([&](std::string_view op, const std::string& p) {
    return op == "opendir" && p == dir_.string() ? EACCES : 0;
  });
  for (ResumeMode m : {ResumeMode::kNo, ResumeMode::kMust, ResumeMode::kAuto}) {
    absl::StatusOr<ResumePlan> p = PlanResume(dir_.string(), m, false);
    ASSERT_FALSE(p.ok());
    // nn::ScanCheckpointDir throws octet::Error; PlanResume reports it as an
    // invalid --ckpt_dir, keeping the message.
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
    EXPECT_THAT(Message(p), HasSubstr("--ckpt_dir: directory '" + dir_.string() + "': cannot list: Permission denied"));
  }
}

TEST_F(RunStateTest, RunIdentityMismatchesNameBothValues) {
  std::map<std::string, std::string> run;
  for (const std::string& k : RunIdentityKeys()) run[k] = "v";
  std::map<std::string, std::string> saved = run;
  std::vector<std::string> warnings;
  EXPECT_TRUE(CheckRunAgrees(saved, run, false, &warnings).ok());
  saved["train.seed"] = "11";
  run["train.seed"] = "12";
  saved.erase("dataset.fingerprint");
  const absl::Status s = CheckRunAgrees(saved, run, false, &warnings);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("train.seed: the checkpoint has '11', this run has '12'; dataset.fingerprint: the checkpoint "
                        "has (missing), this run has 'v'"));
  EXPECT_TRUE(warnings.empty());
  ASSERT_TRUE(CheckRunAgrees(saved, run, true, &warnings).ok());
  EXPECT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("warning: --resume_anyway: train.seed"));
}

TEST_F(RunStateTest, DatasetFingerprintFollowsContentAndSizes) {
  auto text = [](std::vector<uint16_t> tokens) {
    TokenDataset t = *TokenDataset::FromTokens(tokens, 256, "train");
    return DatasetFingerprint(t, nullptr, true);
  };
  const std::string a = text({1, 2, 3, 4}), same = text({1, 2, 3, 4}), b = text({1, 2, 3, 5});
  EXPECT_EQ(a, same);
  EXPECT_NE(a, b);  // same size, one token differs
  EXPECT_THAT(a, HasSubstr("text: 4 train + 0 val tokens, crc32c "));
}

TEST(ResumeFlag, BareResumeMeansMustAndValuesParse) {
  char prog[] = "train_gpt", bare[] = "--resume", single[] = "-resume", no[] = "--noresume", aut[] = "--resume=auto",
       dashes[] = "--";
  char* argv[] = {prog, bare, single, no, aut, dashes, bare};
  const std::vector<char*> out = NormalizeResumeFlag(7, argv);
  ASSERT_EQ(out.size(), 7u);
  EXPECT_STREQ(out[1], "--resume=true");
  EXPECT_STREQ(out[2], "--resume=true");
  EXPECT_STREQ(out[3], "--resume=false");
  EXPECT_STREQ(out[4], "--resume=auto");
  EXPECT_STREQ(out[6], "--resume");  // after "--": not a flag
  ResumeMode m;
  ASSERT_TRUE(ParseResumeMode("true", &m));
  EXPECT_EQ(m, ResumeMode::kMust);
  ASSERT_TRUE(ParseResumeMode("auto", &m));
  EXPECT_EQ(m, ResumeMode::kAuto);
  ASSERT_TRUE(ParseResumeMode("false", &m));
  EXPECT_EQ(m, ResumeMode::kNo);
  EXPECT_FALSE(ParseResumeMode("sometimes", &m));
}

}  // namespace
}  // namespace octet::gpt
