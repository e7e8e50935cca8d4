// train_gpt's data-parallel set-up, kept out of train_gpt.cc: under octet-run
// (OCTET_RANK / OCTET_WORLD_SIZE set) every rank trains on its own batches
// and gradients are synchronised with dist::DistributedDataParallel
// (--grad_sync=fp32|bf16|fp8|fp8_e5m2, --bucket_kb) or, with --zero1, with
// ZeRO-1 (dist::ZeroAdamW: sharded AdamW state, --zero_gather=fp32|bf16|fp8).
// Without those variables it is a single rank and every call below does what
// train_gpt did before (plain AdamW, local clipping).
//
//   octet-run -n 2 -- train_gpt --grad_sync=fp8 --steps 200
//   octet-run -n 4 -- train_gpt --zero1 --zero_gather=bf16
//
// Ranks other than 0 print nothing on stdout (errors still go to stderr).
// The O1 amax histories are MAX-reduced across ranks after every backward so
// every rank quantizes with the same scales. Checkpoints hold the full
// optimizer state (gathered under ZeRO-1), written by rank 0 only, so they
// load at any world size; on resume every rank continues rank 0's data
// position (each rank's own order is seeded by its rank).
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <string>

#include <octet/distributed/ddp.h>
#include <octet/distributed/init.h>
#include <octet/distributed/zero.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/module.h>
#include <octet/optim/adamw.h>

namespace octet::gpt {

class DistributedTraining {
 public:
  // Reads the environment and the flags; sets up the group.
  static absl::StatusOr<std::unique_ptr<DistributedTraining>> Create();

  int rank() const { return ctx_.group ? ctx_.group->rank() : 0; }
  int world_size() const { return ctx_.group ? ctx_.group->size() : 1; }
  bool is_main() const { return rank() == 0; }
  bool zero1() const { return zero_ != nullptr || zero1_flag_; }
  // This rank's data seed: the run's seed, shifted per rank.
  uint64_t DataSeed(uint64_t seed) const { return seed + 1000003ull * static_cast<uint64_t>(rank()); }
  // What plain AdamW should own: every parameter, or none under ZeRO-1.
  optim::NamedTensors OptimizerParams(nn::Module& model) const;
  // After the model and AdamW exist: DDP (broadcasts rank 0's weights) or ZeRO-1.
  void Attach(nn::Module& model, const optim::AdamW::Options& adamw);
  // Makes the FP8 state manager MAX-reduce each step's pending amaxes across
  // the ranks before it updates (dist::SyncAmaxesThrough), so every rank has
  // the same histories and scales. Without a group it does nothing.
  void AttachFp8State(nn::amp::Fp8State& state);
  // Before each micro-batch's backward: only the last one synchronises.
  void BeforeBackward(int64_t micro, int64_t accum);
  // After the last backward: gradients become the mean over ranks (or this
  // rank's shard of it; the FP8 amaxes are reduced by AttachFp8State's hook
  // instead), then clips by the global norm (max_norm <= 0: no clipping) and
  // returns that norm.
  double SyncAndClip(optim::AdamW& opt, double max_norm);
  // The optimizer step (plain AdamW's, or the sharded one and the weight all-gather).
  void Step(optim::AdamW& opt, double lr);
  // Full optimizer state for a checkpoint (a collective under ZeRO-1).
  optim::OptimizerState OptimizerState(optim::AdamW& opt);
  // The model's tensors for a checkpoint: model.StateDict(), with the FP32
  // masters in place of the rounded parameters under ZeRO-1 with a bf16/fp8
  // gather (a collective then), so that a resume is exact at any world size.
  optim::NamedTensors ModelState(nn::Module& model);
  absl::Status LoadOptimizerState(optim::AdamW& opt, const optim::OptimizerState& state);
  // The largest `value` over the ranks (a collective every rank makes at the
  // same step; `value` itself for one rank): how the ranks agree to stop.
  int MaxOverRanks(int value, Device device);
  // " | sync fp8 1.2 MB/step" for the progress line ("" for one rank).
  std::string StepSummary() const;
  // Bytes this rank sent in the last synchronised step.
  int64_t last_bytes_sent() const { return last_bytes_; }

 private:
  dist::DistContext ctx_;
  dist::GradSync grad_sync_ = dist::GradSync::kFp32;
  DType zero_gather_ = DType::kFloat32;
  bool zero1_flag_ = false;
  int64_t bucket_bytes_ = 0;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<dist::ZeroAdamW> zero_;
  int64_t last_bytes_ = 0;
  int64_t bytes_before_ = 0;
};

}  // namespace octet::gpt
