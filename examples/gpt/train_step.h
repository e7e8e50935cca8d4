// One optimizer step of train_gpt: the micro-batches' forward and backward,
// gradient clipping, AdamW and the FP8 scaling update, run eagerly or, with
// --cuda_graph, captured once into a CUDA graph and replayed (core/graph.h,
// NOTE [captured steps]).
//
// Graph mode keeps the step's inputs in static device buffers
// ([grad_accum, B, T] token ids and targets), copied in before each replay.
// Its first step runs eagerly (warm-up: library handles, cuDNN plans, the FP8
// state's first scales), the second is captured and replayed, the rest are
// replays. The losses are the eager ones: the same kernels run on the same
// data in the same order. Limits (each refused with a message by
// CheckGraphMode): a CUDA device, one process, no dropout (its Philox offset
// is a host counter), and no FP8 telemetry (its on/off switch is host state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include <octet/core/graph.h>
#include <octet/core/tensor.h>
#include "examples/gpt/data.h"
#include "examples/gpt/distributed_training.h"
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/optim/adamw.h>

namespace octet::gpt {

class TrainStep {
 public:
  struct Options {
    Device device;
    int64_t grad_accum = 1;
    double grad_clip = 1.0;  // 0: no clipping (the norm is still computed)
    bool cuda_graph = false;
  };
  // Why graph mode cannot run with these settings, or OK.
  static absl::Status CheckGraphMode(const Device& device, int world_size, double dropout);

  TrainStep(const Options& options, nn::GPT& model, optim::AdamW& opt, nn::amp::Fp8State& fp8,
            DistributedTraining& dt);

  struct Result {
    Tensor loss_sum;   // float64 [] on the device: the micro-batches' summed mean losses
    Tensor grad_norm;  // float64 [] (on the CPU under data parallelism)
  };
  // One optimizer step at learning rate `lr` on `batches` (grad_accum
  // micro-batches of (B,T) CPU tensors). The result's tensors belong to this
  // step (a later step does not overwrite them) and are read by the caller
  // when it logs.
  Result Run(const std::vector<Batch>& batches, double lr);

  // "eager", or how the graph runs ("CUDA graph captured at step N").
  std::string Mode() const;

 private:
  // The step on device inputs (one (B,T) tensor per micro-batch).
  Result Body(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, double lr);

  Options options_;
  nn::GPT& model_;
  optim::AdamW& opt_;
  nn::amp::Fp8State& fp8_;
  DistributedTraining& dt_;
  int64_t runs_ = 0;
  // Graph mode.
  Tensor x_, y_;  // int64 [grad_accum, B, T] on the device
  Graph graph_;
  Result captured_;  // the captured step's outputs, rewritten by every replay
  int64_t captured_at_ = -1;
};

}  // namespace octet::gpt
