// How code and backends take part in graph capture (core/graph.h, NOTE
// [captured steps]). Private: not installed.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <octet/core/device.h>

namespace octet {
class Storage;
}

namespace octet::internal {

// Registers host effects of the work being captured on this thread:
// `before` runs before each Replay (e.g. writing the step's values into the
// device tensors the captured kernels read), `after` after each Replay's
// launch (e.g. counting the step). Either may be empty. Outside a capture it
// does nothing: the caller applies its effects itself.
void AtReplay(std::function<void()> before, std::function<void()> after);

// Throws octet::Error when this thread is capturing: `what` (e.g.
// "Tensor::Item") cannot be part of a graph, `why` says why.
void CheckNotCapturing(const char* what, const char* why);

// Called by Storage::BumpVersion during a capture (see NOTE [captured steps]).
void RecordCapturedVersionBump(Storage* storage);

// The device part of a capture (the CUDA backend registers it).
struct GraphBackend {
  // Starts capturing on the device's current stream; returns the backend's
  // state for this capture.
  void* (*begin)(int index) = nullptr;
  // Ends the capture and makes it launchable (throws when the capture was
  // invalidated; the state is then released).
  void (*end)(int index, void* state) = nullptr;
  // Ends a capture that failed on the host (must not throw) and releases it.
  void (*abort)(int index, void* state) = nullptr;
  void (*launch)(int index, void* state) = nullptr;
  // Releases a finished capture (must not throw).
  void (*destroy)(int index, void* state) = nullptr;
};
void RegisterGraphBackend(DeviceType type, GraphBackend backend);

// Runs the enclosed host code as if it were being captured and immediately
// replayed once, on any device: IsCapturing() is true, the rules above throw,
// AtReplay's `before` runs at once and `after` (and the recorded version
// bumps) when the scope ends. The CPU tests use it to run a captured step's
// host side where no CUDA graph exists (tests/core/graph_test.cc).
class CaptureEmulationForTesting {
 public:
  CaptureEmulationForTesting();
  ~CaptureEmulationForTesting();
  CaptureEmulationForTesting(const CaptureEmulationForTesting&) = delete;
  CaptureEmulationForTesting& operator=(const CaptureEmulationForTesting&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::internal
