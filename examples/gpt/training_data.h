// What train_gpt trains and validates on: its --data / --val_data read into
// token datasets (a text corpus split into train and validation documents,
// or llm.c token shards), and the validation loss it reports.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "examples/gpt/data.h"
#include <octet/core/device.h>
#include <octet/nn/gpt.h>

namespace octet::gpt {

struct TrainingData {
  std::shared_ptr<const TokenDataset> train;
  std::shared_ptr<const TokenDataset> val;  // may be null
  int64_t vocab_size = 0;
  bool text = true;
  std::string description;
  std::string fingerprint;  // examples/gpt/run_state.h DatasetFingerprint
};

// data: comma-separated text files / directories (byte tokens, NOTE [text
// corpus] in data.h) or llm.c .bin shards and glob patterns, all of one
// kind; val_data: validation shards (shards only: a text corpus splits
// itself); vocab_size: 0 for the default of the kind (256 bytes, GPT-2's
// 50257). Every error names the file or the value.
absl::StatusOr<TrainingData> LoadTrainingData(const std::string& data, const std::string& val_data, int64_t vocab_size);

// Mean loss of model over the first `batches` batches of val (always the
// same ones), without gradients; the model is left in training mode.
absl::StatusOr<double> EvaluateLoss(nn::GPT& model, const std::shared_ptr<const TokenDataset>& val, int64_t batch,
                                    int64_t seq_len, int64_t batches, Device device);

}  // namespace octet::gpt
