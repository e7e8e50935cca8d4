// NcclProcessGroup: a ProcessGroup on CUDA tensors over NCCL (CUDA builds
// only; DESIGN.md §6, CUDA_NOTES.md §3). The communicator is bootstrapped
// through a Store (distributed/cuda/nccl_bootstrap.h).
//
// Collectives are queued on octet's current stream of the group's device —
// after the kernels that produced their tensors — and the group's worker
// thread waits for each with a watchdog: it polls the completion event and
// ncclCommGetAsyncError until `timeout`; an error or the deadline aborts the
// communicator (ncclCommAbort, never ncclCommDestroy, which can hang) and the
// collective fails with NCCL's text. NCCL cannot tell which peer was lost;
// the message says the job should be restarted (octet-run names the rank
// whose process died).
//
// NOTE [nccl fp8]: every reduction adds in FP32 (NOTE [reduce in fp32] in
// distributed/process_group.h). NCCL's own FP8 sum would round to FP8 at every
// hop, and ncclAvg with FP8 pre-multiplies by 1/N rounded to FP8 (+3 % / -6 %
// for N = 3): neither is ever used. FP8 tensors travel as FP8 bytes
// (ncclFloat8e4m3/e5m2 for data movement, which every architecture allows)
// together with each rank's scale_inv; the receiver dequantizes and sums in
// FP32 and re-quantizes with current scaling from the result's amax. BF16
// sums run in FP32 (widened copy). f32 reductions are NCCL's own.
#pragma once

#include <absl/status/statusor.h>
#include <nccl.h>

#include <chrono>
#include <memory>

#include <octet/core/error.h>
#include <octet/distributed/process_group.h>
#include <octet/distributed/store.h>

#define OCTET_NCCL_CHECK(expr)                                                                  \
  do {                                                                                          \
    const ncclResult_t octet_st_ = (expr);                                                      \
    OCTET_CHECK(octet_st_ == ncclSuccess || octet_st_ == ncclInProgress, "NCCL call ", #expr,   \
                " failed: ", ncclGetErrorString(octet_st_));                                    \
  } while (0)

namespace octet::dist {

struct NcclGroupOptions {
  int device = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  std::string key = "octet/nccl/unique_id";  // store key of the NCCL unique id
};

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(Store& store, int rank, int size,
                                                                     const NcclGroupOptions& options = {});

namespace internal {
// The NCCL type that moves `dt`'s bytes (fp8 -> ncclFloat8e4m3/e5m2); throws
// octet::Error for a dtype NCCL cannot move.
ncclDataType_t NcclMoveType(DType dt);
// The NCCL reduction for `op` on `dt`: only float32 is reduced by NCCL itself
// (NOTE [nccl fp8]); other dtypes throw. Never returns ncclAvg.
ncclRedOp_t NcclReduceOp(ReduceOp op, DType dt);
}  // namespace internal

}  // namespace octet::dist
