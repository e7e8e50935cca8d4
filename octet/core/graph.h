// Graph: a captured sequence of device work (a whole training step) that is
// replayed without the host code that queued it: one launch instead of
// hundreds, no per-kernel host cost. On a CUDA device it is a CUDA graph
// (cudaStreamBeginCapture on this thread's current stream, then
// cudaGraphLaunch); the CPU runs its work on the host as it is queued, so
// it has nothing to capture and Capture throws there.
//
//   octet::Graph step;
//   step.Capture(CUDA(0), [&] { model.ZeroGrad(); model.Loss(x, y).Backward(); opt.Step(); fp8.Update(); });
//   for (...) {
//     x.CopyFrom_(next_inputs);       // static inputs: same tensors, new values
//     opt.set_lr(schedule.LrAt(opt.step_count()));
//     step.Replay();                  // the captured step runs; nothing is read back
//   }
//
// NOTE [captured steps]: Capture records, Replay executes: the captured
// function's kernels first run at the first Replay. What that means:
//  - Every value that changes from step to step must live in a device tensor
//    at a fixed address (the inputs above, the learning rate: AdamW reads lr
//    and its bias corrections from a device tensor when captured). A host
//    scalar passed to an op inside Capture is frozen into the graph.
//  - Host work inside the captured function runs once, at capture. Host
//    effects that must follow every executed step are registered by the
//    code that makes them with internal::AtReplay (graph_internal.h):
//    AdamW writes its lr/bias corrections before each Replay and counts the
//    step after it, and every storage whose version was bumped during the
//    capture is bumped again after each Replay, so caches keyed on versions
//    (the FP8 weight casts, nn/fp8_linear.h) see the replayed updates.
//  - Inside Capture these throw octet::Error naming the call, because their
//    result could not change at replay: reading a tensor on the host (Item,
//    At, ToDoubles, a copy to the CPU; NOTE [host reads]), a tensor made from
//    host values (FromVector, Arange, a copy from the CPU), drawing random
//    numbers (their Philox offset is a host counter), dropout with p > 0.
//  - Memory: allocations made during the capture come from a pool private to
//    the graph (NOTE [graph pools] in core/caching_allocator.h), so eager
//    work between replays never reuses memory the graph writes. Tensors made
//    inside Capture (a loss, the gradients) stay valid and hold each
//    replay's values; the pool returns to the device cache when the Graph is
//    destroyed and those tensors are gone.
//  - Capture needs the work it captures warmed up (one eager step first):
//    library handles, cuDNN plans, the FP8 state's buffers and the first
//    scales are made then, not inside the capture.
//  - One capture at a time per thread. A failure inside Capture (an
//    exception, or CUDA refusing a call that a graph cannot hold) ends the
//    capture, releases its pool and throws; the Graph stays empty.
#pragma once

#include <functional>
#include <memory>

#include <octet/core/device.h>

namespace octet {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Captures the device work `fn` queues on `device` (this thread's current
  // stream). Throws octet::Error when the graph already holds a capture,
  // when the device is not a CUDA device (or does not exist), or when the
  // capture fails (see NOTE [captured steps]).
  void Capture(Device device, const std::function<void()>& fn);
  // Runs the captured work once on the device's current stream (host hooks
  // before and after; no host synchronisation). Throws when nothing was
  // captured.
  void Replay();

  bool captured() const;
  Device device() const;
  // Replays so far.
  int64_t replays() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True while this thread is inside Graph::Capture.
bool IsCapturing();

}  // namespace octet
