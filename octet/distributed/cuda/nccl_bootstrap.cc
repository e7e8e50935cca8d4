#include <octet/distributed/cuda/nccl_bootstrap.h>

#include <absl/strings/str_cat.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <thread>

namespace octet::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string NcclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = absl::StrCat(ncclGetErrorString(r), " (code ", static_cast<int>(r), ")");
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&s, ": ", last);
  return s;
}

// The Store throws octet::Error; this file reports Status values (a timeout
// stays DEADLINE_EXCEEDED).
absl::Status StoreErrorStatus(const Error& e, const std::string& context) {
  const std::string text = absl::StrCat(context, e.what());
  if (dynamic_cast<const StoreTimeoutError*>(&e) != nullptr) return absl::DeadlineExceededError(text);
  return absl::InternalError(text);
}

}  // namespace

absl::StatusOr<ncclUniqueId> ExchangeNcclUniqueId(Store& store, int rank, const std::string& key,
                                                  std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::InternalError(
          absl::StrCat("NCCL bootstrap: ncclGetUniqueId on rank 0 failed: ", NcclText(r, nullptr)));
    }
    try {
      store.Set(key, std::string(id.internal, sizeof(id.internal)));
    } catch (const Error& e) {
      return StoreErrorStatus(
          e, absl::StrCat("NCCL bootstrap: rank 0 could not publish the unique id under '", key, "': "));
    }
    return id;
  }
  std::string value;
  try {
    value = store.Get(key, timeout);
  } catch (const Error& e) {
    return StoreErrorStatus(e, absl::StrCat("NCCL bootstrap: rank ", rank, " did not get the unique id from rank 0: "));
  }
  if (value.size() != sizeof(id.internal)) {
    return absl::DataLossError(absl::StrCat("NCCL bootstrap: key '", key, "' holds ", value.size(),
                                            " bytes, expected a ", sizeof(id.internal), "-byte ncclUniqueId"));
  }
  std::memcpy(id.internal, value.data(), sizeof(id.internal));
  return id;
}

namespace internal {

absl::Status WaitForNcclComm(const std::function<ncclResult_t(ncclResult_t*)>& poll, std::chrono::milliseconds timeout,
                             const std::string& what) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = poll(&state);
    if (r != ncclSuccess) {
      return absl::InternalError(absl::StrCat(what, ": ncclCommGetAsyncError failed: ", ncclGetErrorString(r)));
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return absl::InternalError(absl::StrCat(what, " failed: ", ncclGetErrorString(state)));
    }
    if (Clock::now() >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      return absl::DeadlineExceededError(absl::StrCat(what, " did not finish within ", timeout.count(), " ms (waited ",
                                                      waited, " ms); a peer is missing or stuck"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace internal

absl::StatusOr<ncclComm_t> InitNcclComm(const ncclUniqueId& id, int rank, int world_size,
                                        const NcclCommOptions& options) {
  const std::string what =
      absl::StrCat("NCCL communicator init of rank ", rank, " of ", world_size, " on cuda:", options.device);
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank must be in [0, world size)"));
  }
  const cudaError_t ce = cudaSetDevice(options.device);
  if (ce != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": cudaSetDevice(", options.device, ") failed: ",
                                                      cudaGetErrorName(ce), " (", cudaGetErrorString(ce), ")"));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (!options.name.empty()) config.commName = options.name.c_str();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    const std::string text = NcclText(r, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return absl::InternalError(absl::StrCat(what, ": ncclCommInitRankConfig failed: ", text));
  }
  absl::Status s = internal::WaitForNcclComm([comm](ncclResult_t* state) { return ncclCommGetAsyncError(comm, state); },
                                             options.timeout, what);
  if (!s.ok()) {
    const std::string last = ncclGetLastError(comm) != nullptr ? ncclGetLastError(comm) : "";
    ncclCommAbort(comm);  // never ncclCommDestroy on a failed/partial communicator
    if (!last.empty()) return absl::Status(s.code(), absl::StrCat(s.message(), ": ", last));
    return s;
  }
  return comm;
}

absl::StatusOr<ncclComm_t> BootstrapNcclComm(Store& store, const std::string& key, int rank, int world_size,
                                             const NcclCommOptions& options) {
  absl::StatusOr<ncclUniqueId> id = ExchangeNcclUniqueId(store, rank, key, options.timeout);
  if (!id.ok()) return id.status();
  return InitNcclComm(*id, rank, world_size, options);
}

}  // namespace octet::dist
