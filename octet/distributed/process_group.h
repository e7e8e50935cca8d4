// dist::ProcessGroup: collectives over the ranks of one job (DESIGN.md §6).
//
//   auto pg = dist::InitProcessGroup();            // distributed/init.h
//   if (!pg.ok()) { ... (*pg)->... }
//   pg->AllReduce(grad, dist::ReduceOp::kSum)->Wait();
//
// Every collective is asynchronous: it is queued on the group's worker thread
// (one per group, so every rank runs its collectives in the order it issued
// them) and returns a Work whose Wait() blocks until it finished and throws
// octet::Error when it failed. Tensors must stay alive and untouched until
// Wait() returns. Every collective has a timeout (Options::timeout); a peer
// that died or stopped answering becomes an octet::Error on every rank that
// was talking to it, naming the lost rank where the transport tells which it
// was. After a failure the group is broken: later collectives fail at once
// with the first error (NOTE [broken group]).
//
// Dtypes: f32, bf16, fp8_e4m3 and fp8_e5m2 for reductions; any dtype for the
// data-movement collectives (AllGather, Broadcast, AllToAll), which copy
// bytes. NOTE [reduce in fp32]: every reduction adds in FP32 and rounds once:
//   - bf16 travels as bf16 bytes, is widened to f32 on arrival, summed in
//     rank order, rounded to bf16 once;
//   - FP8 tensors carry a per-tensor scale (core/scaling.h ScaleMeta) that
//     differs between ranks: the FP8 bytes travel with each sender's
//     scale_inv, are dequantized on arrival, summed in f32 (FP8 bytes are
//     never added), and the result is re-quantized with a scale shared by
//     every rank (current scaling from the MAX-reduced amax of the result:
//     scale = fp8_max / amax), which replaces the tensor's ScaleMeta.
// AllReduce is the reduce-scatter + all-gather form built from AllToAll and
// AllGather, so each rank sends 2·(N-1)/N of the tensor's bytes (plus one
// float per rank for FP8 scales): FP8 sends a quarter of what f32 does.
//
// Shapes: AllReduce, Broadcast: any contiguous tensor, in place.
// ReduceScatter(input, output): input holds N·output.numel() elements;
// rank r gets the reduction of every rank's r-th slice. AllGather(input,
// output): output holds N·input.numel() elements, rank r's input at slice r.
// AllToAll(input, output): both N·k elements; output slice s of rank r is
// rank s's input slice r. ReduceScatter/AllGather/AllToAll of FP8 tensors:
// AllGather and AllToAll keep each rank's bytes and (AllGather) require the
// same scale on every rank — checked — since one output tensor has one scale.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <octet/core/tensor.h>

namespace octet::dist {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
const char* Name(ReduceOp op);

// The handle of one queued collective.
class Work {
 public:
  // Blocks until the collective finished; throws octet::Error if it failed.
  void Wait();
  bool IsCompleted();

 private:
  friend class ProcessGroup;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

using WorkPtr = std::shared_ptr<Work>;

// Bytes this rank sent, summed over collectives (logical: what the algorithm
// needs to send, not counting transport headers).
struct CommCounters {
  int64_t bytes_sent = 0;
  int64_t collectives = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;

  // The default implementations take CPU tensors and run on the byte
  // primitives below; a device backend (NcclProcessGroup) overrides them.
  virtual WorkPtr AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  virtual WorkPtr ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::kSum);
  virtual WorkPtr AllGather(const Tensor& input, const Tensor& output);
  virtual WorkPtr Broadcast(const Tensor& tensor, int root);
  virtual WorkPtr AllToAll(const Tensor& input, const Tensor& output);
  virtual WorkPtr Barrier();

  // Counters since construction (or the last ResetCounters). Read them after
  // Wait(): the worker thread updates them.
  CommCounters counters() const;
  void ResetCounters();

  // Process ids of the ranks on this machine (0 for ranks elsewhere, or
  // unknown): when a transport error does not say which peer was lost, the
  // group looks for a local rank whose process is gone (NOTE [lost rank]).
  void SetLocalPeerPids(std::vector<int> pids);

 protected:
  ProcessGroup(int rank, int size);
  // Stops the worker thread after the queued collectives ran. Subclasses
  // call it first in their destructor (their transport must outlive it).
  void StopWorker();

  // Synchronous byte primitives on host memory, run on the worker thread
  // only. They throw on failure (any std::exception; the group wraps it).
  //   AllToAllBytes: in, out: (size·chunk) bytes; out chunk s = rank s's in chunk rank.
  //   AllGatherBytes: in: chunk bytes; out: (size·chunk), rank r's at chunk r.
  //   BroadcastBytes: buf: n bytes, root's copied to all.
  virtual void AllToAllBytes(const void* in, void* out, size_t chunk) = 0;
  virtual void AllGatherBytes(const void* in, void* out, size_t chunk) = 0;
  virtual void BroadcastBytes(void* buf, size_t n, int root) = 0;
  virtual void BarrierNow() = 0;
  // Rewrites a transport error so it names the lost rank when known.
  virtual std::string DescribeFailure(const std::exception& e) { return e.what(); }

  // Queues `fn` on the worker thread (NOTE [broken group] applies).
  WorkPtr Enqueue(std::string what, std::function<void()> fn);
  void CountSent(int64_t bytes);

 private:
  void WorkerLoop();
  // The collectives themselves (worker thread).
  void RunAllReduce(const Tensor& t, ReduceOp op);
  void RunReduceScatter(const Tensor& in, const Tensor& out, ReduceOp op);
  // The first half of both: every rank sends chunk s of `send` (size chunks of
  // `chunk` elements of `dt`; FP8 with this rank's `scale_inv`) to rank s and
  // reduces the chunks it receives in FP32, in rank order.
  std::vector<float> ReduceMyChunk(const void* send, DType dt, float scale_inv, int64_t chunk, ReduceOp op);
  // Reduces rank-ordered f32 chunks (size·n floats) into out (n floats).
  void ReduceChunks(const float* chunks, int64_t n, ReduceOp op, float* out) const;
  // "lost rank R (pid P is gone), ..." for the local peers that are gone and
  // that `transport_error` does not already name as lost; "" if none.
  std::string DeadLocalPeers(const std::string& transport_error) const;

  int rank_;
  int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::string broken_;  // NOTE [broken group]: the first failure, empty while healthy
  CommCounters counters_;
  std::vector<int> local_pids_;
  std::thread worker_;
};

}  // namespace octet::dist
