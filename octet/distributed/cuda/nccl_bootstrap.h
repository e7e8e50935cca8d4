// NCCL communicator bootstrap through a rendezvous Store (CUDA builds only;
// distributed/cuda/ is compiled only with the CUDA backend).
//
// NOTE [nccl bootstrap]: rank 0 calls ncclGetUniqueId (which needs no GPU:
// it only opens a bootstrap socket) and publishes the 128 raw bytes in the
// store; every other rank waits for them. Each rank then sets its device and
// creates its communicator with ncclCommInitRankConfig in non-blocking mode
// (config.blocking = 0) and polls ncclCommGetAsyncError against its own
// deadline: a peer that never arrives becomes a DEADLINE_EXCEEDED status on
// every rank that did (the half-built communicator is ncclCommAbort-ed, never
// ncclCommDestroy-ed, which can hang), not a hang (CUDA_NOTES §3).
// Everything here returns absl::Status / StatusOr (this header is private;
// init.cc turns a failure into octet::Error): the Store's StoreTimeoutError
// becomes DEADLINE_EXCEEDED, its other errors INTERNAL.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <string>

#include <octet/distributed/store.h>

namespace octet::dist {

// Rank 0: creates the id and stores it under `key`; other ranks: wait up to
// `timeout` for it. Errors name the key, the rank and NCCL's error text; a
// stored value that is not 128 bytes is DATA_LOSS.
absl::StatusOr<ncclUniqueId> ExchangeNcclUniqueId(Store& store, int rank, const std::string& key,
                                                  std::chrono::milliseconds timeout);

struct NcclCommOptions {
  int device = 0;                                              // CUDA device of this rank
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // for the whole init
  std::string name;                                            // ncclConfig_t::commName (optional)
};

// Creates this rank's communicator (non-blocking init with a deadline; see
// NOTE [nccl bootstrap]). The caller owns the returned communicator.
absl::StatusOr<ncclComm_t> InitNcclComm(const ncclUniqueId& id, int rank, int world_size,
                                        const NcclCommOptions& options);

// Store + init in one call: the id goes through `store` under `key`.
absl::StatusOr<ncclComm_t> BootstrapNcclComm(Store& store, const std::string& key, int rank, int world_size,
                                             const NcclCommOptions& options);

namespace internal {
// Calls `poll` (ncclCommGetAsyncError's contract: returns the call's result
// and writes the communicator's state) about every millisecond until the
// state is no longer ncclInProgress or `timeout` passes. OK when the state is
// ncclSuccess; DEADLINE_EXCEEDED naming `what` and the wait; INTERNAL with
// NCCL's error text otherwise. Exposed for tests.
absl::Status WaitForNcclComm(const std::function<ncclResult_t(ncclResult_t*)>& poll, std::chrono::milliseconds timeout,
                             const std::string& what);
}  // namespace internal

}  // namespace octet::dist
