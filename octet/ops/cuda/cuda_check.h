// Status-check macros for the CUDA runtime and cuBLASLt (cuDNN's:
// ops/cuda/cudnn_handle.h; NCCL's: distributed/cuda/nccl_group.h; both
// libraries are optional). Each turns a failed call into an octet::Error
// naming the call, the library's own error text and file:line.
// Host code only (include from .cu or .cc files of the CUDA backend).
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include <octet/core/error.h>
#include <octet/ops/cuda/cublaslt_api.h>

#define OCTET_CUDA_CHECK(expr)                                                                   \
  do {                                                                                           \
    const cudaError_t octet_err_ = (expr);                                                       \
    OCTET_CHECK(octet_err_ == cudaSuccess, "CUDA call ", #expr, " failed: ", cudaGetErrorName(octet_err_), \
                " (", cudaGetErrorString(octet_err_), ")");                                      \
  } while (0)

#define OCTET_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                                \
    const cublasStatus_t octet_st_ = (expr);                                                          \
    OCTET_CHECK(octet_st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt call ", #expr, " failed: ",             \
                ::octet::cuda::Lt().GetStatusName(octet_st_), " (",                                   \
                ::octet::cuda::Lt().GetStatusString(octet_st_), ")");                                 \
  } while (0)

namespace octet::cuda {

// NOTE [cuda sync check]: with OCTET_CUDA_SYNC_CHECK=1 in the environment,
// every kernel launch (OCTET_CUDA_LAUNCH_CHECK) and library call (cuBLASLt
// matmul, cuDNN execute) of the CUDA backend waits for the device and checks
// it, so an asynchronous fault (an illegal address, a trap) is blamed on the
// op that caused it, by its kernel's name, instead of on whichever later call
// happens to notice it. For debugging only: it serialises host and device.
// Work queued while the current stream is being captured into a CUDA graph is
// not checked (a synchronisation would invalidate the capture).
bool SyncCheckEnabled();
// Overrides the environment (tests).
void SetSyncCheckForTesting(bool on);
// Parses the variable's value: "" or "0" -> off, "1" -> on; anything else
// throws octet::Error naming the variable and the value.
bool ParseSyncCheck(std::string_view value);
// Waits for the current device and throws an octet::Error naming `what` if
// it reports an error.
void SyncCheck(std::string_view what);

}  // namespace octet::cuda

#define OCTET_CUDA_SYNC_CHECK_AFTER(what)                                   \
  do {                                                                      \
    if (::octet::cuda::SyncCheckEnabled()) ::octet::cuda::SyncCheck(what);  \
  } while (0)
