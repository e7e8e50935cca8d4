// Training checkpoints: everything a run needs to continue bit-identically.
//
// NOTE [checkpoint layout]: SaveTrainingState(dir, state) writes
//
//   dir/step_00000100/model.safetensors        the model tensors, by name
//   dir/step_00000100/train_state.safetensors  "optimizer/<name>" optimizer state
//                                               "extra/<name>"     extra tensors
//   dir/LATEST                                 "step_00000100\n"
//
// train_state.safetensors' __metadata__ holds "octet.format" =
// "octet-training-state", "octet.version" = "1", "step", "rng.seed",
// "rng.offset", "optimizer.<key>" for each optimizer scalar and
// "meta.<key>" for each caller metadata entry; model.safetensors' metadata
// holds "octet.step". FP8 tensors keep their scales (NOTE [safetensors fp8
// scales] in nn/safetensors.h).
//
// Atomicity: both files are written (each fsync'ed) into a temporary
// directory "dir/.tmp.step_00000100.<pid>", which is renamed to
// "dir/step_00000100" (atomically swapped with an existing one of that name,
// then the old one is removed); LATEST is replaced atomically last. A crash at
// any point leaves LATEST naming a complete checkpoint (the previous one until
// the new one is in place).
//
// What a bit-identical resume needs, and where it is: model weights
// (model.safetensors); optimizer step, lr, moments, master weights and state
// scales (optimizer/*, optimizer.* scalars); FP8 amax histories and scales of
// the amp recipe, loss-scaler state (extra/* tensors and meta.* scalars);
// the RNG (seed, offset) of octet's default generator (rng.*); the data
// sampler's position and anything else the program derives state from
// (meta.*: e.g. "data.epoch", "data.shard", "data.offset").
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/safetensors.h"
#include "optim/optimizer.h"

namespace octet::nn {


struct TrainingState {
  int64_t step = 0;
  optim::NamedTensors model;
  optim::OptimizerState optimizer;
  optim::NamedTensors extra;  // amax histories, ...
  uint64_t rng_seed = 0;
  uint64_t rng_offset = 0;
  std::map<std::string, std::string> metadata;  // data position, config, ...
};

// "step_00000100" (8 digits, more when the step needs them).
std::string StepDirName(int64_t step);

// Writes the checkpoint of state.step (see NOTE [checkpoint layout]); creates
// dir when missing. Errors name the path: step < 0, tensors that safetensors
// refuses (nn/safetensors.h), any I/O failure (the temporary directory is
// removed, LATEST and existing checkpoints are untouched).
absl::Status SaveTrainingState(const std::string& dir, const TrainingState& state);
absl::Status SaveTrainingState(const std::string& dir, int64_t step, const optim::NamedTensors& model,
                               const optim::OptimizerState& optimizer, const optim::NamedTensors& extra,
                               uint64_t rng_seed, uint64_t rng_offset,
                               const std::map<std::string, std::string>& metadata);

// Loads the checkpoint named by dir/LATEST, or dir itself when it is a step
// directory (holds model.safetensors). Errors: no LATEST and not a step
// directory, a LATEST that does not name a step directory, a missing or
// corrupt file (the safetensors error), a file that is not an octet training
// state, or model and train state of different steps.
absl::StatusOr<TrainingState> LoadTrainingState(const std::string& dir);
// Loads dir/StepDirName(step).
absl::StatusOr<TrainingState> LoadTrainingState(const std::string& dir, int64_t step);

}  // namespace octet::nn
