// End-to-end tests of train_gpt's checkpoints: a bit-identical resume at
// every level (--ckpt_keep on the way), a checkpoint that is not the run's
// own, the directory lock, and stopping on a signal (NOTE [stopping on a
// signal] in examples/gpt/stop_signal.h). The fixture is train_test.cc's
// (tests/examples/train_gpt_fixture.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <octet/nn/checkpoint.h>

#include "tests/examples/programs.h"
#include "tests/examples/train_gpt_fixture.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using ::octet::testing::ReadFile;
using ::octet::testing::ShellQuote;
using ::octet::testing::train_gpt::RunResult;
using ::octet::testing::train_gpt::TrainGpt;

TEST_F(TrainGpt, ResumeIsBitIdenticalAtEveryLevel) {
  for (const std::string amp : {"O0", "O1", "O2"}) {
    const fs::path full = *dir_ / ("full_" + amp + ".jsonl"), split = *dir_ / ("split_" + amp + ".jsonl");
    const fs::path ckpt_full = *dir_ / ("ckpt_full_" + amp), ckpt = *dir_ / ("ckpt_" + amp);
    std::vector<std::string> a = BaseArgs(amp, 60, full.string());
    a.push_back("--ckpt_dir=" + ckpt_full.string());
    a.push_back("--eval_every=20");
    ASSERT_EQ(Run(a).exit_code, 0) << amp;
    std::vector<std::string> b = BaseArgs(amp, 60, split.string());
    b.push_back("--ckpt_dir=" + ckpt.string());
    b.push_back("--eval_every=20");
    std::vector<std::string> first = b;
    first.push_back("--stop_after=30");
    first.push_back("--ckpt_every=10");
    if (amp == "O0") first.push_back("--ckpt_keep=2");  // steps 10, 20, 30 saved; 10 removed
    const RunResult r1 = Run(first);
    ASSERT_EQ(r1.exit_code, 0) << amp << r1.err;
    EXPECT_THAT(r1.out, HasSubstr("stopping after step 30"));
    std::vector<std::string> entries;
    for (const auto& e : fs::directory_iterator(ckpt)) entries.push_back(e.path().filename().string());
    std::sort(entries.begin(), entries.end());
    const std::vector<std::string> kept = {".lock", "LATEST", "step_00000020", "step_00000030"};
    const std::vector<std::string> all = {".lock", "LATEST", "step_00000010", "step_00000020", "step_00000030"};
    EXPECT_EQ(entries, amp == "O0" ? kept : all) << amp;
    // LATEST must not matter: missing at O1, stale (naming step 10) at O2.
    if (amp == "O1") fs::remove(ckpt / "LATEST");
    if (amp == "O2") std::ofstream(ckpt / "LATEST") << "step_00000010\n";
    std::vector<std::string> second = b;
    second.push_back("--resume");
    const RunResult r2 = Run(second);
    ASSERT_EQ(r2.exit_code, 0) << amp << r2.err;
    EXPECT_THAT(r2.out, HasSubstr("resumed from " + ckpt.string() + " at step 30"));
    if (amp == "O1") {
      EXPECT_THAT(r2.out, HasSubstr("note: no LATEST file (the newest complete checkpoint is step_00000030)"));
    }
    if (amp == "O2") EXPECT_THAT(r2.out, HasSubstr("note: LATEST names step_00000010 but the newest"));
    const Metrics mf = ReadMetrics(full), ms = ReadMetrics(split);
    ASSERT_EQ(mf.losses.size(), 60u);
    ASSERT_EQ(ms.losses.size(), 60u);
    for (size_t i = 0; i < 60; ++i) EXPECT_EQ(ms.losses[i], mf.losses[i]) << amp << " step " << i + 1;
    EXPECT_EQ(ms.final_val, mf.final_val) << amp;
  }
}

// NOTE [stopping on a signal] in examples/gpt/stop_signal.h: a SIGTERM ends the run after
// its step with a checkpoint of that step (exit 143), and --resume continues
// it bit-identically: the losses of the stopped and resumed run are those of
// one uninterrupted run (both --stop_after the same step of a 100000-step
// schedule, so the signal always comes before the end).
TEST_F(TrainGpt, ASignalStopsTheRunAfterItsStepWithACheckpointThatResumesIt) {
  const fs::path ckpt = *dir_ / "ckpt_signal", out = *dir_ / "signal_out.txt";
  const fs::path split = *dir_ / "signal_split.jsonl", whole = *dir_ / "signal_whole.jsonl";
  std::vector<std::string> args = BaseArgs("O0", 100000, split.string());
  args.insert(args.end(), {"--ckpt_dir=" + ckpt.string(), "--log_every=1"});
  const RunResult stopped = RunUntilStep3Then(args, out, "kill -TERM $p; wait $p");
  const std::string log = ReadFile(out);
  ASSERT_EQ(stopped.exit_code, 128 + SIGTERM) << log;
  const size_t at = log.find("stopping after step ");
  ASSERT_NE(at, std::string::npos) << log;
  const int k = std::atoi(log.c_str() + at + 20);
  ASSERT_GE(k, 3) << log;
  EXPECT_THAT(log, HasSubstr("stopping after step " + std::to_string(k) + " on signal 15 (Terminated): saved a "
                             "checkpoint in " + ckpt.string() + "; --resume continues it"));
  EXPECT_THAT(log, Not(HasSubstr("done:")));  // no final evaluation or summary
  EXPECT_TRUE(fs::exists(ckpt / octet::nn::StepDirName(k))) << log;
  ASSERT_EQ(ReadMetrics(split).losses.size(), static_cast<size_t>(k));

  std::vector<std::string> resume = args;
  resume.insert(resume.end(), {"--resume", "--stop_after=" + std::to_string(k + 3)});
  const RunResult r = Run(resume);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("resumed from " + ckpt.string() + " at step " + std::to_string(k)));
  std::vector<std::string> once = BaseArgs("O0", 100000, whole.string());
  once.push_back("--stop_after=" + std::to_string(k + 3));
  ASSERT_EQ(Run(once).exit_code, 0);
  const Metrics ms = ReadMetrics(split), mw = ReadMetrics(whole);
  ASSERT_EQ(mw.losses.size(), static_cast<size_t>(k + 3));
  EXPECT_EQ(ms.losses, mw.losses);
}

// NOTE [checkpoint directory lock] in nn/checkpoint.h: a run whose --ckpt_dir another run holds
// stops before its first step and before --overwrite removes anything; once
// the holder is gone it runs.
TEST_F(TrainGpt, ACheckpointDirInUseByAnotherRunIsRefusedBeforeAnyChange) {
  const fs::path ckpt = *dir_ / "ckpt_locked";
  std::vector<std::string> args = BaseArgs("O0", 2, (*dir_ / "locked.jsonl").string());
  args.push_back("--ckpt_dir=" + ckpt.string());
  ASSERT_EQ(Run(args).exit_code, 0);  // leaves step_00000002
  ::octet::testing::FileLockHolder other((ckpt / ".lock").string(), "pid %s on host elsewhere");
  const std::string holder = "pid " + other.pid() + " on host elsewhere";
  std::vector<std::string> overwrite = args;
  overwrite.push_back("--overwrite");
  const RunResult r = Run(overwrite);
  EXPECT_TRUE(other.Release());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("train_gpt: error: checkpoint '" + ckpt.string() + "' is in use by another run (" +
                               holder + "): two runs saving into one directory would mix their checkpoints"));
  EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  EXPECT_THAT(r.out, Not(HasSubstr("--overwrite: removed")));
  EXPECT_TRUE(fs::exists(ckpt / "step_00000002"));  // not removed
  const RunResult after = Run(overwrite);
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_THAT(after.out, HasSubstr("--overwrite: removed 1 step directory from '" + ckpt.string() + "'"));
}

// NOTE [stopping on a signal] in examples/gpt/stop_signal.h: no thread of a training run takes SIGINT or
// SIGTERM with a handler (a handler inside oneDNN 2.7's f32 GEMM kernels can
// corrupt the heap): every thread blocks both and none has a handler; one
// thread takes them with sigwait. Read from /proc while the run trains with
// 2 OpenMP threads.
TEST_F(TrainGpt, NoThreadOfARunTakesTheStopSignalsWithAHandler) {
  const fs::path ckpt = *dir_ / "ckpt_masks", out = *dir_ / "masks_out.txt", masks = *dir_ / "masks.txt";
  std::vector<std::string> args = BaseArgs("O0", 100000, (*dir_ / "masks.jsonl").string());
  args.insert(args.end(), {"--ckpt_dir=" + ckpt.string(), "--log_every=1"});
  const RunResult r = RunUntilStep3Then(args, out,
                                        "{ grep SigCgt /proc/$p/status; for t in /proc/$p/task/*; do "
                                        "echo \"SigBlk: $(grep SigBlk $t/status | cut -f2) $(cat $t/wchan)\"; "
                                        "done; } > " + ShellQuote(masks.string()) + "; kill -TERM $p; wait $p");
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << ReadFile(out);
  const uint64_t stop_bits = (uint64_t{1} << (SIGINT - 1)) | (uint64_t{1} << (SIGTERM - 1));
  std::istringstream in(ReadFile(masks));
  std::string line;
  int threads = 0, waiting = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, hex, wchan;
    words >> key >> hex >> wchan;
    const uint64_t bits = std::stoull(hex, nullptr, 16);
    if (key == "SigCgt:") {
      EXPECT_EQ(bits & stop_bits, 0u) << "a handler for SIGINT or SIGTERM is installed: " << line;
    } else if (wchan.starts_with("do_sigtimedwait")) {
      ++waiting;  // the signal thread: the kernel shows the signals it waits for unblocked meanwhile
    } else {
      ++threads;
      EXPECT_EQ(bits & stop_bits, stop_bits) << "a thread does not block SIGINT and SIGTERM: " << line;
    }
  }
  EXPECT_EQ(waiting, 1) << ReadFile(masks);
  EXPECT_GE(threads, 2) << ReadFile(masks);  // main and an OpenMP worker
}

// A second signal ends the run at once, without the checkpoint: SIGINT and
// SIGTERM are both pending when the stopped run continues, the first asks for
// the stop, the second ends the process.
TEST_F(TrainGpt, ASecondSignalEndsTheRunAtOnce) {
  const fs::path ckpt = *dir_ / "ckpt_two_signals", out = *dir_ / "two_signals_out.txt";
  std::vector<std::string> args = BaseArgs("O0", 100000, (*dir_ / "two_signals.jsonl").string());
  args.insert(args.end(), {"--ckpt_dir=" + ckpt.string(), "--log_every=1"});
  const RunResult r =
      RunUntilStep3Then(args, out, "kill -STOP $p; kill -INT $p; kill -TERM $p; kill -CONT $p; wait $p");
  const std::string log = ReadFile(out);
  EXPECT_TRUE(r.exit_code == 128 + SIGINT || r.exit_code == 128 + SIGTERM) << r.exit_code << "\n" << log;
  EXPECT_THAT(log, Not(HasSubstr("stopping after step"))) << log;
  EXPECT_EQ(octet::nn::ScanCheckpointDir(ckpt.string()).num_entries, 0) << "a checkpoint was written:\n" << log;
}

// NOTE [checkpoint layout] and examples/gpt/run_state.h, end to end: what
// --resume refuses, each with the message naming what is wrong.
TEST_F(TrainGpt, ResumeRefusesCheckpointsThatAreNotItsOwn) {
  const fs::path ckpt = *dir_ / "own", other = *dir_ / "own_other", junk = *dir_ / "own_junk";
  auto args = [&](const fs::path& dir, std::vector<std::string> extra) {
    std::vector<std::string> a = BaseArgs("O0", 10, (*dir_ / "own.jsonl").string());
    a.push_back("--ckpt_dir=" + dir.string());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto expect_error = [&](const std::vector<std::string>& a, const std::string& message) {
    const RunResult r = Run(a);
    EXPECT_EQ(r.exit_code, 1) << message << "\n" << r.out;
    EXPECT_THAT(r.err, HasSubstr("train_gpt: error: "));
    EXPECT_THAT(r.err, HasSubstr(message));
  };
  ASSERT_EQ(Run(args(ckpt, {"--stop_after=5"})).exit_code, 0);
  ASSERT_TRUE(fs::exists(ckpt / "step_00000005"));

  // Fresh runs do not overwrite existing steps; a step directory is not a --ckpt_dir.
  expect_error(args(ckpt, {}), "--ckpt_dir '" + ckpt.string() + "' already holds checkpoints (2 entries: LATEST, "
                                   "step_00000005); pass --resume to continue from the newest, or --overwrite");
  expect_error(args(ckpt / "step_00000005", {"--resume"}),
               "--ckpt_dir '" + (ckpt / "step_00000005").string() + "' is a step directory (named step_00000005)");
  // Another seed, model shape, amp level, data set: both values named.
  expect_error(args(ckpt, {"--resume", "--seed=12"}),
               "--resume: the checkpoint is of another run: train.seed: the checkpoint has '11', this run has '12'");
  expect_error(args(ckpt, {"--resume", "--n_embd=32"}), "gpt.n_embd: the checkpoint has '64', this run has '32'");
  expect_error(args(ckpt, {"--resume", "--amp=O2"}), "amp.level: the checkpoint has 'O0', this run has 'O2'");
  // --stop_after counts from step 0: one the resumed run has passed is no stop.
  expect_error(args(ckpt, {"--resume", "--stop_after=3"}),
               "--stop_after 3 is not a step this run takes (steps 6 to 10: it resumes after it)");
  const std::string text = ReadFile(*dir_ / "corpus.txt");
  std::ofstream(*dir_ / "corpus_b.txt") << text.substr(0, text.size() - 1000);
  std::vector<std::string> other_data = args(ckpt, {"--resume"});
  other_data[0] = "--data=" + (*dir_ / "corpus_b.txt").string();
  expect_error(other_data, "dataset.fingerprint: the checkpoint has 'text: ");
  // ... unless asked.
  RunResult r = Run(args(ckpt, {"--resume", "--seed=12", "--resume_anyway", "--steps=10"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("warning: --resume_anyway: train.seed: the checkpoint has '11', this run has '12'"));

  // Corrupt data, and another run's model file of the same shapes.
  ASSERT_EQ(Run(args(other, {"--seed=12", "--stop_after=5"})).exit_code, 0);
  const fs::path model = ckpt / "step_00000005" / "model.safetensors";
  std::string bytes = ReadFile(model);
  bytes[bytes.size() - 3] ^= 0x20;
  std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;
  fs::remove_all(ckpt / "step_00000010");  // the --resume_anyway run's
  expect_error(args(ckpt, {"--resume"}), "safetensors file '" + model.string() + "': checksum mismatch in tensor '");
  fs::copy_file(other / "step_00000005" / "model.safetensors", model, fs::copy_options::overwrite_existing);
  expect_error(args(ckpt, {"--resume"}), "is not the model file train_state.safetensors was saved with");

  // --resume with nothing to resume from names what the directory holds;
  // --resume=auto starts from scratch there.
  fs::create_directories(junk);
  std::ofstream(junk / "notes.txt") << "not a checkpoint\n";
  expect_error(args(junk, {"--resume"}), "--resume: no checkpoint to resume from in '" + junk.string() +
                                             "' (1 entry: notes.txt); use --resume=auto");
  r = Run(args(junk, {"--resume=auto", "--stop_after=2"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--resume=auto: no checkpoint in '" + junk.string() + "' yet, starting from scratch"));
  r = Run(args(junk, {"--resume=auto"}));
  EXPECT_THAT(r.out, HasSubstr("resumed from " + junk.string() + " at step 2"));
  // --overwrite starts over, removing the old steps first.
  r = Run(args(ckpt, {"--overwrite", "--stop_after=3"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--overwrite: removed 1 step directory from '" + ckpt.string() + "' (step_00000005)"));
  EXPECT_FALSE(fs::exists(ckpt / "step_00000005"));
  EXPECT_TRUE(fs::exists(ckpt / "step_00000003"));
}

}  // namespace
