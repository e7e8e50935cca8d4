// train_gpt's data and validation loss (examples/gpt/training_data.h).
#include "examples/gpt/training_data.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "examples/gpt/run_state.h"
#include <octet/autograd/grad_mode.h>

namespace octet::gpt {

absl::StatusOr<TrainingData> LoadTrainingData(const std::string& data, const std::string& val_data, int64_t vocab_size) {
  const std::vector<std::string> paths = absl::StrSplit(data, ',', absl::SkipEmpty());
  if (paths.empty()) return absl::InvalidArgumentError("--data is empty");
  bool shards = true;
  for (const std::string& p : paths) shards &= absl::EndsWith(p, ".bin");
  TrainingData d;
  d.text = !shards;
  const int64_t vocab_flag = vocab_size;
  if (vocab_flag < 0) return absl::InvalidArgumentError(absl::StrCat("--vocab_size must be >= 0, got ", vocab_flag));
  if (shards) {
    d.vocab_size = vocab_flag > 0 ? vocab_flag : kGpt2VocabSize;
    auto expand = [](const std::string& list) -> absl::StatusOr<std::vector<std::string>> {
      std::vector<std::string> files;
      const std::vector<std::string> parts = absl::StrSplit(list, ',', absl::SkipEmpty());
      for (const std::string& p : parts) {
        absl::StatusOr<std::vector<std::string>> e = ExpandShardPattern(p);
        if (!e.ok()) return e.status();
        files.insert(files.end(), e->begin(), e->end());
      }
      return files;
    };
    absl::StatusOr<std::vector<std::string>> train_files = expand(data);
    if (!train_files.ok()) return train_files.status();
    absl::StatusOr<TokenDataset> train = TokenDataset::FromShardFiles(*train_files, d.vocab_size);
    if (!train.ok()) return train.status();
    d.train = std::make_shared<TokenDataset>(*std::move(train));
    if (!val_data.empty()) {
      absl::StatusOr<std::vector<std::string>> val_files = expand(val_data);
      if (!val_files.ok()) return val_files.status();
      absl::StatusOr<TokenDataset> val = TokenDataset::FromShardFiles(*val_files, d.vocab_size);
      if (!val.ok()) return val.status();
      d.val = std::make_shared<TokenDataset>(*std::move(val));
    }
    d.description = absl::StrCat(train_files->size(), " token shard(s)");
    d.fingerprint = DatasetFingerprint(*d.train, d.val.get(), /*in_memory=*/false);
    return d;
  }
  d.vocab_size = vocab_flag > 0 ? vocab_flag : ByteTokenizer::kVocabSize;
  absl::StatusOr<TextCorpus> corpus = LoadTextCorpus(paths);
  if (!corpus.ok()) return corpus.status();
  absl::StatusOr<TokenDataset> train = TokenDataset::FromTokens(corpus->train_tokens, d.vocab_size, "train");
  if (!train.ok()) return train.status();
  d.train = std::make_shared<TokenDataset>(*std::move(train));
  if (!corpus->val_tokens.empty()) {
    absl::StatusOr<TokenDataset> val = TokenDataset::FromTokens(corpus->val_tokens, d.vocab_size, "val");
    if (!val.ok()) return val.status();
    d.val = std::make_shared<TokenDataset>(*std::move(val));
  }
  d.description = absl::StrFormat("%d files, %d documents (%d train, %d val), %d train / %d val tokens",
                                  corpus->files.size(), corpus->num_documents, corpus->num_train_documents,
                                  corpus->num_val_documents, corpus->train_tokens.size(), corpus->val_tokens.size());
  d.fingerprint = DatasetFingerprint(*d.train, d.val.get(), /*in_memory=*/true);
  return d;
}

absl::StatusOr<double> EvaluateLoss(nn::GPT& model, const std::shared_ptr<const TokenDataset>& val, int64_t batch,
                                int64_t seq_len, int64_t batches, Device device) {
  absl::StatusOr<BatchSampler> sampler =
      BatchSampler::Create(val, {.batch_size = batch, .seq_len = seq_len, .shuffle = false});
  if (!sampler.ok()) return sampler.status();
  const int64_t n = std::max<int64_t>(1, std::min(batches, sampler->batches_per_epoch()));
  NoGradGuard no_grad;
  model.Eval();
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<Batch> b = sampler->Next();
    if (!b.ok()) {
      model.Train();
      return b.status();
    }
    total += model.Loss(b->inputs.To(device), b->targets.To(device)).Item();
  }
  model.Train();
  return total / static_cast<double>(n);
}

}  // namespace octet::gpt
