// dist::DistributedDataParallel: data-parallel training over a ProcessGroup
// (DESIGN.md §6).
//
//   dist::DistributedDataParallel ddp(pg, model.NamedParameters(),
//                                     {.grad_sync = dist::GradSync::kFp8E4M3});
//   for (int micro = 0; micro < accum; ++micro) {
//     ddp.set_sync(micro == accum - 1);   // only the last micro-batch syncs
//     model.Loss(x, y).Backward();
//   }
//   ddp.FinishGradSync();                 // every .grad is now the mean over ranks
//   opt.Step();
//
// The constructor broadcasts every parameter from rank 0. Parameters are
// grouped into buckets of about `bucket_bytes` of f32 gradient, in reverse
// order (backward produces the last layers' gradients first). A post-
// accumulate hook on each parameter (autograd/node.h) marks its gradient
// final; when every gradient of a bucket is final — and every earlier bucket
// has been started, so all ranks reduce buckets in the same order — the
// bucket's reduction starts on a communication thread while backward goes on.
//
// NOTE [fp8 grad sync]: per bucket, with g the rank's gradients (+ its
// residual from the last step under error feedback):
//   1. amax = max|g|, MAX all-reduce -> A (one float per rank);
//   2. one shared scale s = fp8_max / A (every rank quantizes alike);
//   3. q = fp8(g * s); with error feedback the residual g - q/s is kept;
//   4. AllToAll of the FP8 bytes: rank r receives every rank's slice r;
//   5. the slice is dequantized and summed in FP32, in rank order;
//   6. the sum is re-quantized with scale s/N: |sum| <= N·A, so this is the
//      headroom the sum needs and nothing saturates; and code·(1/s) is then
//      the *mean* — 1/N sits in scale_inv, no pass over the data divides;
//   7. AllGather of the FP8 slices; every rank dequantizes with 1/s.
// Bytes sent per rank: 2·(N-1)/N bytes per element + 4·(N-1) for the amax,
// against 8·(N-1)/N for FP32 and 4·(N-1)/N for BF16 (whose sum is FP32 too).
// Counters: elements clamped at step 3 (saturated) and nonzero elements that
// became 0 at step 3 (flushed), per synchronised step.
//
// Errors (octet::Error): parameters that are not f32 leaves requiring grad;
// in FinishGradSync, a parameter that got no gradient in the synchronised
// backward, named, unless `allow_unused` (then its gradient counts as zero);
// any collective failure (a lost peer is named by the group).
// Do not issue other collectives on the group between a synchronised
// backward and FinishGradSync: the bucket reductions are in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <octet/core/tensor.h>
#include <octet/distributed/process_group.h>

namespace octet::dist {

enum class GradSync : uint8_t { kFp32, kBf16, kFp8E4M3, kFp8E5M2 };
const char* Name(GradSync s);
// "fp32", "bf16", "fp8" (= fp8_e4m3), "fp8_e4m3", "fp8_e5m2".
bool ParseGradSync(const std::string& text, GradSync* out);

struct DdpOptions {
  GradSync grad_sync = GradSync::kFp32;
  int64_t bucket_bytes = 1 << 20;  // of f32 gradient per bucket
  bool allow_unused = false;
  bool error_feedback = false;  // FP8 only: add last step's quantisation residual
  bool broadcast_parameters = true;
};

struct DdpStats {  // of the last synchronised step
  int64_t bytes_sent = 0;
  int64_t saturated = 0;
  int64_t flushed = 0;
  int64_t elements = 0;
  int64_t buckets = 0;
  int64_t launched_in_backward = 0;  // buckets started by a gradient hook (overlap)
};

class DistributedDataParallel {
 public:
  using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

  DistributedDataParallel(ProcessGroup& pg, NamedTensors params, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Whether the next backward synchronises gradients (default true).
  void set_sync(bool sync);
  bool sync() const;
  // Waits for every bucket of the synchronised backward (starting what could
  // not start: unused parameters); afterwards each .grad is the mean over ranks.
  void FinishGradSync();

  const DdpStats& last_stats() const;
  // Bucket -> parameter indices (into the constructor's list), in reduction order.
  std::vector<std::vector<int>> buckets() const;
  const DdpOptions& options() const;

  struct State;  // shared with the hooks (distributed/ddp.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace octet::dist
