// Training-state checkpoints: layout, round trip, a bit-identical resume of
// a small AdamW run (fp8/fp16 state, bf16 parameters, RNG-driven noise),
// errors, failed saves leaving the previous checkpoint in place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <octet/autograd/grad_mode.h>
#include <octet/core/random.h>
#include <octet/core/scaling.h>
#include <octet/nn/checkpoint.h>
#include <octet/nn/checkpoint_internal.h>
#include <octet/optim/adamw.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

namespace fs = std::filesystem;
using ::octet::testing::ReadFile;
using ::octet::testing::RandomValues;
// These tests call the absl::Status forms (internal::, nn/checkpoint_internal.h),
// which also carry the status code; the public functions throw octet::Error
// with the same message (checkpoint_test.cc: PublicApiThrowsWhatTheStatusSays).

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ::octet::testing::FreshTestDir("checkpoint_test", /*create=*/false); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};


std::string Bytes(const Tensor& t) {
  const Tensor c = t.Contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

TEST_F(CheckpointTest, LayoutAndRoundTrip) {
  TrainingState s;
  s.step = 100;
  Tensor fp8 = FromVector(std::vector<double>{1, -2, 3, 4}, {2, 2}, {.dtype = DType::kFloat8E4M3})
                   .WithScaleMeta(MakePerTensorScale(64.0f, 0.0625f));
  s.model = {{"wte", FromVector(RandomValues(6, 1), {3, 2}, {.dtype = DType::kBFloat16})},
             {"fc.weight_fp8", fp8},
             {"ln.bias", Zeros({2})}};
  s.optimizer.tensors = {{"adamw.m.wte", Full({3, 2}, 0.5)}};
  s.optimizer.scalars = {{"type", "adamw"}, {"step", "100"}};
  s.extra = {{"amax_history.fc", FromVector(RandomValues(16, 2, 0, 5), {16})}};
  s.rng_seed = 42;
  s.rng_offset = 123456789012345ull;
  s.metadata = {{"data.shard", "3"}, {"data.offset", "17"}};
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());

  EXPECT_EQ(ReadFile(dir_ / "LATEST"), "step_00000100\n");
  EXPECT_TRUE(fs::exists(dir_ / "step_00000100" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "step_00000100" / "train_state.safetensors"));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) ++entries, (void)e;
  EXPECT_EQ(entries, 2);  // LATEST + the step directory; no temporaries left

  for (const std::string& from : {dir_.string(), (dir_ / "step_00000100").string()}) {
    absl::StatusOr<TrainingState> l = internal::LoadTrainingState(from);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->step, 100);
    EXPECT_EQ(l->rng_seed, 42u);
    EXPECT_EQ(l->rng_offset, 123456789012345ull);
    EXPECT_EQ(l->metadata, s.metadata);
    EXPECT_EQ(l->optimizer.scalars, s.optimizer.scalars);
    ASSERT_EQ(l->model.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(l->model[i].first, s.model[i].first);
      EXPECT_EQ(Bytes(l->model[i].second), Bytes(s.model[i].second));
      EXPECT_EQ(l->model[i].second.dtype(), s.model[i].second.dtype());
    }
    EXPECT_EQ(ScaleInvValue(l->model[1].second), 1.0f / 64.0f);
    ASSERT_EQ(l->optimizer.tensors.size(), 1u);
    EXPECT_EQ(l->optimizer.tensors[0].first, "adamw.m.wte");
    ASSERT_EQ(l->extra.size(), 1u);
    EXPECT_EQ(l->extra[0].first, "amax_history.fc");
    EXPECT_EQ(Bytes(l->extra[0].second), Bytes(s.extra[0].second));
  }

  // A later step moves LATEST; the older one stays loadable by step.
  s.step = 200;
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());
  EXPECT_EQ(ReadFile(dir_ / "LATEST"), "step_00000200\n");
  EXPECT_EQ(internal::LoadTrainingState(dir_.string())->step, 200);
  EXPECT_EQ(internal::LoadTrainingState(dir_.string(), 100)->step, 100);
  // Saving the same step again replaces it.
  s.metadata["data.offset"] = "18";
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());
  EXPECT_EQ(internal::LoadTrainingState(dir_.string())->metadata.at("data.offset"), "18");
}

// A toy training run: bf16 weights, AdamW with fp8/fp16 state; the gradient is
// a function of the weights plus noise from octet's default generator.
struct ToyRun {
  Tensor w = FromVector(RandomValues(64, 9), {8, 8}, {.dtype = DType::kBFloat16, .requires_grad = true});
  Tensor b = FromVector(RandomValues(8, 10), {8}, {.requires_grad = true});
  optim::AdamW opt{{{"w", w}, {"b", b}},
                   {.lr = 1e-2, .beta2 = 0.95, .weight_decay = 0.1, .state_dtype = optim::StateDType::kFp8Fp16}};

  void Step() {
    const Tensor nw = Randn({8, 8}, 0.0, 0.1), nb = Randn({8}, 0.0, 0.1);
    std::vector<double> gw = w.ToDoubles(), gb = b.ToDoubles();
    const std::vector<double> vw = nw.ToDoubles(), vb = nb.ToDoubles();
    for (size_t i = 0; i < gw.size(); ++i) gw[i] = 2 * gw[i] - 0.5 + vw[i];
    for (size_t i = 0; i < gb.size(); ++i) gb[i] = gb[i] + vb[i];
    w.set_grad(FromVector(gw, w.shape(), {.dtype = DType::kBFloat16}));
    b.set_grad(FromVector(gb, b.shape()));
    opt.Step();
  }
  TrainingState State() const {
    TrainingState s;
    s.step = opt.step_count();
    s.model = {{"w", w}, {"b", b}};
    s.optimizer = opt.StateDict();
    s.rng_seed = DefaultGenerator().seed();
    s.rng_offset = DefaultGenerator().offset();
    return s;
  }
};

// The public functions: the value, or octet::Error with the status' message.
TEST_F(CheckpointTest, PublicApiThrowsWhatTheStatusSays) {
  TrainingState s;
  s.step = 7;
  s.model = {{"w", Full({3}, 0.5)}};
  s.metadata = {{"data.offset", "3"}};
  nn::SaveTrainingState(dir_.string(), s);
  const TrainingState l = nn::LoadTrainingState(dir_.string());
  EXPECT_EQ(l.step, 7);
  EXPECT_EQ(l.metadata.at("data.offset"), "3");
  EXPECT_EQ(l.model.at(0).second.ToDoubles(), (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(nn::LoadTrainingState(dir_.string(), 7).step, 7);
  const CheckpointDirInfo info = nn::ScanCheckpointDir(dir_.string());
  EXPECT_EQ(info.complete_steps, (std::vector<int64_t>{7}));
  EXPECT_TRUE(nn::RemoveStaleCheckpointTemporaries(dir_.string()).empty());
  const std::string missing = (dir_ / "step_00000008").string();
  const std::string expected(internal::LoadTrainingState(dir_.string(), 8).status().message());
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(::octet::testing::ErrorOf([&] { nn::LoadTrainingState(dir_.string(), 8); }), expected);
  EXPECT_THROW(nn::LoadTrainingState(dir_.string(), 8), Error);
  s.step = -1;
  EXPECT_THROW(nn::SaveTrainingState(dir_.string(), s), Error);
}

TEST_F(CheckpointTest, ResumedRunIsBitIdentical) {
  ManualSeed(1234);
  ToyRun a;
  for (int i = 0; i < 5; ++i) a.Step();
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), a.State()).ok());
  for (int i = 0; i < 5; ++i) a.Step();

  ManualSeed(999);  // a different process state before the resume
  ToyRun r;
  absl::StatusOr<TrainingState> l = internal::LoadTrainingState(dir_.string());
  ASSERT_TRUE(l.ok()) << l.status();
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : l->model) {
      Tensor dst = name == "w" ? r.w : r.b;
      std::memcpy(dst.raw_data(), t.raw_data(), t.nbytes());
    }
  }
  ASSERT_NO_THROW(r.opt.LoadStateDict(l->optimizer));
  DefaultGenerator().SetState(l->rng_seed, l->rng_offset);
  EXPECT_EQ(r.opt.step_count(), 5);
  for (int i = 0; i < 5; ++i) r.Step();

  EXPECT_EQ(Bytes(r.w), Bytes(a.w));
  EXPECT_EQ(Bytes(r.b), Bytes(a.b));
  EXPECT_EQ(Bytes(r.opt.state(0).master), Bytes(a.opt.state(0).master));
  EXPECT_EQ(Bytes(r.opt.state(0).m), Bytes(a.opt.state(0).m));
  EXPECT_EQ(Bytes(r.opt.state(0).v), Bytes(a.opt.state(0).v));
  EXPECT_EQ(ScaleInvValue(r.opt.state(0).m), ScaleInvValue(a.opt.state(0).m));
}

TEST_F(CheckpointTest, Errors) {
  // Not a checkpoint directory.
  absl::StatusOr<TrainingState> l = internal::LoadTrainingState((dir_ / "none").string());
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("no complete step directory (the directory does not exist)"), std::string::npos)
      << l.status();
  fs::create_directories(dir_);
  std::ofstream(dir_ / "notes.txt") << "hello\n";
  l = internal::LoadTrainingState(dir_.string());
  EXPECT_NE(l.status().message().find("no complete step directory (1 entry: notes.txt)"), std::string::npos)
      << l.status();
  fs::remove(dir_ / "notes.txt");

  TrainingState s;
  s.step = 7;
  s.model = {{"w", Full({4}, 1.0)}};
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());

  // LATEST naming something else: the step directories decide.
  std::ofstream(dir_ / "LATEST") << "../../etc\n";
  l = internal::LoadTrainingState(dir_.string());
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->step, 7);
  std::ofstream(dir_ / "LATEST") << "step_00000007\n";

  // A corrupt file inside: the safetensors error names it.
  const fs::path model = dir_ / "step_00000007" / "model.safetensors";
  fs::resize_file(model, fs::file_size(model) - 1);
  l = internal::LoadTrainingState(dir_.string());
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find(model.string()), std::string::npos) << l.status();
  EXPECT_NE(l.status().message().find("truncated"), std::string::npos) << l.status();

  // Model and train state of different steps.
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());
  s.step = 8;
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());
  fs::copy_file(dir_ / "step_00000008" / "model.safetensors", model, fs::copy_options::overwrite_existing);
  l = internal::LoadTrainingState(dir_.string(), 7);
  EXPECT_NE(l.status().message().find("model.safetensors is of step 8 but train_state.safetensors is of step 7"),
            std::string::npos)
      << l.status();

  // Missing step.
  l = internal::LoadTrainingState(dir_.string(), 9);
  EXPECT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("step_00000009"), std::string::npos) << l.status();
}

// The check a run makes before its first step: it creates the directory,
// leaves nothing in it, and says why a save could not write there.
TEST_F(CheckpointTest, WritabilityCheckCreatesTheDirectoryLeavesNothingAndSaysWhyNot) {
  const fs::path ckpt = dir_ / "a" / "b";
  ASSERT_TRUE(internal::CheckCheckpointDirWritable(ckpt.string()).ok());
  ASSERT_TRUE(fs::is_directory(ckpt));
  EXPECT_TRUE(fs::is_empty(ckpt));
  ASSERT_TRUE(internal::CheckCheckpointDirWritable(ckpt.string()).ok());  // again, now that it exists
  EXPECT_TRUE(fs::is_empty(ckpt));
  EXPECT_TRUE(internal::CheckCheckpointDirWritable((dir_ / "a").string()).ok());  // beside a subdirectory
  EXPECT_EQ(internal::ScanCheckpointDir((dir_ / "a").string())->others, std::vector<std::string>{"b"});

  // A regular file where the directory should be, and one above it.
  std::ofstream(dir_ / "file") << "x";
  for (const fs::path& bad : {dir_ / "file", dir_ / "file" / "ckpt"}) {
    const absl::Status st = internal::CheckCheckpointDirWritable(bad.string());
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find("checkpoint '" + bad.string() + "': cannot create the directory: "),
              std::string::npos)
        << st;
  }
  EXPECT_EQ(::octet::testing::ErrorOf([&] { CheckCheckpointDirWritable((dir_ / "file").string()); }),
            std::string(internal::CheckCheckpointDirWritable((dir_ / "file").string()).message()));

  // A directory this process may not write into (permission or a file system
  // that refuses), and a missing one inside it.
  const std::string ro = ::octet::testing::UnwritableDir(dir_.string());
  if (ro.empty()) GTEST_SKIP() << "no directory here refuses this process's writes";
  absl::Status st = internal::CheckCheckpointDirWritable(ro);
  EXPECT_FALSE(st.ok());  // the code is errno's (PERMISSION_DENIED for EACCES and EPERM)
  EXPECT_NE(st.message().find("checkpoint '" + ro + "': a save could not write there: cannot create '" + ro +
                              "/.tmp.step_0." + std::to_string(::getpid()) + "': "),
            std::string::npos)
      << st;
  st = internal::CheckCheckpointDirWritable(ro + "/ckpt");
  EXPECT_NE(st.message().find("checkpoint '" + ro + "/ckpt': cannot create the directory: "), std::string::npos)
      << st;
  EXPECT_FALSE(fs::exists(ro + "/ckpt"));
}

// Pruning keeps the newest complete step directories, by step, and touches
// nothing else: not an incomplete step directory, not another file.
TEST_F(CheckpointTest, PruneKeepsTheNewestCompleteCheckpointsOnly) {
  TrainingState s;
  s.model = {{"w", Full({4}, 1.0)}};
  for (const int64_t step : {3, 1, 20, 5, 100}) {  // saved out of order: the steps decide
    s.step = step;
    s.model[0].second = Full({4}, static_cast<double>(step));
    ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());
  }
  fs::create_directories(dir_ / "step_00000000");  // incomplete: no files
  std::ofstream(dir_ / "notes.txt") << "mine\n";

  absl::StatusOr<std::vector<std::string>> removed = internal::PruneCheckpoints(dir_.string(), 2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<std::string>{"step_00000001", "step_00000003", "step_00000005"}));
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_)) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"LATEST", "notes.txt", "step_00000000", "step_00000020",
                                               "step_00000100"}));
  absl::StatusOr<TrainingState> l = internal::LoadTrainingState(dir_.string(), 20);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Bytes(l->model[0].second), Bytes(Full({4}, 20.0)));

  // Nothing more to remove; keeping more than there are removes nothing.
  EXPECT_TRUE(internal::PruneCheckpoints(dir_.string(), 2)->empty());
  EXPECT_TRUE(internal::PruneCheckpoints(dir_.string(), 50)->empty());
  ASSERT_TRUE(internal::PruneCheckpoints(dir_.string(), 1).ok());
  EXPECT_FALSE(fs::exists(dir_ / "step_00000020"));
  EXPECT_EQ(internal::LoadTrainingState(dir_.string())->step, 100);

  const absl::Status st = internal::PruneCheckpoints(dir_.string(), 0).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("the number of checkpoints to keep must be >= 1, got 0"), std::string::npos) << st;
  EXPECT_EQ(::octet::testing::ErrorOf([&] { PruneCheckpoints(dir_.string(), -3); }),
            std::string(internal::PruneCheckpoints(dir_.string(), -3).status().message()));
  EXPECT_FALSE(internal::PruneCheckpoints((dir_ / "notes.txt").string(), 1).ok());  // not a directory
}

// NOTE [checkpoint directory lock] in nn/checkpoint.h: one holder at a time, in
// this process or another (util-linux flock(1) takes the same kind of lock);
// released with the object; the lock file is not part of what
// ScanCheckpointDir lists.
TEST_F(CheckpointTest, ADirectoryLockHasOneHolderAndNamesIt) {
  const std::string dir = (dir_ / "ckpt").string(), lock_file = dir + "/.lock";
  const std::string other_process_locks =
      "flock -n " + ::octet::testing::ShellQuote(lock_file) + " true";  // exit 1 while held
  {
    const CheckpointDirLock lock(dir);
    EXPECT_EQ(lock.unavailable(), "");
    EXPECT_EQ(ReadFile(lock_file).rfind("pid " + std::to_string(::getpid()) + " on host ", 0), 0u)
        << ReadFile(lock_file);
    const std::string msg = ::octet::testing::ErrorOf([&] { CheckpointDirLock again(dir); });
    EXPECT_NE(msg.find("checkpoint '" + dir + "' is in use by another run (pid " + std::to_string(::getpid()) +
                       " on host "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("two runs saving into one directory would mix their checkpoints"), std::string::npos) << msg;
    EXPECT_EQ(::octet::testing::RunCommand(other_process_locks).exit_code, 1);
    const absl::StatusOr<CheckpointDirInfo> info = internal::ScanCheckpointDir(dir);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->num_entries, 0);
    EXPECT_EQ(info->Describe(), "the directory is empty");
  }
  EXPECT_EQ(::octet::testing::RunCommand(other_process_locks).exit_code, 0);  // released with the object
  {
    const CheckpointDirLock lock(dir);  // and taken again
  }
  // Held by another process that writes nothing into the file.
  const std::string dir2 = (dir_ / "ckpt2").string();
  fs::create_directories(dir2);
  ::octet::testing::FileLockHolder other(dir2 + "/.lock");
  const std::string msg = ::octet::testing::ErrorOf([&] { CheckpointDirLock held(dir2); });
  EXPECT_NE(msg.find("checkpoint '" + dir2 + "' is in use by another run (its lock file names no process yet)"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(other.Release());
  EXPECT_EQ(::octet::testing::ErrorOf([&] { CheckpointDirLock freed(dir2); }), "");
}

TEST_F(CheckpointTest, FailedSaveKeepsThePreviousCheckpoint) {
  TrainingState s;
  s.step = 1;
  s.model = {{"w", Full({4}, 1.0)}};
  ASSERT_TRUE(internal::SaveTrainingState(dir_.string(), s).ok());
  s.step = 2;
  s.model = {{"w", Full({4}, 2.0)}, {"__metadata__", Full({1}, 0.0)}};  // refused by the writer
  const absl::Status st = internal::SaveTrainingState(dir_.string(), s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("__metadata__"), std::string::npos) << st;
  EXPECT_EQ(ReadFile(dir_ / "LATEST"), "step_00000001\n");
  EXPECT_FALSE(fs::exists(dir_ / "step_00000002"));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) ++entries, (void)e;
  EXPECT_EQ(entries, 2);  // the temporary directory was removed
  EXPECT_EQ(internal::LoadTrainingState(dir_.string())->step, 1);
}

}  // namespace
}  // namespace octet::nn
