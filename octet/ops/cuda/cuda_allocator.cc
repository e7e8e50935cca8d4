// CachingAllocator over the CUDA runtime, and the CUDA copy function. See
// NOTE [caching allocator] (core/caching_allocator.h) and NOTE [cuda streams]
// (ops/cuda/device_context.h).
#include <octet/ops/cuda/cuda_allocator.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <octet/core/allocator.h>
#include <octet/core/error.h>
#include <octet/core/graph_internal.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>

namespace octet::cuda {
namespace {

using StreamId = CachingAllocatorBackend::StreamId;
using EventId = CachingAllocatorBackend::EventId;

StreamId ToId(cudaStream_t s) { return reinterpret_cast<StreamId>(s); }
cudaStream_t ToStream(StreamId id) { return reinterpret_cast<cudaStream_t>(id); }

class CudaBackend final : public CachingAllocatorBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  void* RawAlloc(size_t nbytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    // NOTE [graph pools]: a pool's segments are allocated during a capture;
    // cudaMalloc is not stream work, so it is allowed there in relaxed mode
    // (the capture neither records nor needs it).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    OCTET_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t err = cudaMalloc(&p, nbytes);
    OCTET_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it
      return nullptr;
    }
    OCTET_CUDA_CHECK(err);
    return p;
  }

  void RawFree(void* ptr, size_t) override {
    DeviceGuard guard(device_, std::nothrow);
    (void)cudaFree(ptr);  // cudaFree waits for work still using the block
  }

  EventId RecordEvent(StreamId stream) override {
    DeviceGuard guard(device_, std::nothrow);
    cudaEvent_t ev = nullptr;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventRecord(ev, ToStream(stream)) == cudaSuccess) {
      return reinterpret_cast<EventId>(ev);
    }
    // Could not record (e.g. during process teardown): wait instead.
    if (ev != nullptr) (void)cudaEventDestroy(ev);
    (void)cudaStreamSynchronize(ToStream(stream));
    (void)cudaGetLastError();
    return kNoEvent;
  }

  bool EventCompleted(EventId event) override {
    const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    OCTET_CUDA_CHECK(err);
    return true;
  }

  void DestroyEvent(EventId event) override { (void)cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)); }

  void Synchronize() override {
    DeviceGuard guard(device_);
    OCTET_CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::string MemoryReport() override {
    DeviceGuard guard(device_, std::nothrow);
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return "";
    }
    return "cuda:" + std::to_string(device_) + " has " + FormatBytes(free_bytes) + " free of " +
           FormatBytes(total) + " (memory not reserved by octet is held by other allocations or processes)";
  }

 private:
  int device_;
};

struct PerDevice {
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<CachingAllocator> allocator;
};

std::vector<PerDevice>& Devices() {
  // Leaked on purpose: tensors freed during static destruction still find it.
  static std::vector<PerDevice>* devices = [] {
    auto* v = new std::vector<PerDevice>(DeviceCount());
    for (int d = 0; d < DeviceCount(); ++d) {
      (*v)[d].backend = std::make_unique<CudaBackend>(d);
      (*v)[d].allocator = std::make_unique<CachingAllocator>(
          (*v)[d].backend.get(), CachingAllocator::Options{.device_name = "cuda:" + std::to_string(d)});
    }
    return v;
  }();
  return *devices;
}

class CudaAllocator final : public Allocator {
 public:
  void* Allocate(size_t nbytes, Device device) override {
    if (nbytes == 0) return nullptr;
    return DeviceAllocator(device.index).Allocate(nbytes, ToId(CurrentStream(device.index)));
  }
  void Free(void* ptr, size_t, Device device) override {
    if (ptr != nullptr) DeviceAllocator(device.index).Free(ptr);
  }
};

// Waits on the host when `p` is page-locked host memory: the caller may reuse
// it as soon as the copy returns. Pageable memory is staged by CUDA before
// cudaMemcpyAsync returns, so it needs no wait.
bool IsPinnedHost(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

void CudaCopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (src_device.is_cpu() && dst_device.is_cpu()) {
    OCTET_FAIL("CUDA copy called for a cpu -> cpu copy");
  }
  if (src_device.is_cpu() || dst_device.is_cpu()) {
    internal::CheckNotCapturing(
        src_device.is_cpu() ? "a copy from the CPU to the device" : "a copy from the device to the CPU",
        "the host side of the copy would be read or written only at capture");
  }
  if (src_device.is_cpu()) {  // host -> device
    CheckDevice(dst_device.index, "copy cpu -> cuda");
    DeviceGuard guard(dst_device.index);
    const cudaStream_t stream = CurrentStream(dst_device.index);
    OCTET_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
    if (IsPinnedHost(src)) OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  if (dst_device.is_cpu()) {  // device -> host: the data must be there on return
    CheckDevice(src_device.index, "copy cuda -> cpu");
    DeviceGuard guard(src_device.index);
    const cudaStream_t stream = CurrentStream(src_device.index);
    OCTET_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  CheckDevice(src_device.index, "copy cuda -> cuda");
  CheckDevice(dst_device.index, "copy cuda -> cuda");
  if (src_device.index == dst_device.index) {
    DeviceGuard guard(src_device.index);
    OCTET_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, CurrentStream(src_device.index)));
    return;
  }
  // Between devices, on the source's stream, ordered after the destination
  // stream's earlier work (earlier users of dst's memory) and before its
  // later work (readers of the copy). No host wait.
  const cudaStream_t src_stream = CurrentStream(src_device.index);
  const cudaStream_t dst_stream = CurrentStream(dst_device.index);
  {
    DeviceGuard guard(dst_device.index);
    Event dst_ready;
    dst_ready.Record(dst_stream);
    dst_ready.Block(src_stream);
  }
  DeviceGuard guard(src_device.index);
  OCTET_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, src_stream));
  Event copied;
  copied.Record(src_stream);
  copied.Block(dst_stream);
}

[[maybe_unused]] const bool kRegistered = [] {
  static CudaAllocator* allocator = new CudaAllocator();  // leaked: outlives static destruction
  RegisterAllocator(DeviceType::kCUDA, allocator);
  RegisterCopyBytes(DeviceType::kCUDA, &CudaCopyBytes);
  return true;
}();

}  // namespace

CachingAllocator& DeviceAllocator(int device) {
  CheckDevice(device, "CUDA allocator");
  return *Devices()[device].allocator;
}

void RecordStream(const Tensor& t, cudaStream_t stream) {
  OCTET_CHECK(t.defined() && t.device().is_cuda(), "RecordStream: needs a CUDA tensor, got ", Describe(t));
  DeviceAllocator(t.device().index).RecordStream(t.storage()->data(), ToId(stream));
}

void EmptyCache() {
  for (int d = 0; d < DeviceCount(); ++d) DeviceAllocator(d).EmptyCache();
}

CachingAllocatorStats MemoryStats(int device) { return DeviceAllocator(device).Stats(); }

}  // namespace octet::cuda
