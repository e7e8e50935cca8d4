// The fixture of the train_gpt end-to-end tests (train_test.cc,
// train_ckpt_test.cc): a corpus with known structure, the small model's
// flags, the programs run as children, metrics files read back.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/examples/programs.h"
#include "tests/test_util.h"

namespace octet::testing::train_gpt {

namespace fs = std::filesystem;

using RunResult = CommandResult;

class TrainGpt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("octet_train_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    WriteCorpus(*dir_ / "corpus.txt");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  void SetUp() override {
    if (!fs::exists(kTrainGpt)) GTEST_SKIP() << "train_gpt not built (" << kTrainGpt << ")";
  }

  // A corpus with learnable structure: sentences from a small random grammar,
  // one fortune-style document each ("%" separators).
  static void WriteCorpus(const fs::path& path) {
    const std::vector<std::string> subj = {"the cat", "a dog", "my old friend", "the small bird", "every robot"};
    const std::vector<std::string> verb = {"sees", "likes", "follows", "remembers", "draws"};
    const std::vector<std::string> obj = {"the moon", "a red ball", "seven apples", "the quiet river", "her book"};
    const std::vector<std::string> end = {".", "!", " today.", " at night."};
    std::mt19937 gen(7);
    std::ofstream out(path);
    for (int doc = 0; doc < 2500; ++doc) {
      const int sentences = 1 + gen() % 3;
      for (int s = 0; s < sentences; ++s)
        out << subj[gen() % subj.size()] << ' ' << verb[gen() % verb.size()] << ' ' << obj[gen() % obj.size()]
            << end[gen() % end.size()] << '\n';
      out << "%\n";
    }
  }

  // Unigram entropy of the corpus bytes, in nats.
  static double UnigramEntropy() {
    const std::string text = ReadFile(*dir_ / "corpus.txt");
    std::map<unsigned char, double> counts;
    for (unsigned char c : text) counts[c] += 1;
    double h = 0;
    for (auto& [c, n] : counts) {
      const double p = n / text.size();
      h -= p * std::log(p);
    }
    return h;
  }

  // env: extra VAR=value words for the child's environment.
  static RunResult Run(const std::vector<std::string>& args, const std::string& env = "") {
    return RunProgram(kTrainGpt, args, env);
  }
  static RunResult RunProgram(const char* program, const std::vector<std::string>& args, const std::string& env) {
    std::string cmd = "OMP_NUM_THREADS=2 " + env + (env.empty() ? "" : " ") + ShellQuote(program);
    for (const std::string& a : args) cmd += " " + ShellQuote(a);
    return RunCommand(cmd);
  }

  // Starts train_gpt with `args` in the background, its output going to
  // `out`; once it has printed step 3 (at most 60 s later) runs the shell
  // commands `then`, which see its pid as $p.
  static RunResult RunUntilStep3Then(const std::vector<std::string>& args, const fs::path& out,
                                     const std::string& then) {
    std::string cmd = "OMP_NUM_THREADS=2 " + ShellQuote(kTrainGpt);
    for (const std::string& a : args) cmd += " " + ShellQuote(a);
    return RunUntilOutputThen(cmd, out.string(), "step     3/", then);
  }

  // The small model every run here uses (a few ms per step).
  static std::vector<std::string> BaseArgs(const std::string& amp, int steps, const std::string& metrics) {
    return {"--data=" + (*dir_ / "corpus.txt").string(),
            "--amp=" + amp,
            "--steps=" + std::to_string(steps),
            "--n_layer=2",
            "--n_head=2",
            "--n_embd=64",
            "--seq_len=64",
            "--block_size=64",
            "--batch=8",
            "--lr=3e-3",
            "--warmup=20",
            "--eval_every=0",
            "--eval_batches=8",
            "--log_every=50",
            "--sample_tokens=0",
            "--seed=11",
            "--threads=2",
            "--metrics=" + metrics};
  }

  struct Metrics {
    std::vector<std::string> losses;  // per step, as printed (%.9g)
    double final_val = NAN;
  };
  static std::string Field(const std::string& line, const std::string& key) {
    const std::string k = "\"" + key + "\":";
    const size_t at = line.find(k);
    if (at == std::string::npos) return "";
    const size_t begin = at + k.size();
    const size_t end = line.find_first_of(",}", begin);
    return line.substr(begin, end - begin);
  }
  static Metrics ReadMetrics(const fs::path& path) {
    Metrics m;
    std::istringstream in(ReadFile(path));
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("\"final\"") != std::string::npos) {
        m.final_val = std::stod(Field(line, "val_loss"));
      } else if (!line.empty()) {
        m.losses.push_back(Field(line, "loss"));
        const std::string v = Field(line, "val_loss");
        if (v != "null" && !v.empty()) m.final_val = std::stod(v);
      }
    }
    return m;
  }

  inline static fs::path* dir_ = nullptr;
};


}  // namespace octet::testing::train_gpt
