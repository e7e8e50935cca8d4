// dist::ZeroAdamW: ZeRO stage 1 — AdamW whose state is sharded across ranks
// (DESIGN.md §6). Replaces DistributedDataParallel + optim::AdamW:
//
//   dist::ZeroAdamW opt(pg, model.NamedParameters(), adamw_options, {.gather_dtype = DType::kBFloat16});
//   model.ZeroGrad();  loss.Backward();
//   opt.ReduceGradients();          // reduce-scatter: this rank's shard of the mean gradient
//   opt.ClipGradNorm(1.0);          // global norm from the shards (one float all-reduced)
//   opt.set_lr(lr);  opt.Step();    // AdamW on the shard, all-gather of the updated weights
//
// NOTE [zero-1 layout]: the parameters, in order, form one flat vector of P
// elements padded to N·S (S = ceil(P/N)); rank r owns elements [r·S, r·S+S).
// Each parameter's part inside a rank's range is a "piece": a float32 leaf of
// its own that the rank's private optim::AdamW updates (named
// "<param>@<offset>", decayed when its parameter has dim >= 2, like AdamW's
// default), so each rank keeps m and v for about P/N elements instead of P.
// With fp32 gathering a piece is a view of its parameter (the parameter is
// the master); with bf16/fp8 gathering it is a separate FP32 master. Gradients travel as `grad_sync` (fp32, bf16 or
// fp8 with per-rank scales; every sum in FP32); updated weights come back as
// `gather_dtype` (fp32: bit-identical to the master; bf16 or fp8_e4m3
// halve or quarter the bytes and every rank, the owner included, uses the
// rounded weights while the owner keeps the FP32 master in its piece).
//
// Checkpoints: FullStateDict() gathers the shards into exactly what a plain
// optim::AdamW over the same parameters returns ("adamw.m.<param>", ...),
// so a checkpoint loads at any world size — into a plain AdamW at 1 rank, or
// into a ZeroAdamW of any size through LoadFullStateDict. With a bf16/fp8
// gather the parameters hold rounded copies: save MasterWeights() (the FP32
// masters, by parameter name) as the model's weights, and LoadFullStateDict
// takes the masters from the loaded parameters and rounds the parameters
// again, so a resume continues exactly where the run stopped. All three are
// collectives (call them on every rank). state_dtype must be fp32.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <octet/distributed/ddp.h>
#include <octet/distributed/process_group.h>
#include <octet/optim/adamw.h>

namespace octet::dist {

struct ZeroOptions {
  GradSync grad_sync = GradSync::kFp32;
  DType gather_dtype = DType::kFloat32;  // kFloat32, kBFloat16 or kFloat8E4M3
};

class ZeroAdamW {
 public:
  using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

  // Parameters: contiguous float32 CPU leaves requiring grad, identical on
  // every rank (broadcast them first, or seed alike). Throws octet::Error.
  ZeroAdamW(ProcessGroup& pg, NamedTensors params, optim::AdamW::Options options, ZeroOptions zero = {});

  // Reduce-scatters every parameter's .grad (undefined counts as zero): this
  // rank's pieces get the mean over ranks. Collective.
  void ReduceGradients();
  // The global L2 norm of the mean gradient; scales the pieces' gradients by
  // max_norm / norm when it is larger (max_norm <= 0: no clipping). Collective.
  double ClipGradNorm(double max_norm);
  void set_lr(double lr) { opt_->set_lr(lr); }
  double lr() const { return opt_->lr(); }
  int64_t step_count() const { return opt_->step_count(); }
  // AdamW on this rank's pieces, then the all-gather of the updated weights
  // into every parameter (their version counters bump). Collective.
  void Step();

  optim::OptimizerState FullStateDict();
  // Loads m and v of this rank's pieces; the FP32 masters are taken from the
  // parameters (load the model first), which are then re-gathered in
  // gather_dtype (bf16/fp8: rounded, as after a Step). Throws octet::Error
  // (naming the entry) on a state that does not fit.
  void LoadFullStateDict(const optim::OptimizerState& state);
  // The FP32 weights by parameter name (fresh tensors shaped like the
  // parameters): the owners' masters, all-gathered. Equal to the parameters
  // with an fp32 gather; with bf16/fp8 the parameters are these rounded.
  NamedTensors MasterWeights();

  // Elements of optimizer state this rank holds (m, v and the master copy),
  // and the bytes the last Step's all-gather + ReduceGradients sent.
  int64_t shard_elements() const { return shard_hi_ - shard_lo_; }
  int64_t total_elements() const { return total_; }
  // Bytes of optimizer-side memory this rank holds for its shard: m and v,
  // the shard's gradient and (bf16/fp8 gather only) the FP32 master. Plain
  // DDP + AdamW holds 8 bytes (m, v) for every element instead.
  int64_t state_bytes() const;

 private:
  struct Piece {
    int param = 0;       // index into params_
    int64_t begin = 0;   // element offset inside the parameter
    int64_t length = 0;
    Tensor master;       // float32 [length] leaf, updated by opt_
  };
  // Fills `flat` ([N·S] float32) from the parameters' values (or grads).
  void Flatten(bool grads, float* flat) const;
  // This rank's masters as its [S] slice of the flat vector (zero padded).
  std::vector<float> MasterShard() const;
  // All-gathers the masters in gather_dtype into the parameters.
  void GatherWeights();

  ProcessGroup& pg_;
  NamedTensors params_;
  optim::AdamW::Options options_;
  ZeroOptions zero_;
  std::vector<int64_t> offsets_;  // flat offset of each parameter
  int64_t total_ = 0, shard_ = 0, shard_lo_ = 0, shard_hi_ = 0;
  std::vector<Piece> pieces_;
  std::unique_ptr<optim::AdamW> opt_;
};

}  // namespace octet::dist
