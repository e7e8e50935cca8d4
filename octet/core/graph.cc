#include <octet/core/graph.h>

#include <utility>
#include <vector>

#include <octet/core/error.h>
#include <octet/core/graph_internal.h>
#include <octet/core/storage.h>

namespace octet {
namespace {

// What a capture collects on the host (NOTE [captured steps]).
struct HostEffects {
  std::vector<std::function<void()>> before, after;
  std::vector<std::weak_ptr<Storage>> bumped;

  void RunBefore() const {
    for (const auto& f : before) f();
  }
  void RunAfter() const {
    for (const auto& f : after) f();
    for (const auto& w : bumped)
      if (std::shared_ptr<Storage> s = w.lock()) s->BumpVersionUnrecorded();
  }
};

// The capture under way on this thread (null when none); `emulated` for
// CaptureEmulationForTesting.
struct ActiveCapture {
  HostEffects* effects = nullptr;
  bool emulated = false;
};
thread_local ActiveCapture t_capture;

// Clears this thread's capture for its lifetime (host work that belongs to a
// replay, not to the capture), then restores it.
class SuspendCapture {
 public:
  SuspendCapture() : saved_(t_capture) { t_capture = {}; }
  ~SuspendCapture() { t_capture = saved_; }
  SuspendCapture(const SuspendCapture&) = delete;
  SuspendCapture& operator=(const SuspendCapture&) = delete;

 private:
  ActiveCapture saved_;
};

// The CPU's entry: its ops run on the calling thread as they are queued.
void* CpuBegin(int) {
  OCTET_FAIL("octet::Graph::Capture: the CPU runs its work on the host as it is queued, so there is nothing to "
             "capture; graphs need a CUDA device");
}

internal::GraphBackend& Backend(DeviceType type) {
  static internal::GraphBackend* backends = [] {  // never destroyed: graphs may be released at exit
    auto* b = new internal::GraphBackend[kNumDeviceTypes];
    b[static_cast<int>(DeviceType::kCPU)].begin = CpuBegin;
    return b;
  }();
  return backends[static_cast<int>(type)];
}

}  // namespace

namespace internal {

void RegisterGraphBackend(DeviceType type, GraphBackend backend) { Backend(type) = backend; }

void AtReplay(std::function<void()> before, std::function<void()> after) {
  HostEffects* e = t_capture.effects;
  if (e == nullptr) return;
  if (t_capture.emulated) {
    if (before) {  // the emulated replay follows at once; its host work is not captured
      SuspendCapture replay;
      before();
    }
  } else if (before) {
    e->before.push_back(std::move(before));
  }
  if (after) e->after.push_back(std::move(after));
}

void CheckNotCapturing(const char* what, const char* why) {
  if (t_capture.effects == nullptr) return;
  OCTET_FAIL(what, " inside a captured graph (octet::Graph::Capture): ", why,
             " (NOTE [captured steps] in core/graph.h)");
}

void RecordCapturedVersionBump(Storage* storage) {
  HostEffects* e = t_capture.effects;
  if (e == nullptr) return;
  std::weak_ptr<Storage> w = storage->weak_from_this();
  if (!w.expired()) e->bumped.push_back(std::move(w));
}

struct CaptureEmulationForTesting::Impl {
  HostEffects effects;
  ActiveCapture saved;
};

CaptureEmulationForTesting::CaptureEmulationForTesting() : impl_(std::make_unique<Impl>()) {
  OCTET_CHECK(t_capture.effects == nullptr, "CaptureEmulationForTesting: a capture is already under way");
  impl_->saved = t_capture;
  t_capture = {&impl_->effects, /*emulated=*/true};
}

CaptureEmulationForTesting::~CaptureEmulationForTesting() {
  t_capture = impl_->saved;
  try {
    impl_->effects.RunAfter();
  } catch (...) {
    // A destructor must not throw; the hooks (counting a step) do not.
  }
}

}  // namespace internal

struct Graph::Impl {
  Device device;
  void* state = nullptr;  // the backend's, once captured
  HostEffects effects;
  int64_t replays = 0;

  ~Impl() {
    if (state != nullptr) Backend(device.type).destroy(device.index, state);
  }
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

void Graph::Capture(Device device, const std::function<void()>& fn) {
  OCTET_CHECK(impl_ != nullptr, "octet::Graph: used after being moved from");
  OCTET_CHECK(impl_->state == nullptr, "octet::Graph::Capture: this graph already holds a capture on ",
              impl_->device, "; make a new Graph for another one");
  OCTET_CHECK(t_capture.effects == nullptr,
              "octet::Graph::Capture: this thread is already capturing (captures do not nest)");
  CheckDeviceExists(device, "octet::Graph::Capture");
  const internal::GraphBackend& backend = Backend(device.type);
  OCTET_CHECK(backend.begin != nullptr, "octet::Graph::Capture: ", device, " has no graph support in this build");
  HostEffects effects;
  void* state = backend.begin(device.index);
  t_capture = {&effects, /*emulated=*/false};
  try {
    fn();
  } catch (...) {
    t_capture = {};
    backend.abort(device.index, state);
    throw;
  }
  t_capture = {};
  backend.end(device.index, state);  // throws (and releases) when CUDA invalidated the capture
  impl_->device = device;
  impl_->state = state;
  impl_->effects = std::move(effects);
}

void Graph::Replay() {
  OCTET_CHECK(impl_ != nullptr && impl_->state != nullptr, "octet::Graph::Replay: nothing was captured");
  OCTET_CHECK(t_capture.effects == nullptr, "octet::Graph::Replay: called inside a capture");
  impl_->effects.RunBefore();
  Backend(impl_->device.type).launch(impl_->device.index, impl_->state);
  ++impl_->replays;
  impl_->effects.RunAfter();
}

bool Graph::captured() const { return impl_ != nullptr && impl_->state != nullptr; }
Device Graph::device() const { return impl_ ? impl_->device : Device(); }
int64_t Graph::replays() const { return impl_ ? impl_->replays : 0; }

bool IsCapturing() { return t_capture.effects != nullptr; }

}  // namespace octet
