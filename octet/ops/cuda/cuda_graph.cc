// The CUDA side of octet::Graph (core/graph.h, NOTE [captured steps]): stream
// capture on this thread's current stream into a graph, allocations routed
// to a private pool of the caching allocator meanwhile (NOTE [graph pools] in
// core/caching_allocator.h), then an executable graph launched on the current
// stream at each replay.
//
// Capture mode: cudaStreamCaptureModeThreadLocal, so a call that cannot be
// part of a graph (a host synchronisation, a blocking copy) made by this
// thread invalidates the capture and is reported, while other threads'
// unrelated CUDA work is not disturbed. The allocator's cudaMalloc switches
// to relaxed mode for itself (ops/cuda/cuda_allocator.cc).
#include <cuda_runtime_api.h>

#include <octet/core/caching_allocator.h>
#include <octet/core/error.h>
#include <octet/core/graph_internal.h>
#include <octet/ops/cuda/cuda_allocator.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>

namespace octet::cuda {
namespace {

using StreamId = CachingAllocatorBackend::StreamId;

struct CaptureState {
  cudaStream_t stream = nullptr;  // the capturing stream
  CachingAllocator::PoolId pool = 0;
  bool pool_open = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

StreamId ToId(cudaStream_t s) { return reinterpret_cast<StreamId>(s); }

// Releases what `s` holds; must not throw.
void Release(int index, CaptureState* s) {
  if (s->exec != nullptr) (void)cudaGraphExecDestroy(s->exec);
  if (s->graph != nullptr) (void)cudaGraphDestroy(s->graph);
  try {
    CachingAllocator& alloc = DeviceAllocator(index);
    if (s->pool_open) alloc.EndPool(ToId(s->stream));
    if (s->pool != 0) alloc.ReleasePool(s->pool);
  } catch (...) {
    // The pool's memory stays cached; nothing else to do in a must-not-throw path.
  }
  delete s;
}

void* Begin(int index) {
  CheckDevice(index, "octet::Graph::Capture");
  DeviceGuard guard(index);
  auto* s = new CaptureState;
  s->stream = CurrentStream(index);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t query = cudaStreamIsCapturing(s->stream, &status);
  if (query != cudaSuccess || status != cudaStreamCaptureStatusNone) {
    delete s;
    OCTET_CUDA_CHECK(query);
    OCTET_FAIL("octet::Graph::Capture: the current stream of cuda:", index, " is already being captured");
  }
  s->pool = DeviceAllocator(index).BeginPool(ToId(s->stream));
  s->pool_open = true;
  const cudaError_t err = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    Release(index, s);
    OCTET_CUDA_CHECK(err);
  }
  return s;
}

void End(int index, void* state) {
  auto* s = static_cast<CaptureState*>(state);
  DeviceGuard guard(index);
  const cudaError_t err = cudaStreamEndCapture(s->stream, &s->graph);
  DeviceAllocator(index).EndPool(ToId(s->stream));
  s->pool_open = false;
  if (err != cudaSuccess || s->graph == nullptr) {
    (void)cudaGetLastError();
    Release(index, s);
    OCTET_FAIL("octet::Graph::Capture on cuda:", index, ": CUDA invalidated the capture (cudaStreamEndCapture: ",
               cudaGetErrorName(err), ", ", cudaGetErrorString(err),
               "): the captured work made a call a graph cannot hold, e.g. a host synchronisation, a blocking copy "
               "or work on another stream that was not joined back (see NOTE "
               "[captured steps] in core/graph.h)");
  }
  const cudaError_t inst = cudaGraphInstantiateWithFlags(&s->exec, s->graph, 0);
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    Release(index, s);
    OCTET_FAIL("octet::Graph::Capture on cuda:", index, ": cudaGraphInstantiateWithFlags failed: ",
               cudaGetErrorName(inst), " (", cudaGetErrorString(inst), ")");
  }
  // Uploading now keeps the first replay as cheap as the others.
  const cudaError_t up = cudaGraphUpload(s->exec, s->stream);
  if (up != cudaSuccess) {
    (void)cudaGetLastError();
    Release(index, s);
    OCTET_FAIL("octet::Graph::Capture on cuda:", index, ": cudaGraphUpload failed: ", cudaGetErrorName(up), " (",
               cudaGetErrorString(up), ")");
  }
}

void Abort(int index, void* state) {
  auto* s = static_cast<CaptureState*>(state);
  DeviceGuard guard(index, std::nothrow);
  cudaGraph_t partial = nullptr;
  (void)cudaStreamEndCapture(s->stream, &partial);
  if (partial != nullptr) (void)cudaGraphDestroy(partial);
  (void)cudaGetLastError();
  Release(index, s);
}

void Launch(int index, void* state) {
  auto* s = static_cast<CaptureState*>(state);
  DeviceGuard guard(index);
  OCTET_CUDA_CHECK(cudaGraphLaunch(s->exec, CurrentStream(index)));
}

void Destroy(int index, void* state) {
  DeviceGuard guard(index, std::nothrow);
  Release(index, static_cast<CaptureState*>(state));
}

[[maybe_unused]] const bool kRegistered = [] {
  internal::RegisterGraphBackend(DeviceType::kCUDA, {.begin = Begin,
                                                     .end = End,
                                                     .abort = Abort,
                                                     .launch = Launch,
                                                     .destroy = Destroy});
  return true;
}();

}  // namespace
}  // namespace octet::cuda
