#include "examples/gpt/train_step.h"

#include "absl/strings/str_cat.h"
#include <octet/nn/amp.h>
#include <octet/ops/pointwise.h>
#include <octet/optim/clip.h>

namespace octet::gpt {

absl::Status TrainStep::CheckGraphMode(const Device& device, int world_size, double dropout) {
  if (!device.is_cuda())
    return absl::InvalidArgumentError(absl::StrCat("--cuda_graph needs --device=cuda, got ", ToString(device),
                                                   " (the CPU runs its work as it is queued: nothing to capture)"));
  if (world_size > 1)
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_graph runs in one process; this run has ", world_size,
                     " (the gradient collectives read the norm on the host)"));
  if (dropout > 0.0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--cuda_graph needs --dropout=0 (got ", dropout,
        "): dropout's Philox offset is a host counter, so every replay would drop the same elements"));
  return absl::OkStatus();
}

TrainStep::TrainStep(const Options& options, nn::GPT& model, optim::AdamW& opt, nn::amp::Fp8State& fp8,
                     DistributedTraining& dt)
    : options_(options), model_(model), opt_(opt), fp8_(fp8), dt_(dt) {}

TrainStep::Result TrainStep::Body(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, double lr) {
  const int64_t accum = options_.grad_accum;
  model_.ZeroGrad();
  // NOTE [host reads] (core/host_reads.h): nothing here reads the device; the
  // loss and the gradient norm stay device tensors until a log line needs them.
  Result r;
  for (int64_t micro = 0; micro < accum; ++micro) {
    Tensor loss = model_.Loss(inputs[micro], targets[micro]);
    const Tensor l64 = loss.detach().To(DType::kFloat64);
    r.loss_sum = micro == 0 ? l64 : Add(r.loss_sum, l64);
    dt_.BeforeBackward(micro, accum);
    // The FP8 weight copies serve the next micro-batch's forward; the last
    // backward releases them (NOTE [fp8 weight copy lifetime]).
    if (accum > 1) nn::amp::KeepFp8WeightCopies(model_, micro + 1 < accum);
    (accum == 1 ? loss : MulScalar(loss, 1.0 / static_cast<double>(accum))).Backward();
  }
  const double clip = options_.grad_clip;
  if (dt_.world_size() > 1) {
    // The gradient collectives synchronise the host anyway: the norm is a host value here.
    r.grad_norm = Full({}, dt_.SyncAndClip(opt_, clip), {.dtype = DType::kFloat64});
    dt_.Step(opt_, lr);
  } else {
    r.grad_norm = clip > 0 ? optim::ClipGradNormTensor(model_.NamedParameters(), clip)
                           : optim::GradNormTensor(model_.NamedParameters());
    opt_.set_lr(lr);
    opt_.Step();
  }
  fp8_.Update();  // once per optimizer step (ranks' amaxes MAX-reduced first); a no-op without FP8 GEMMs
  return r;
}

TrainStep::Result TrainStep::Run(const std::vector<Batch>& batches, double lr) {
  const int64_t accum = options_.grad_accum;
  OCTET_CHECK(static_cast<int64_t>(batches.size()) == accum, "TrainStep::Run: ", batches.size(),
              " micro-batches for --grad_accum ", accum);
  const int64_t run = runs_++;
  if (!options_.cuda_graph) {
    std::vector<Tensor> xs, ys;
    for (const Batch& b : batches) {
      xs.push_back(b.inputs.To(options_.device));
      ys.push_back(b.targets.To(options_.device));
    }
    return Body(xs, ys, lr);
  }
  // Graph mode: the inputs go into the static buffers the graph reads.
  if (!x_.defined()) {
    const Shape shape{accum, batches[0].inputs.size(0), batches[0].inputs.size(1)};
    x_ = Empty(shape, {.dtype = DType::kInt64, .device = options_.device});
    y_ = Empty(shape, {.dtype = DType::kInt64, .device = options_.device});
  }
  std::vector<Tensor> xs, ys;
  for (int64_t m = 0; m < accum; ++m) {
    Tensor x = x_.Select(0, m), y = y_.Select(0, m);
    OCTET_CHECK(batches[m].inputs.shape() == x.shape() && batches[m].targets.shape() == y.shape(),
                "TrainStep::Run: a batch of shape ", ShapeStr(batches[m].inputs.shape()),
                " does not fit the captured step's inputs ", ShapeStr(x.shape()));
    x.CopyFrom_(batches[m].inputs);
    y.CopyFrom_(batches[m].targets);
    xs.push_back(x);
    ys.push_back(y);
  }
  if (run == 0) return Body(xs, ys, lr);  // warm-up, eager
  opt_.set_lr(lr);                        // read by AdamW before each replay
  if (!graph_.captured()) {
    graph_.Capture(options_.device, [&] { captured_ = Body(xs, ys, lr); });
    captured_at_ = run + 1;
  }
  graph_.Replay();
  // Copies (on the device, in stream order): the next replay rewrites captured_.
  return {captured_.loss_sum.Clone(), captured_.grad_norm.Clone()};
}

std::string TrainStep::Mode() const {
  if (!options_.cuda_graph) return "eager";
  if (captured_at_ < 0) return "CUDA graph (not captured yet)";
  return absl::StrCat("CUDA graph captured at step ", captured_at_, ", ", graph_.replays(), " replays");
}

}  // namespace octet::gpt
