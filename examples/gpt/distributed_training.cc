#include "examples/gpt/distributed_training.h"

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include <octet/distributed/amax_sync.h>
#include <octet/nn/amp.h>
#include <octet/optim/clip.h>

ABSL_FLAG(std::string, grad_sync, "fp32",
          "Under octet-run: gradient all-reduce format fp32 | bf16 | fp8 (E4M3) | fp8_e5m2 (sums always in FP32)");
ABSL_FLAG(bool, zero1, false, "Under octet-run: ZeRO-1, AdamW state sharded across ranks");
ABSL_FLAG(std::string, zero_gather, "fp32", "ZeRO-1: format of the updated-weight all-gather: fp32 | bf16 | fp8");
ABSL_FLAG(int64_t, bucket_kb, 1024, "DDP gradient bucket size in KiB of FP32 gradient");

namespace octet::gpt {

absl::StatusOr<std::unique_ptr<DistributedTraining>> DistributedTraining::Create() {
  auto out = std::unique_ptr<DistributedTraining>(new DistributedTraining());
  if (!dist::ParseGradSync(absl::GetFlag(FLAGS_grad_sync), &out->grad_sync_)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown --grad_sync '", absl::GetFlag(FLAGS_grad_sync),
                                                   "' (expected fp32, bf16, fp8 or fp8_e5m2)"));
  }
  const std::string g = absl::GetFlag(FLAGS_zero_gather);
  if (g == "fp32") out->zero_gather_ = DType::kFloat32;
  else if (g == "bf16") out->zero_gather_ = DType::kBFloat16;
  else if (g == "fp8") out->zero_gather_ = DType::kFloat8E4M3;
  else return absl::InvalidArgumentError(absl::StrCat("unknown --zero_gather '", g, "' (expected fp32, bf16 or fp8)"));
  if (absl::GetFlag(FLAGS_bucket_kb) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--bucket_kb must be >= 1, got ", absl::GetFlag(FLAGS_bucket_kb)));
  }
  out->bucket_bytes_ = absl::GetFlag(FLAGS_bucket_kb) * 1024;
  // The dist set-up throws octet::Error; this program reports Status values.
  dist::DistEnv env;
  try {
    env = dist::ReadDistEnv();
  } catch (const Error& e) {
    return absl::InvalidArgumentError(e.what());
  }
  out->zero1_flag_ = absl::GetFlag(FLAGS_zero1) && env.world_size > 1;
  if (env.world_size > 1) {
    try {
      out->ctx_ = dist::InitProcessGroup(env);
    } catch (const Error& e) {
      return absl::UnavailableError(e.what());
    }
    if (out->rank() != 0) std::freopen("/dev/null", "w", stdout);  // one progress log per job
  }
  return out;
}

optim::NamedTensors DistributedTraining::OptimizerParams(nn::Module& model) const {
  if (zero1_flag_) return {};
  return model.NamedParameters();
}

void DistributedTraining::Attach(nn::Module& model, const optim::AdamW::Options& adamw) {
  if (world_size() == 1) return;
  dist::ProcessGroup& pg = *ctx_.group;
  if (zero1_flag_) {
    // Same weights everywhere first (ZeRO-1 shards assume it), then shard the state.
    std::vector<dist::WorkPtr> works;
    for (auto& [name, p] : model.NamedParameters()) works.push_back(pg.Broadcast(p.detach(), 0));
    for (auto& w : works) w->Wait();
    for (auto& [name, p] : model.NamedParameters()) p.storage()->BumpVersion();
    zero_ = std::make_unique<dist::ZeroAdamW>(pg, model.NamedParameters(), adamw,
                                              dist::ZeroOptions{.grad_sync = grad_sync_, .gather_dtype = zero_gather_});
    std::printf(
        "distributed: %d ranks, ZeRO-1 (%lld of %lld elements per rank: %.2f MB of optimizer state here vs %.2f MB "
        "unsharded), grads %s, weights %s\n",
        world_size(), static_cast<long long>(zero_->shard_elements()), static_cast<long long>(zero_->total_elements()),
        zero_->state_bytes() / 1e6, 8.0 * zero_->total_elements() / 1e6, dist::Name(grad_sync_), Name(zero_gather_));
  } else {
    ddp_ = std::make_unique<dist::DistributedDataParallel>(
        pg, model.NamedParameters(), dist::DdpOptions{.grad_sync = grad_sync_, .bucket_bytes = bucket_bytes_});
    std::printf("distributed: %d ranks, DDP, grad sync %s, %zu buckets\n", world_size(), dist::Name(grad_sync_),
                ddp_->buckets().size());
  }
}

void DistributedTraining::BeforeBackward(int64_t micro, int64_t accum) {
  if (ddp_) ddp_->set_sync(micro + 1 == accum);
  if (micro == 0 && ctx_.group) bytes_before_ = ctx_.group->counters().bytes_sent;
}

void DistributedTraining::AttachFp8State(nn::amp::Fp8State& state) {
  if (!ctx_.group) return;
  dist::SyncAmaxesThrough(*ctx_.group, state);
}

double DistributedTraining::SyncAndClip(optim::AdamW& opt, double max_norm) {
  if (ddp_) ddp_->FinishGradSync();
  if (zero_) zero_->ReduceGradients();
  if (zero_) return zero_->ClipGradNorm(max_norm);
  return max_norm > 0 ? optim::ClipGradNorm(opt.params(), max_norm) : optim::GradNorm(opt.params());
}

void DistributedTraining::Step(optim::AdamW& opt, double lr) {
  opt.set_lr(lr);
  opt.Step();
  if (zero_) {
    zero_->set_lr(lr);
    zero_->Step();
  }
  if (ctx_.group) last_bytes_ = ctx_.group->counters().bytes_sent - bytes_before_;
}

optim::OptimizerState DistributedTraining::OptimizerState(optim::AdamW& opt) {
  if (zero_) return zero_->FullStateDict();
  return opt.StateDict();
}

optim::NamedTensors DistributedTraining::ModelState(nn::Module& model) {
  optim::NamedTensors state = model.StateDict();
  if (!zero_ || zero_gather_ == DType::kFloat32) return state;
  for (auto& [name, master] : zero_->MasterWeights()) {
    for (auto& [key, t] : state) {
      if (key == name) t = master;
    }
  }
  return state;
}

absl::Status DistributedTraining::LoadOptimizerState(optim::AdamW& opt, const optim::OptimizerState& state) {
  try {
    if (zero_) {
      zero_->LoadFullStateDict(state);
    } else {
      opt.LoadStateDict(state);
    }
  } catch (const Error& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return absl::OkStatus();
}

int DistributedTraining::MaxOverRanks(int value, Device device) {
  if (world_size() == 1) return value;
  const Tensor t = Full({1}, static_cast<double>(value), {.dtype = DType::kFloat32, .device = device});
  ctx_.group->AllReduce(t, dist::ReduceOp::kMax)->Wait();
  return static_cast<int>(t.Item());
}

std::string DistributedTraining::StepSummary() const {
  if (world_size() == 1) return "";
  return absl::StrFormat(" | %s%s %.2f MB sent", zero_ ? "zero1 " : "", dist::Name(grad_sync_),
                         static_cast<double>(last_bytes_) / 1e6);
}

}  // namespace octet::gpt
