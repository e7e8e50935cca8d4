// The absl::Status forms of nn/checkpoint.h (private: not installed). The
// public functions throw octet::Error with the message these return; the
// tests use these to check status codes too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <octet/nn/checkpoint.h>

namespace octet::nn::internal {

absl::Status SaveTrainingState(const std::string& dir, const TrainingState& state);
absl::Status SaveTrainingState(const std::string& dir, int64_t step, const optim::NamedTensors& model,
                               const optim::OptimizerState& optimizer, const optim::NamedTensors& extra,
                               uint64_t rng_seed, uint64_t rng_offset,
                               const std::map<std::string, std::string>& metadata);
// Creates dir (and its parents) when missing; the error names dir and why.
absl::Status CreateCheckpointDir(const std::string& dir);
absl::Status CheckCheckpointDirWritable(const std::string& dir);
absl::StatusOr<CheckpointDirInfo> ScanCheckpointDir(const std::string& dir);
absl::StatusOr<std::vector<std::string>> RemoveStaleCheckpointTemporaries(const std::string& dir);
absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& dir, int64_t keep);
absl::StatusOr<TrainingState> LoadTrainingState(const std::string& dir);
absl::StatusOr<TrainingState> LoadTrainingState(const std::string& dir, int64_t step);

// NOTE [checkpoint layout], values that cannot be right: the first value of
// `t` (named `name`) that `holder` (e.g. "a checkpoint") must not hold, as
// "holds <value> at element <i>; <rule>", or "" when there is none. Every
// float must be finite; with scaling_state, a float32 amax history (name
// ending in amax_history) must be >= 0 and a float32 scale (name ending in
// scale) > 0 with a finite reciprocal. Reads t on the host (any device).
// LoadTrainingState and amp::LoadScalingState check with it.
std::string BadValue(const std::string& name, const Tensor& t, bool scaling_state, const std::string& holder);

}  // namespace octet::nn::internal
