// sample_gpt: loads a checkpoint written by train_gpt and generates text.
//
//   sample_gpt --ckpt_dir /tmp/ckpt --prompt "Q: " --tokens 300 --temperature 0.8 --top_k 40
//
// --ckpt_dir (train_gpt's flag; --ckpt is the same) is a checkpoint directory
// (its newest complete step is loaded) or one step directory. The model
// configuration comes from the checkpoint's metadata.
// Byte-level models (vocab 256) print text; others print token ids.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include <octet/core/random.h>
#include "examples/gpt/data.h"
#include "examples/gpt/model_meta.h"
#include <octet/nn/amp.h>
#include <octet/nn/checkpoint.h>
#include <octet/nn/gpt.h>

ABSL_FLAG(std::string, ckpt_dir, "", "Checkpoint directory, as train_gpt's (or a step_XXXXXXXX directory inside it)");
ABSL_FLAG(std::string, ckpt, "", "The same as --ckpt_dir");
ABSL_FLAG(std::string, prompt, "", "Prompt text, for byte-level models (default: the start of a fortune, \"%\\n\")");
ABSL_FLAG(int64_t, tokens, 300, "Tokens to generate");
ABSL_FLAG(double, temperature, 0.8, "Sampling temperature (> 0)");
ABSL_FLAG(int64_t, top_k, 40, "Keep the k most likely tokens (0: all)");
ABSL_FLAG(int64_t, seed, 1337, "Sampling seed");
ABSL_FLAG(int64_t, samples, 1, "Independent samples (a batch)");
ABSL_FLAG(std::string, amp, "O0", "Compute level for sampling: O0, O1 or O2");

namespace octet::gpt {
namespace {

absl::Status Run() {
  const std::string dir_flag = absl::GetFlag(FLAGS_ckpt_dir), short_flag = absl::GetFlag(FLAGS_ckpt);
  if (!dir_flag.empty() && !short_flag.empty() && dir_flag != short_flag) {
    return absl::InvalidArgumentError(absl::StrCat("--ckpt_dir '", dir_flag, "' and --ckpt '", short_flag,
                                                   "' name different checkpoints; give one"));
  }
  const std::string ckpt = dir_flag.empty() ? short_flag : dir_flag;
  if (ckpt.empty()) return absl::InvalidArgumentError("--ckpt_dir is required (train_gpt's --ckpt_dir)");
  nn::amp::Level level;
  if (!nn::amp::ParseLevel(absl::GetFlag(FLAGS_amp), &level))
    return absl::InvalidArgumentError(absl::StrCat("unknown --amp level '", absl::GetFlag(FLAGS_amp), "'"));
  if (absl::Status s = CheckSamplingFlags(absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_top_k)); !s.ok())
    return s;
  if (absl::GetFlag(FLAGS_tokens) < 0)
    return absl::InvalidArgumentError(absl::StrCat("--tokens must be >= 0, got ", absl::GetFlag(FLAGS_tokens)));
  if (absl::GetFlag(FLAGS_samples) < 1)
    return absl::InvalidArgumentError(absl::StrCat("--samples must be >= 1, got ", absl::GetFlag(FLAGS_samples)));
  const nn::TrainingState st = nn::LoadTrainingState(ckpt);  // throws octet::Error
  absl::StatusOr<nn::GPTConfig> config = ConfigFromMetadata(st.metadata);
  if (!config.ok()) return config.status();
  nn::GPT model(*config);
  model.LoadStateDict(st.model);  // throws octet::Error on a mismatch
  model.SetAmp(level);
  if (level == nn::amp::Level::kO1) {
    // Sampling at O1 uses the scales the training run ended with.
    try {
      nn::amp::LoadScalingState(model, st.extra);
    } catch (const Error& e) {
      std::fprintf(stderr, "sample_gpt: note: %s; FP8 scales start fresh\n", e.what());
    }
  }
  const bool bytes = config->vocab_size == ByteTokenizer::kVocabSize;
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  if (!bytes && !prompt.empty()) {
    // Text has no token ids in another vocabulary: refused, not ignored.
    return absl::InvalidArgumentError(absl::StrCat("--prompt is text for a byte-level model (vocab 256); this "
                                                   "checkpoint's model has vocab ",
                                                   config->vocab_size, " (its samples start from token 0)"));
  }
  const std::vector<int64_t> ids =
      bytes ? ByteTokenizer::PromptIds(prompt, config->block_size) : std::vector<int64_t>{0};
  const int64_t n = absl::GetFlag(FLAGS_samples);
  std::vector<int64_t> batch;
  for (int64_t i = 0; i < n; ++i) batch.insert(batch.end(), ids.begin(), ids.end());
  Generator gen(static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)));
  const Tensor out = model.Generate(FromVector(batch, {n, static_cast<int64_t>(ids.size())}),
                                    absl::GetFlag(FLAGS_tokens), absl::GetFlag(FLAGS_temperature),
                                    absl::GetFlag(FLAGS_top_k), &gen);
  const std::vector<double> all = out.ToDoubles();
  const int64_t len = out.size(1);
  std::printf("checkpoint step %lld, %lld parameters\n", static_cast<long long>(st.step),
              static_cast<long long>(model.NumParameters()));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> tokens(all.begin() + i * len, all.begin() + (i + 1) * len);
    std::printf("---- sample %lld ----\n", static_cast<long long>(i + 1));
    if (bytes) {
      absl::StatusOr<std::string> text = ByteTokenizer::Decode(tokens);
      if (!text.ok()) return text.status();
      std::printf("%s\n", ByteTokenizer::Printable(*text).c_str());
    } else {
      for (int64_t t : tokens) std::printf("%lld ", static_cast<long long>(t));
      std::printf("\n");
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace octet::gpt

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Samples from a GPT checkpoint written by train_gpt. See --helpfull.");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "sample_gpt: error: unexpected argument '%s'\n", rest[1]);
    return 1;
  }
  try {
    const absl::Status s = octet::gpt::Run();
    if (!s.ok()) {
      std::fprintf(stderr, "sample_gpt: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sample_gpt: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
