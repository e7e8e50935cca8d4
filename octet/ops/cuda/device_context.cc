#include <octet/ops/cuda/device_context.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include <octet/core/device.h>
#include <octet/core/device_control.h>
#include <octet/core/device_control_internal.h>
#include <octet/core/env.h>
#include <octet/core/error.h>
#include <octet/ops/cuda/cublaslt_api.h>
#include <octet/ops/cuda/cuda_allocator.h>
#include <octet/ops/cuda/cuda_check.h>

namespace octet::cuda {
namespace {

struct Detection {
  int count = 0;
  std::string reason;
};

const Detection& Detect() {
  // See NOTE [cuda detection]: only the return code is trusted.
  static const Detection detection = [] {
    Detection d;
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      d.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      (void)cudaGetLastError();  // clear it so later checks don't report it
      return d;
    }
    if (n <= 0) {
      d.reason = "no CUDA devices";
      return d;
    }
    d.count = n;
    return d;
  }();
  return detection;
}

// Process-wide state of one device, created once.
struct DeviceState {
  std::once_flag props_once;
  DeviceProps props;
  std::once_flag stream_once;
  cudaStream_t default_stream = nullptr;
};

DeviceState& State(int device) {
  // Never destroyed: kernels and frees may run during static destruction.
  static std::vector<DeviceState>* states = new std::vector<DeviceState>(DeviceCount());
  return (*states)[device];
}

// Per-thread state: current-stream overrides and library handles, indexed by
// device.
struct ThreadState {
  std::vector<cudaStream_t> streams;
  std::vector<cublasLtHandle_t> cublaslt;
  struct WorkspaceEntry {
    int device;
    cudaStream_t stream;
    void* ptr;
    size_t bytes;
  };
  std::vector<WorkspaceEntry> workspaces;

  ThreadState()
      : streams(DeviceCount(), nullptr), cublaslt(DeviceCount(), nullptr) {}
  ~ThreadState() {
    // Errors are ignored: this runs at thread (or process) exit. The destroy
    // functions reject null handles, hence the guards.
    for (cublasLtHandle_t h : cublaslt)
      if (h != nullptr) (void)Lt().Destroy(h);
    for (const WorkspaceEntry& w : workspaces) {
      try {
        ReleaseWorkspace(w.device, w.ptr);
      } catch (...) {
      }
    }
  }
  static void ReleaseWorkspace(int device, void* ptr) { DeviceAllocator(device).Free(ptr); }
};

ThreadState& Tls() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

int DeviceCount() { return Detect().count; }
bool IsAvailable() { return DeviceCount() > 0; }
const std::string& UnavailableReason() { return Detect().reason; }

namespace {

// octet::StreamGuard (core/device.h): what cuda::StreamGuard does, as a hook.
void* ExchangeStream(int device, void* stream) {
  CheckDevice(device, "octet::StreamGuard");
  cudaStream_t& slot = Tls().streams[device];
  void* prev = slot;
  slot = static_cast<cudaStream_t>(stream);
  return prev;
}

octet::MemoryStats PublicMemoryStats(int device) {
  const CachingAllocatorStats c = DeviceAllocator(device).Stats();
  octet::MemoryStats s;
  s.allocated_bytes = static_cast<int64_t>(c.allocated_bytes);
  s.reserved_bytes = static_cast<int64_t>(c.reserved_bytes);
  s.cached_bytes = static_cast<int64_t>(c.cached_bytes);
  s.peak_allocated_bytes = static_cast<int64_t>(c.peak_allocated_bytes);
  s.num_allocs = static_cast<int64_t>(c.num_allocs);
  s.num_frees = static_cast<int64_t>(c.num_frees);
  return s;
}

// Lets core code (ParseDevice users, train_gpt --device) ask about CUDA devices.
const bool kRegistered = (RegisterDeviceBackend(DeviceType::kCUDA,
                                                {.count = &DeviceCount,
                                                 .unavailable_reason = [] { return UnavailableReason(); },
                                                 .synchronize = &SynchronizeDevice,
                                                 .native_stream = [](int device) -> void* {
                                                   return CurrentStream(device);
                                                 }}),
                          true);
// octet::StreamGuard, GetMemoryStats, ... (core/device_control.h).
const bool kControlRegistered =
    (octet::internal::RegisterDeviceControl(
         DeviceType::kCUDA,
         {.exchange_stream = &ExchangeStream,
          .memory_stats = &PublicMemoryStats,
          .reset_peak_memory_stats = [](int device) { DeviceAllocator(device).ResetPeakStats(); },
          .empty_cache = [](int device) { DeviceAllocator(device).EmptyCache(); }}),
     true);
}  // namespace

void SynchronizeDevice(int device) {
  CheckDevice(device, "octet::Synchronize");
  DeviceGuard guard(device);
  const cudaError_t err = cudaDeviceSynchronize();
  OCTET_CHECK(err == cudaSuccess, "octet::Synchronize(cuda:", device, "): the device reported ", cudaGetErrorName(err),
              " (", cudaGetErrorString(err), ") from work queued earlier; run with OCTET_CUDA_SYNC_CHECK=1 to find "
              "the kernel that caused it");
}

void MakeContextCurrent(int device) {
  CheckDevice(device, "cuda::MakeContextCurrent");
  // cudaSetDevice initialises the primary context and makes it current
  // (CUDA >= 12), even when the device is already the current one.
  OCTET_CUDA_CHECK(cudaSetDevice(device));
}

void CheckDevice(int device, const char* what) {
  const int n = DeviceCount();
  if (n == 0) OCTET_FAIL(what, ": cuda:", device, " is not available: no CUDA device (", UnavailableReason(), ")");
  OCTET_CHECK(device >= 0 && device < n, what, ": cuda:", device, " does not exist (this machine has ", n,
              " CUDA device", n == 1 ? "" : "s", ")");
}

const DeviceProps& Props(int device) {
  CheckDevice(device, "cuda::Props");
  DeviceState& s = State(device);
  std::call_once(s.props_once, [&] {
    cudaDeviceProp p{};
    OCTET_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    s.props.major = p.major;
    s.props.minor = p.minor;
    s.props.name = p.name;
    s.props.total_mem = p.totalGlobalMem;
    s.props.sm_count = p.multiProcessorCount;
  });
  return s.props;
}

cudaStream_t DefaultStream(int device) {
  CheckDevice(device, "cuda::DefaultStream");
  DeviceState& s = State(device);
  std::call_once(s.stream_once, [&] {
    DeviceGuard guard(device);
    cudaStream_t stream = nullptr;
    OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    s.default_stream = stream;  // lives as long as the process
  });
  return s.default_stream;
}

cudaStream_t CurrentStream(int device) {
  CheckDevice(device, "cuda::CurrentStream");
  cudaStream_t s = Tls().streams[device];
  return s != nullptr ? s : DefaultStream(device);
}

StreamGuard::StreamGuard(int device, cudaStream_t stream) : device_(device) {
  CheckDevice(device, "cuda::StreamGuard");
  prev_ = Tls().streams[device];
  Tls().streams[device] = stream;
}

StreamGuard::~StreamGuard() { Tls().streams[device_] = prev_; }

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  OCTET_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    OCTET_CUDA_CHECK(cudaSetDevice(device));
    prev_ = current;
  }
}

DeviceGuard::DeviceGuard(int device, std::nothrow_t) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != device && cudaSetDevice(device) == cudaSuccess)
    prev_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) (void)cudaSetDevice(prev_);
}

cublasLtHandle_t CublasLtHandle(int device) {
  CheckDevice(device, "cuda::CublasLtHandle");
  cublasLtHandle_t& h = Tls().cublaslt[device];
  if (h == nullptr) {
    DeviceGuard guard(device);
    MakeContextCurrent(device);
    cublasLtHandle_t created = nullptr;
    OCTET_CUBLAS_CHECK(Lt().Create(&created));
    h = created;
  }
  return h;
}

void* Workspace(int device, size_t bytes) {
  CheckDevice(device, "cuda::Workspace");
  const cudaStream_t stream = CurrentStream(device);
  auto& list = Tls().workspaces;
  ThreadState::WorkspaceEntry* entry = nullptr;
  for (auto& w : list)
    if (w.device == device && w.stream == stream) entry = &w;
  if (entry == nullptr) {
    list.push_back({device, stream, nullptr, 0});
    entry = &list.back();
  }
  if (bytes > entry->bytes) {
    // Round up to whole KiB so slightly different requests don't each grow it.
    const size_t want = (bytes + 1023) / 1024 * 1024;
    void* p = DeviceAllocator(device).Allocate(want, reinterpret_cast<uintptr_t>(stream));
    OCTET_CHECK(reinterpret_cast<uintptr_t>(p) % kWorkspaceAlignment == 0, "cuda::Workspace: allocation ", p,
                " is not ", kWorkspaceAlignment, "-byte aligned");
    // Stream-ordered free: the old buffer is reused only by later work on `stream`.
    if (entry->ptr != nullptr) DeviceAllocator(device).Free(entry->ptr);
    entry->ptr = p;
    entry->bytes = want;
  }
  return entry->ptr;
}

Event::Event() = default;

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

void Event::Record(cudaStream_t stream) {
  if (event_ == nullptr) OCTET_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  OCTET_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::Block(cudaStream_t stream) {
  if (event_ == nullptr) return;
  OCTET_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

bool Event::Query() {
  if (event_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  OCTET_CUDA_CHECK(err);
  return true;
}

void Event::Synchronize() {
  if (event_ != nullptr) OCTET_CUDA_CHECK(cudaEventSynchronize(event_));
}

void StreamWaitStream(cudaStream_t waiter, cudaStream_t producer) {
  if (waiter == producer) return;
  Event e;
  e.Record(producer);
  e.Block(waiter);
  // Destroying a recorded event is fine: its resources go once it completes.
}

void SynchronizeCurrentStream(int device) {
  DeviceGuard guard(device);
  OCTET_CUDA_CHECK(cudaStreamSynchronize(CurrentStream(device)));
}

}  // namespace octet::cuda

// ---- NOTE [cuda sync check] ----
namespace octet::cuda {
namespace {
// -1: not read from the environment yet.
std::atomic<int> g_sync_check{-1};
}  // namespace

bool ParseSyncCheck(std::string_view value) {
  return ::octet::internal::ParseEnvSwitch("OCTET_CUDA_SYNC_CHECK", std::string(value).c_str()) == 1;
}

bool SyncCheckEnabled() {
  int on = g_sync_check.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* env = std::getenv("OCTET_CUDA_SYNC_CHECK");
    on = ParseSyncCheck(env != nullptr ? env : "") ? 1 : 0;
    g_sync_check.store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

void SetSyncCheckForTesting(bool on) { g_sync_check.store(on ? 1 : 0, std::memory_order_relaxed); }

void SyncCheck(std::string_view what) {
  int device = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&device));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  OCTET_CUDA_CHECK(cudaStreamIsCapturing(CurrentStream(device), &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  const cudaError_t err = cudaDeviceSynchronize();
  OCTET_CHECK(err == cudaSuccess, "OCTET_CUDA_SYNC_CHECK: cuda:", device, " failed in or before ", what, ": ",
              cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

}  // namespace octet::cuda
