// End-to-end tests of examples/gpt/train_gpt: a small GPT trained on a corpus
// this test writes (a random-grammar text with known structure) at O0, O1 and
// O2; bad input; sample_gpt. Its checkpoints (resume, keep, lock, stopping on
// a signal) are train_ckpt_test.cc's.
//
// The binary comes from the build (OCTET_TRAIN_GPT, set by
// examples/gpt/CMakeLists.txt); without it (examples not built) the tests skip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <octet/ops/cpu_gemm_path_testing.h>

#include "examples/gpt/data.h"
#include "tests/examples/programs.h"
#include "tests/examples/train_gpt_fixture.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

using ::octet::testing::kSampleGpt;
using ::octet::testing::kTrainGpt;
using ::octet::testing::ReadFile;
using ::octet::testing::RunCommand;
using ::octet::testing::ShellQuote;

using ::octet::testing::train_gpt::RunResult;
using ::octet::testing::train_gpt::TrainGpt;

TEST_F(TrainGpt, LossFallsBelowUnigramEntropyAtEveryLevelAndLevelsAgree) {
  const double unigram = UnigramEntropy();
  std::map<std::string, double> val;
  for (const std::string amp : {"O0", "O1", "O2"}) {
    const fs::path metrics = *dir_ / ("levels_" + amp + ".jsonl");
    const RunResult r = Run(BaseArgs(amp, 300, metrics.string()));
    ASSERT_EQ(r.exit_code, 0) << amp << "\n" << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("val loss"));
    const Metrics m = ReadMetrics(metrics);
    ASSERT_EQ(m.losses.size(), 300u) << amp;
    val[amp] = m.final_val;
    std::printf("%s: final val loss %.4f (unigram entropy %.4f nats)\n", amp.c_str(), m.final_val, unigram);
    EXPECT_LT(m.final_val, 0.6 * unigram) << amp;
  }
  // The levels agree when they learn the same: within 3 % of O0's drop from
  // the unigram entropy. (Relative to the tiny final loss itself, 0.30 nats
  // on this memorisable corpus, the machine's rounding decides: the same
  // binary gave O1 0.3064 here with 2 or 8 threads, but 0.3301 on the H100
  // machine's host CPU, where oneDNN picks other kernels.)
  const double drop = unigram - val["O0"];
  EXPECT_LT(std::abs(val["O1"] - val["O0"]), 0.03 * drop) << "O1 " << val["O1"] << " vs O0 " << val["O0"];
  EXPECT_LT(std::abs(val["O2"] - val["O0"]), 0.03 * drop) << "O2 " << val["O2"] << " vs O0 " << val["O0"];
}

// A run's first step pays for set-up and is not timed: a one-step run, or a
// resumed one that runs a single step, has no step time to report, and says
// so (null in the metrics' final line, not 0 or a set-up time).
TEST_F(TrainGpt, RunsWithoutATimedStepSaySoAndWriteNull) {
  const fs::path one = *dir_ / "one_step.jsonl";
  const RunResult r = Run(BaseArgs("O0", 1, one.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("no timed step"));
  std::string final_line;
  {
    std::istringstream in(ReadFile(one));
    for (std::string line; std::getline(in, line);)
      if (line.find("\"final\"") != std::string::npos) final_line = line;
  }
  EXPECT_EQ(Field(final_line, "ms_per_step"), "null") << final_line;
  EXPECT_EQ(Field(final_line, "tokens_per_s"), "null") << final_line;
  EXPECT_NE(Field(final_line, "val_loss"), "null") << final_line;  // the last step evaluates

  // Resumed at step 3 of 4: this process runs one step, untimed.
  const fs::path ckpt = *dir_ / "ckpt_timing";
  std::vector<std::string> a = BaseArgs("O0", 4, (*dir_ / "timing_a.jsonl").string());
  a.push_back("--ckpt_dir=" + ckpt.string());
  a.push_back("--stop_after=3");
  ASSERT_EQ(Run(a).exit_code, 0);
  std::vector<std::string> b = BaseArgs("O0", 4, (*dir_ / "timing_b.jsonl").string());
  b.push_back("--ckpt_dir=" + ckpt.string());
  b.push_back("--resume");
  const RunResult resumed = Run(b);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("no timed step"));

  // Two steps: the second is timed.
  const RunResult two = Run(BaseArgs("O0", 2, (*dir_ / "two_steps.jsonl").string()));
  ASSERT_EQ(two.exit_code, 0);
  EXPECT_THAT(two.out, Not(HasSubstr("no timed step")));
  EXPECT_THAT(two.out, HasSubstr(" ms/step | "));
}

// O1 and O2 on the CPU name the GEMM path they compute with (an override
// shows as the reason); O0 has no BF16/FP8 GEMMs and prints no such line.
// The BF16 path forced where oneDNN has no bf16 matmul (CPUs without
// AVX-512) stops the run at its first GEMM, saying why.
TEST_F(TrainGpt, AmpRunsOnTheCpuNameTheirGemmPath) {
  const RunResult fp32 = Run(BaseArgs("O2", 1, (*dir_ / "path_fp32.jsonl").string()), "OCTET_CPU_GEMM=fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_THAT(fp32.out, HasSubstr("cpu gemm: bf16/fp8 operands on FP32 FMAs, widened exactly (OCTET_CPU_GEMM=fp32;"));
  const RunResult bf16 = Run(BaseArgs("O1", 1, (*dir_ / "path_bf16.jsonl").string()), "OCTET_CPU_GEMM=bf16");
  if (!octet::internal::CpuRunsBf16Gemm()) {  // this process runs on the same CPU, under the same environment
    EXPECT_EQ(bf16.exit_code, 1);
    EXPECT_THAT(bf16.err, HasSubstr("this CPU's oneDNN has no bf16 matmul (it needs AVX-512)")) << bf16.err;
  } else {
    EXPECT_EQ(bf16.exit_code, 0) << bf16.err;
    // "BF16 (AMX tiles)" where oneDNN uses AMX, else "BF16 (dot products)".
    EXPECT_THAT(bf16.out,
                AnyOf(HasSubstr("cpu gemm: bf16/fp8 operands on BF16 (AMX tiles) (OCTET_CPU_GEMM=bf16;"),
                      HasSubstr("cpu gemm: bf16/fp8 operands on BF16 (dot products) (OCTET_CPU_GEMM=bf16;")));
  }
  const RunResult o0 = Run(BaseArgs("O0", 1, (*dir_ / "path_o0.jsonl").string()), "OCTET_CPU_GEMM=fp32");
  ASSERT_EQ(o0.exit_code, 0) << o0.err;
  EXPECT_THAT(o0.out, Not(HasSubstr("cpu gemm:")));
  const RunResult bad = Run(BaseArgs("O2", 1, (*dir_ / "path_bad.jsonl").string()), "OCTET_CPU_GEMM=fast");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("OCTET_CPU_GEMM='fast' is not understood"));
}

// They also say how bf16 GELU is evaluated (NOTE [bf16 gelu tables]): an
// override shows as the reason, a bad value stops the run naming it, and a
// measured choice gives both times.
TEST_F(TrainGpt, AmpRunsOnTheCpuNameTheirGeluPath) {
  const RunResult table = Run(BaseArgs("O1", 1, (*dir_ / "gelu_table.jsonl").string()), "OCTET_CPU_GELU=table");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("cpu gelu: bf16 forward by table lookup (OCTET_CPU_GELU=table), "
                                   "backward by table lookup (OCTET_CPU_GELU=table)"));
  const RunResult computed = Run(BaseArgs("O2", 1, (*dir_ / "gelu_compute.jsonl").string()), "OCTET_CPU_GELU=compute");
  ASSERT_EQ(computed.exit_code, 0) << computed.err;
  EXPECT_THAT(computed.out, HasSubstr("cpu gelu: bf16 forward computed (OCTET_CPU_GELU=compute), "
                                      "backward computed (OCTET_CPU_GELU=compute)"));
  const RunResult measured = Run(BaseArgs("O2", 1, (*dir_ / "gelu_auto.jsonl").string()), "OCTET_CPU_GELU=auto");
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  EXPECT_THAT(measured.out, HasSubstr("cpu gelu: bf16 forward "));
  EXPECT_THAT(measured.out, HasSubstr("(measured: table "));
  const RunResult bad = Run(BaseArgs("O1", 1, (*dir_ / "gelu_bad.jsonl").string()), "OCTET_CPU_GELU=fast");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("OCTET_CPU_GELU='fast' is not understood"));
}

// NOTE [environment switches] (octet/core/env.h): the switches read once
// a process (the CPU cache, oneDNN's sgemm for f32 GEMMs, octet's AMX GEMM)
// stop the run with a value they do not take, naming the variable and the
// value, through the example's own error exit ("off" used to leave the
// cache on; read while the allocator was built, in static initialisation,
// a bad value could only terminate the program). NOTE [every switch checked
// at every read]: every switch does so at O0 too, where no BF16 GEMM, bf16
// GELU or AMX GEMM runs, and on the CPU the CUDA one.
TEST_F(TrainGpt, ABadSwitchStopsTheRunNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"OCTET_CPU_CACHING=off", "OCTET_CPU_CACHING='off' is not understood: use 1 ("},
      {"OCTET_CPU_F32_GEMM=fast", "OCTET_CPU_F32_GEMM='fast' is not understood: use matmul ("},
      {"OCTET_CPU_AMX_GEMM=yes", "OCTET_CPU_AMX_GEMM='yes' is not understood: use 1 ("},
      {"OCTET_CPU_GEMM=fast", "OCTET_CPU_GEMM='fast' is not understood: use auto ("},
      {"OCTET_CPU_GELU=fast", "OCTET_CPU_GELU='fast' is not understood: use auto ("},
      {"OCTET_DISABLE_AVX512=yes", "OCTET_DISABLE_AVX512='yes' is not understood: use 0 ("},
      {"OCTET_DISABLE_AVX512_BF16=yes", "OCTET_DISABLE_AVX512_BF16='yes' is not understood: use 0 ("},
      {"OCTET_CUDA_SYNC_CHECK=yes", "OCTET_CUDA_SYNC_CHECK='yes' is not understood: use 0 ("}};
  int i = 0;
  for (const auto& [env, message] : cases) {
    for (const char* amp : {"O0", "O2"}) {
      const std::string metrics = (*dir_ / ("switch_" + std::to_string(i++) + ".jsonl")).string();
      const RunResult bad = Run(BaseArgs(amp, 1, metrics), env);
      EXPECT_EQ(bad.exit_code, 1) << env << " " << amp << ": " << bad.err;  // the example's error exit
      EXPECT_THAT(bad.err, HasSubstr(std::string("train_gpt: error: ") + message)) << env << " " << amp;
    }
  }
}

TEST_F(TrainGpt, BadInputGivesAClearMessageAndNonZeroExit) {
  const std::string corpus = "--data=" + (*dir_ / "corpus.txt").string();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::ofstream(*dir_ / "empty.txt").close();
  const std::vector<Case> cases = {
      {{"--data=/nonexistent/fortunes.txt"}, "/nonexistent/fortunes.txt"},
      {{"--data=" + (*dir_ / "empty.txt").string()}, "empty"},
      {{corpus, "--seq_len=256", "--block_size=128"}, "--seq_len (256) is larger than the model's --block_size (128)"},
      {{corpus, "--vocab_size=100"}, ">= the vocab size 100"},
      {{corpus, "--amp=O3"}, "unknown --amp level 'O3'"},
      {{corpus, "--recipe=sometimes"}, "unknown --recipe 'sometimes'"},
      {{corpus, "--resume"}, "--resume needs --ckpt_dir"},
      {{corpus, "--device=tpu"}, "unknown device 'tpu' (expected cpu, cuda or cuda:N)"},
      {{corpus, "--device=cuda:99"}, "--device: cuda:99 "},  // not available / does not exist
      {{corpus, "--cuda_graph"}, "--cuda_graph needs --device=cuda, got cpu"},
      // Numeric flags out of range (CheckRanges): each named, before any step.
      {{corpus, "--threads=-1"}, "--threads must be in [0, 1024] (0: OMP_NUM_THREADS / all cores), got -1"},
      {{corpus, "--threads=100000"}, "--threads must be in [0, 1024]"},  // libgomp crashed on it
      {{corpus, "--log_every=0"}, "--log_every must be >= 1, got 0"},
      {{corpus, "--eval_every=-5"}, "--eval_every must be >= 0 (0: only at the end), got -5"},
      {{corpus, "--eval_batches=0"}, "--eval_batches must be >= 1, got 0"},
      {{corpus, "--ckpt_every=-1"}, "--ckpt_every must be >= 0"},
      {{corpus, "--ckpt_keep=-2"}, "--ckpt_keep must be >= 0 (0: all), got -2"},
      {{corpus, "--stop_after=0"}, "--stop_after must be -1 (run every step) or >= 1, got 0"},
      {{corpus, "--stop_after=2"}, "--stop_after 2 is not a step this run takes (steps 1 to 1)"},
      {{corpus, "--margin=-1"}, "--margin must be >= 0, got -1"},
      {{corpus, "--grad_clip=-1"}, "--grad_clip must be >= 0 (0: off), got -1"},
      {{corpus, "--grad_clip=nan"}, "--grad_clip must be >= 0 (0: off), got nan"},
      {{corpus, "--sample_tokens=-1"}, "--sample_tokens must be >= 0 (0: none), got -1"},
      {{corpus, "--temperature=0"}, "--temperature must be > 0, got 0"},
      {{corpus, "--top_k=-1"}, "--top_k must be >= 0 (0: all), got -1"},
      // The distributed flags, checked in a single process too.
      {{corpus, "--grad_sync=fp16"}, "unknown --grad_sync 'fp16' (expected fp32, bf16, fp8 or fp8_e5m2)"},
      {{corpus, "--zero_gather=int8"}, "unknown --zero_gather 'int8' (expected fp32, bf16 or fp8)"},
      {{corpus, "--bucket_kb=0"}, "--bucket_kb must be >= 1, got 0"},
      {{corpus, "--amax_history=0"}, "--amax_history must be >= 1, got 0"},
      {{corpus, "--state_dtype=fp16"}, "unknown --state_dtype 'fp16' (expected fp32, bf16 or fp8)"},
      {{corpus, "--batch=0"}, "--batch, --seq_len and --grad_accum must be >= 1, got 0, "},
      {{corpus, "--resume=maybe"}, "unknown --resume 'maybe' (expected true, false or auto)"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back("--steps=1");
    const RunResult r = Run(args);
    EXPECT_NE(r.exit_code, 0) << c.message;
    EXPECT_THAT(r.err, HasSubstr("train_gpt: error: ")) << c.message;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.out, Not(HasSubstr("step "))) << c.message << ": it trained first";
  }
  // Where a save or the metrics could not write: said before the first step,
  // not after the steps a checkpoint was to keep.
  const std::string ro = ::octet::testing::UnwritableDir(dir_->string());
  if (ro.empty()) GTEST_SKIP() << "no directory here refuses this process's writes";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{corpus, "--ckpt_dir=" + ro}, {corpus, "--ckpt_dir=" + ro + "/ckpt"},
        {corpus, "--metrics=" + ro + "/m.jsonl"}}) {
    std::vector<std::string> a = args;
    a.push_back("--steps=1");
    const RunResult r = Run(a);
    EXPECT_EQ(r.exit_code, 1) << args[1] << ": " << r.err;
    const std::string path = args[1].substr(args[1].find('=') + 1);
    EXPECT_THAT(r.err, HasSubstr(args[1][2] == 'c' ? "train_gpt: error: checkpoint '" + path + "': "
                                                   : "train_gpt: error: cannot open --metrics file '" + path + "': "))
        << args[1];
    EXPECT_THAT(r.out, Not(HasSubstr("step "))) << args[1] << ": it trained first";
  }
}

// What the README's main job does at its end (a sample of generated text)
// and the options no other run here takes: a CSV metrics file, the FP8/FP16
// AdamW state and the most-recent amax algorithm at O1; then sample_gpt
// from that O1 checkpoint with its FP8 scaling state.
TEST_F(TrainGpt, EndOfRunSampleCsvMetricsAndO1Options) {
  const fs::path csv = *dir_ / "o1.csv", ckpt = *dir_ / "o1_ckpt";
  std::vector<std::string> args = BaseArgs("O1", 3, csv.string());
  for (const char* a : {"--sample_tokens=16", "--prompt=the cat", "--state_dtype=fp8", "--amax_algo=most_recent"})
    args.push_back(a);
  args.push_back("--ckpt_dir=" + ckpt.string());
  const RunResult r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("amp O1 (delayed scaling, history 16, amax most_recent, margin 0); AdamW state fp8_fp16;"));
  EXPECT_THAT(r.out, HasSubstr("---- sample ----\nthe cat"));
  EXPECT_THAT(r.out, HasSubstr("\n----------------\n"));
  const std::string text = ReadFile(csv.string());
  EXPECT_EQ(text.rfind("step,loss,lr,grad_norm,ms_per_step,tokens_per_s,gflops,worst_saturation,val_loss\n", 0), 0u)
      << text;
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);  // the header
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(std::getline(lines, line)) << text;
    EXPECT_EQ(line.rfind(std::to_string(step) + ",", 0), 0u) << line;
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 8) << line;
  }
  if (!fs::exists(kSampleGpt)) return;
  const RunResult s = RunProgram(kSampleGpt, {"--ckpt=" + ckpt.string(), "--amp=O1", "--tokens=8", "--prompt=a "}, "");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("---- sample 1 ----\na "));
}

// A learning rate that blows the weights up: the run stops at the first
// non-finite loss, naming it and the step, with a non-zero exit and no
// checkpoint of the broken weights.
TEST_F(TrainGpt, DivergenceStopsTheRunNamingTheStep) {
  const fs::path ckpt = *dir_ / "diverged_ckpt";
  std::vector<std::string> args = BaseArgs("O0", 6, (*dir_ / "diverged.jsonl").string());
  args.insert(args.end(), {"--lr=1e30", "--warmup=0", "--ckpt_every=1", "--ckpt_dir=" + ckpt.string()});
  const RunResult r = Run(args);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("train_gpt: error: training diverged: loss nan at step 2"));
  // Step 1's checkpoint (finite weights) is the newest one left.
  EXPECT_TRUE(fs::exists(ckpt / "step_00000001")) << r.out;
  EXPECT_FALSE(fs::exists(ckpt / "step_00000002")) << r.out;
}

// sample_gpt (examples/gpt/sample_gpt.cc) on a checkpoint train_gpt wrote:
// the prompt and its continuation, the same text for the same seed, one
// block per sample; and each bad input stops it with a message naming it.
TEST_F(TrainGpt, SampleGptGeneratesFromACheckpointAndNamesBadInput) {
  if (!fs::exists(kSampleGpt)) GTEST_SKIP() << "sample_gpt not built (" << kSampleGpt << ")";
  const fs::path ckpt = *dir_ / "sample_ckpt";
  std::vector<std::string> train = BaseArgs("O0", 3, (*dir_ / "sample.jsonl").string());
  train.push_back("--ckpt_dir=" + ckpt.string());
  ASSERT_EQ(Run(train).exit_code, 0);
  auto sample = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), "--ckpt=" + ckpt.string());
    return RunProgram(kSampleGpt, extra, "");
  };
  const RunResult a = sample({"--tokens=24", "--seed=3", "--prompt=Q: ", "--samples=2"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_THAT(a.out, HasSubstr("checkpoint step 3, "));
  EXPECT_THAT(a.out, HasSubstr("---- sample 1 ----\nQ: "));
  EXPECT_THAT(a.out, HasSubstr("---- sample 2 ----\nQ: "));
  EXPECT_EQ(sample({"--tokens=24", "--seed=3", "--prompt=Q: ", "--samples=2"}).out, a.out);

  const fs::path truncated = *dir_ / "sample_truncated";
  fs::copy(ckpt, truncated, fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(truncated))
    if (e.path().filename() == "model.safetensors") fs::resize_file(e.path(), 100);
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--temperature=0"}, "--temperature must be > 0, got 0"},
      {{"--top_k=-1"}, "--top_k must be >= 0 (0: all), got -1"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"--tokens=-1"}, "--tokens must be >= 0, got -1"},
      {{"--samples=0"}, "--samples must be >= 1, got 0"},
      {{"--amp=O7"}, "unknown --amp level 'O7'"},
      {{"--ckpt=" + (*dir_ / "no_such_ckpt").string()}, "no complete step directory"},
      {{"--ckpt=" + truncated.string()}, "model.safetensors': invalid header length"},
  };
  for (const auto& [args, message] : cases) {
    const RunResult r = sample(args);
    EXPECT_EQ(r.exit_code, 1) << message << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("sample_gpt: error: " + std::string(args[0].starts_with("--ckpt") ? "" : message)))
        << message;
    EXPECT_THAT(r.err, HasSubstr(message));
  }
  const RunResult none = RunProgram(kSampleGpt, {}, "");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("sample_gpt: error: --ckpt_dir is required (train_gpt's --ckpt_dir)"));
  // train_gpt's flag name works as well as --ckpt; two different ones are an error.
  const RunResult by_dir = RunProgram(
      kSampleGpt, {"--ckpt_dir=" + ckpt.string(), "--tokens=24", "--seed=3", "--prompt=Q: ", "--samples=2"}, "");
  EXPECT_EQ(by_dir.exit_code, 0) << by_dir.err;
  EXPECT_EQ(by_dir.out, a.out);
  const RunResult both = sample({"--ckpt_dir=" + truncated.string()});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_THAT(both.err, HasSubstr("sample_gpt: error: --ckpt_dir '" + truncated.string() + "' and --ckpt '" +
                                  ckpt.string() + "' name different checkpoints; give one"));
}

TEST_F(TrainGpt, TrainsOnLlmcTokenShardsAndRejectsOutOfRangeTokens) {
  // Byte tokens of the corpus as llm.c shards (vocab 256).
  const std::string text = ReadFile(*dir_ / "corpus.txt");
  std::vector<uint16_t> tokens(text.begin(), text.end());
  const size_t cut = tokens.size() * 9 / 10;
  const fs::path train = *dir_ / "train_000.bin", val = *dir_ / "val_000.bin", bad = *dir_ / "bad_000.bin";
  ASSERT_TRUE(octet::gpt::WriteTokenShard(train.string(), {tokens.begin(), tokens.begin() + cut}).ok());
  ASSERT_TRUE(octet::gpt::WriteTokenShard(val.string(), {tokens.begin() + cut, tokens.end()}).ok());
  std::vector<std::string> args = BaseArgs("O1", 20, (*dir_ / "shards.jsonl").string());
  args[0] = "--data=" + (*dir_ / "train_*.bin").string();
  args.push_back("--val_data=" + val.string());
  args.push_back("--vocab_size=256");
  const RunResult ok = Run(args);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("1 token shard(s)"));
  EXPECT_THAT(ok.out, HasSubstr("val loss"));
  // A model whose vocabulary is not bytes (320 ids): sample_gpt prints its
  // samples as token ids, and refuses a text prompt rather than ignoring it.
  if (fs::exists(kSampleGpt)) {
    const fs::path ckpt = *dir_ / "shards_ckpt";
    std::vector<std::string> ids_args = args;
    ids_args.back() = "--vocab_size=320";
    ids_args.push_back("--steps=2");
    ids_args.push_back("--sample_tokens=5");
    ids_args.push_back("--ckpt_dir=" + ckpt.string());
    const RunResult trained = Run(ids_args);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    EXPECT_THAT(trained.out, HasSubstr("no end-of-run sample: the model's tokens are not bytes (token shards, vocab "
                                       "320); sample_gpt prints token ids from its checkpoint"));
    const RunResult s = RunProgram(kSampleGpt, {"--ckpt=" + ckpt.string(), "--tokens=6"}, "");
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const size_t at = s.out.find("---- sample 1 ----\n");
    ASSERT_NE(at, std::string::npos) << s.out;
    std::istringstream ids(s.out.substr(at + 19));
    int64_t id = -1, count = 0;
    while (ids >> id) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 320);
      ++count;
    }
    EXPECT_EQ(count, 7) << s.out;  // token 0, then the 6 generated
    const RunResult p = RunProgram(kSampleGpt, {"--ckpt=" + ckpt.string(), "--prompt=hello"}, "");
    EXPECT_EQ(p.exit_code, 1);
    EXPECT_THAT(p.err, HasSubstr("--prompt is text for a byte-level model (vocab 256); this checkpoint's model has "
                                 "vocab 320"));
  }
  // A shard holding id 300 with a 256-token model: a clear error, not a crash.
  std::vector<uint16_t> with_bad(tokens.begin(), tokens.begin() + 5000);
  with_bad[4321] = 300;
  ASSERT_TRUE(octet::gpt::WriteTokenShard(bad.string(), with_bad).ok());
  args[0] = "--data=" + bad.string();
  const RunResult r = Run(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("token id 300 at index 4321 is >= the vocab size 256"));
}

}  // namespace
