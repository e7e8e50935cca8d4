#include <octet/ops/cuda/cudnn_handle.h>

#include <vector>

#include <octet/ops/cuda/device_context.h>

namespace octet::cuda {
namespace {

struct CudnnHandles {
  std::vector<cudnnHandle_t> handles = std::vector<cudnnHandle_t>(DeviceCount(), nullptr);
  ~CudnnHandles() {
    // Errors are ignored: this runs at thread (or process) exit;
    // cudnnDestroy rejects null handles.
    for (cudnnHandle_t h : handles)
      if (h != nullptr) (void)cudnnDestroy(h);
  }
};

}  // namespace

cudnnHandle_t CudnnHandle(int device) {
  CheckDevice(device, "cuda::CudnnHandle");
  thread_local CudnnHandles tls;
  cudnnHandle_t& h = tls.handles[device];
  if (h == nullptr) {
    DeviceGuard guard(device);
    MakeContextCurrent(device);
    cudnnHandle_t created = nullptr;
    OCTET_CUDNN_CHECK(cudnnCreate(&created));
    h = created;
  }
  OCTET_CUDNN_CHECK(cudnnSetStream(h, CurrentStream(device)));
  return h;
}

}  // namespace octet::cuda
