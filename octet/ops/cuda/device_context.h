// CUDA devices, streams, library handles and workspaces (the per-device state
// of the CUDA backend). Host code only; include from files of the CUDA
// backend (ops/cuda/*, tests/cuda/*, tools/*), never from core headers.
//
// NOTE [cuda detection]: a device is "available" when cudaGetDeviceCount
// returns cudaSuccess with a count > 0. Without a driver it returns an error
// (cudaErrorInsufficientDriver / cudaErrorNoDevice) and leaves the count
// untouched; detection then reports 0 devices and never throws, so a CUDA
// build runs CPU-only on such a machine. The error is kept for messages
// (UnavailableReason).
//
// NOTE [cuda streams]: every device has one default stream, created lazily
// with cudaStreamNonBlocking, so octet's work never serialises with the
// legacy NULL stream (and octet never uses the NULL stream: every copy and
// memset is the *Async form on CurrentStream). A thread can make another
// stream current on a device with StreamGuard (e.g. a communication stream);
// memory allocated while it is current belongs to that stream (see NOTE
// [caching allocator] in core/caching_allocator.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <string>

namespace octet::cuda {

// Number of CUDA devices; 0 when cudaGetDeviceCount fails (no driver, no
// GPU). Computed once; never throws.
int DeviceCount();
// DeviceCount() > 0.
bool IsAvailable();
// Why no device is available ("" when one is): the error of
// cudaGetDeviceCount, e.g. "cudaErrorInsufficientDriver: CUDA driver version
// is insufficient for CUDA runtime version", or "no CUDA devices".
const std::string& UnavailableReason();

struct DeviceProps {
  int major = 0;  // compute capability
  int minor = 0;
  std::string name;
  size_t total_mem = 0;  // bytes
  int sm_count = 0;
};
// Properties of `device` (cached). Throws when the device does not exist.
const DeviceProps& Props(int device);

// Throws octet::Error naming `what` unless 0 <= device < DeviceCount().
void CheckDevice(int device, const char* what);

// The stream octet work for `device` is queued on by this thread: the one set
// by the innermost StreamGuard, else DefaultStream(device).
cudaStream_t CurrentStream(int device);
// The device's default stream (non-blocking, created on first use).
cudaStream_t DefaultStream(int device);

// Makes `stream` this thread's current stream on `device` for the guard's
// lifetime.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t prev_;
};

// Sets the CUDA current device for the guard's lifetime (restores the
// previous one on destruction).
class DeviceGuard {
 public:
  // Throws octet::Error when the device cannot be made current.
  explicit DeviceGuard(int device);
  // For must-not-throw paths (destructors, allocator backends, releasing a
  // captured graph): when the device cannot be made current it leaves the
  // current device as it is, and never throws.
  DeviceGuard(int device, std::nothrow_t);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// A cuBLASLt handle for (calling thread, device), created on first use and
// destroyed when the thread exits.
cublasLtHandle_t CublasLtHandle(int device);
// Scratch memory of at least `bytes` for GEMM/cuDNN calls queued on
// CurrentStream(device) by this thread: 256-byte aligned, grown on demand
// (never shrunk), from the caching allocator, so the old buffer is reused only
// by later work on the same stream. nullptr when bytes == 0 and nothing was
// allocated yet. The pointer stays valid until a larger request on the same
// (thread, device, stream).
void* Workspace(int device, size_t bytes);
inline constexpr size_t kWorkspaceAlignment = 256;

// A CUDA event without timing (cheap), for ordering streams.
class Event {
 public:
  Event();  // created lazily on first Record, on the current device
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // Records the event after the work queued so far on `stream`.
  void Record(cudaStream_t stream);
  // Makes `stream` wait (on the device) for the recorded work.
  void Block(cudaStream_t stream);
  // True when the recorded work has completed (or nothing was recorded).
  bool Query();
  void Synchronize();
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Makes `waiter` wait for the work queued so far on `producer`.
void StreamWaitStream(cudaStream_t waiter, cudaStream_t producer);
// Waits on the host for this thread's current stream on `device`.
void SynchronizeCurrentStream(int device);
// Waits on the host for all work queued on `device` (cudaDeviceSynchronize
// with that device current); an asynchronous error of earlier work is thrown
// as an octet::Error naming the device. octet::Synchronize(Device) calls it.
void SynchronizeDevice(int device);

// NOTE [current context]: makes `device`'s primary context current on the
// calling thread (and the device current). The runtime does this lazily for its own calls, but
// libraries that use the driver API (cuBLASLt, cuDNN, NCCL) find no context on
// a thread that has made no runtime call yet: cublasLtCreate then failed with
// CUDA_ERROR_INVALID_CONTEXT on an H100 (shared/gpu/H100-2026-11-23.md).
void MakeContextCurrent(int device);

}  // namespace octet::cuda
