// cuDNN's status check and per-thread handles (only in builds with cuDNN:
// OCTET_CUDNN). Host code of the CUDA backend.
#pragma once

#include <cudnn.h>

#include <octet/core/error.h>

#define OCTET_CUDNN_CHECK(expr)                                                                        \
  do {                                                                                                 \
    const cudnnStatus_t octet_st_ = (expr);                                                            \
    if (octet_st_ != CUDNN_STATUS_SUCCESS) {                                                           \
      char octet_msg_[512] = {0};                                                                      \
      cudnnGetLastErrorString(octet_msg_, sizeof(octet_msg_));                                         \
      OCTET_FAIL("cuDNN call ", #expr, " failed: ", cudnnGetErrorString(octet_st_), " (", octet_msg_, ")"); \
    }                                                                                                  \
  } while (0)

namespace octet::cuda {

// A cuDNN handle for (calling thread, device), created on first use (with the
// device's primary context current, NOTE [current context] in
// ops/cuda/device_context.h); its stream is set to CurrentStream(device) on
// every call. Destroyed when the thread exits.
cudnnHandle_t CudnnHandle(int device);

}  // namespace octet::cuda
