#include <octet/distributed/process_group.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <vector>

#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/core/scaling.h>

namespace octet::dist {
namespace {

bool IsReducible(DType dt) {
  return dt == DType::kFloat32 || dt == DType::kBFloat16 || dt == DType::kFloat8E4M3 || dt == DType::kFloat8E5M2;
}

void CheckTensor(const char* op, const Tensor& t, const char* what) {
  OCTET_CHECK(t.defined(), "ProcessGroup::", op, ": ", what, " is undefined");
  OCTET_CHECK(t.device().is_cpu(), "ProcessGroup::", op, ": ", what, " is ", Describe(t),
              "; this group moves CPU tensors (use an NCCL group for CUDA tensors)");
  OCTET_CHECK(t.is_contiguous(), "ProcessGroup::", op, ": ", what, " ", Describe(t), " must be contiguous");
}

void CheckReducible(const char* op, const Tensor& t) {
  OCTET_CHECK(IsReducible(t.dtype()), "ProcessGroup::", op, ": cannot reduce ", Describe(t),
              "; reductions accept float32, bfloat16, fp8_e4m3 and fp8_e5m2");
}

float Fp8Max(DType dt) { return static_cast<float>(Info(dt).max_finite); }

// Widens n wire elements of dtype `dt` (f32, bf16 or fp8 bytes) to f32.
void DecodeToFloat(const uint8_t* src, DType dt, float scale_inv, float* dst, int64_t n) {
  switch (dt) {
    case DType::kFloat32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case DType::kBFloat16: Bf16ToFloatRow(reinterpret_cast<const uint16_t*>(src), dst, n); break;
    default: DequantizeRow(src, dt, scale_inv, dst, n); break;
  }
}

// The shared scale of an FP8 result whose (global) amax is `amax`.
float SharedScale(float amax, DType dt) { return ComputeScale(amax, Fp8Max(dt), 0, 1.0f, false); }

// Narrows n f32 values to wire dtype `dt` (fp8 with `scale`, saturating).
void EncodeFromFloat(const float* src, DType dt, float scale, uint8_t* dst, int64_t n) {
  switch (dt) {
    case DType::kFloat32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case DType::kBFloat16: FloatToBf16Row(src, reinterpret_cast<uint16_t*>(dst), n); break;
    default: QuantizeRow(src, scale, dt, Fp8Saturation::kSatFinite, dst, n); break;
  }
}

}  // namespace

const char* Name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

// ---- Work ---------------------------------------------------------------------

void Work::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::IsCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

// ---- ProcessGroup: queue ---------------------------------------------------------

ProcessGroup::ProcessGroup(int rank, int size) : rank_(rank), size_(size) {
  OCTET_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: rank ", rank, " is not in [0, ", size, ")");
  worker_ = std::thread([this] { WorkerLoop(); });
}

ProcessGroup::~ProcessGroup() { StopWorker(); }

void ProcessGroup::StopWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ProcessGroup::WorkerLoop() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

// NOTE [broken group]: a transport failure leaves the peers at different
// points of the collective sequence; nothing later can be matched up, so the
// group refuses every later collective with the first error instead of
// waiting for a timeout per call.
WorkPtr ProcessGroup::Enqueue(std::string what, std::function<void()> fn) {
  auto work = std::make_shared<Work>();
  auto job = [this, work, what = std::move(what), fn = std::move(fn)]() {
    std::exception_ptr error;
    std::string broken;
    {
      std::lock_guard<std::mutex> lock(mu_);
      broken = broken_;
    }
    if (!broken.empty()) {
      error = std::make_exception_ptr(Error(
          "ProcessGroup(" + backend() + ") rank " + std::to_string(rank_) + ": " + what +
          " not run: the group failed earlier: " + broken));
    } else {
      try {
        fn();
      } catch (const Error& e) {
        error = std::current_exception();
      } catch (const std::exception& e) {
        std::string why = DescribeFailure(e);
        // NOTE [lost rank]: local peers found gone are named before the
        // transport's own words, which may name only a survivor that exited
        // before this rank noticed the real loss.
        const std::string dead = DeadLocalPeers(why);
        if (!dead.empty()) why = dead + ": " + why;
        const std::string msg = "ProcessGroup(" + backend() + ") rank " + std::to_string(rank_) + "/" +
                                std::to_string(size_) + ": " + what + " failed: " + why;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (broken_.empty()) broken_ = msg;
        }
        error = std::make_exception_ptr(Error(msg));
      }
    }
    {
      std::lock_guard<std::mutex> lock(work->mu_);
      work->done_ = true;
      work->error_ = error;
    }
    work->cv_.notify_all();
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    OCTET_CHECK(!stop_, "ProcessGroup: ", what, " issued after shutdown");
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return work;
}

void ProcessGroup::SetLocalPeerPids(std::vector<int> pids) {
  std::lock_guard<std::mutex> lock(mu_);
  local_pids_ = std::move(pids);
}

namespace {
// True when process `pid` no longer runs: gone, or a zombie its parent has
// not reaped yet (a killed rank stays a zombie until its launcher waits).
bool ProcessGone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}
}  // namespace

// NOTE [lost rank] (distributed/gloo_group.cc): a transport names a socket
// address at best, and only the first socket it found closed. A peer whose
// socket closed is usually a process that died; on one machine its pid
// tells. When the transport named no rank, gives the dying process a moment
// to finish exiting (its sockets close before it is gone). When it named one,
// that rank may be a survivor that exited on its own after the real loss, so
// the gone local peers it did not name are listed too, without waiting.
std::string ProcessGroup::DeadLocalPeers(const std::string& transport_error) const {
  std::vector<int> pids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pids = local_pids_;
  }
  const bool named = transport_error.find("lost rank ") != std::string::npos;
  const int attempts = named ? 1 : 20;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    std::string out;
    for (int r = 0; r < static_cast<int>(pids.size()); ++r) {
      if (r == rank_ || pids[r] <= 0 || !ProcessGone(pids[r])) continue;
      if (named && transport_error.find("lost rank " + std::to_string(r) + " ") != std::string::npos) continue;
      out += (out.empty() ? "lost rank " : ", lost rank ") + std::to_string(r) + " (pid " + std::to_string(pids[r]) +
             " is gone)";
    }
    if (!out.empty()) return out;
    if (attempt + 1 < attempts) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return "";
}

CommCounters ProcessGroup::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void ProcessGroup::ResetCounters() {
  std::lock_guard<std::mutex> lock(mu_);
  counters_ = {};
}

void ProcessGroup::CountSent(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.bytes_sent += bytes;
}

// ---- public collectives -------------------------------------------------------------

WorkPtr ProcessGroup::AllReduce(const Tensor& tensor, ReduceOp op) {
  CheckTensor("AllReduce", tensor, "tensor");
  CheckReducible("AllReduce", tensor);
  return Enqueue(std::string("AllReduce(") + Name(op) + ", " + Describe(tensor) + ")",
                 [this, tensor, op] { RunAllReduce(tensor, op); });
}

WorkPtr ProcessGroup::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  CheckTensor("ReduceScatter", input, "input");
  CheckTensor("ReduceScatter", output, "output");
  CheckReducible("ReduceScatter", input);
  OCTET_CHECK(input.dtype() == output.dtype(), "ProcessGroup::ReduceScatter: input ", Describe(input), " and output ",
              Describe(output), " differ in dtype");
  OCTET_CHECK(input.numel() == output.numel() * size_, "ProcessGroup::ReduceScatter: input ", Describe(input),
              " must hold world size (", size_, ") x output ", Describe(output), " elements");
  return Enqueue(std::string("ReduceScatter(") + Name(op) + ", " + Describe(input) + ")",
                 [this, input, output, op] { RunReduceScatter(input, output, op); });
}

WorkPtr ProcessGroup::AllGather(const Tensor& input, const Tensor& output) {
  CheckTensor("AllGather", input, "input");
  CheckTensor("AllGather", output, "output");
  OCTET_CHECK(input.dtype() == output.dtype(), "ProcessGroup::AllGather: input ", Describe(input), " and output ",
              Describe(output), " differ in dtype");
  OCTET_CHECK(output.numel() == input.numel() * size_, "ProcessGroup::AllGather: output ", Describe(output),
              " must hold world size (", size_, ") x input ", Describe(input), " elements");
  return Enqueue("AllGather(" + Describe(input) + ")", [this, input, output] {
    const bool fp8 = IsFp8(input.dtype());
    if (fp8) {
      // One output tensor has one scale: every rank must have quantized with it.
      const float mine = ScaleInvValue(input);
      std::vector<float> all(size_);
      AllGatherBytes(&mine, all.data(), sizeof(float));
      CountSent(static_cast<int64_t>(size_ - 1) * 4);
      for (int r = 0; r < size_; ++r) {
        OCTET_CHECK(all[r] == mine, "ProcessGroup::AllGather of ", Name(input.dtype()), ": rank ", r,
                    " has scale_inv ", all[r], " but rank ", rank_, " has ", mine,
                    "; quantize with one shared scale before gathering");
      }
    }
    AllGatherBytes(input.raw_data(), output.raw_data(), input.nbytes());
    CountSent(static_cast<int64_t>(size_ - 1) * static_cast<int64_t>(input.nbytes()));
    if (fp8) output.impl()->set_scale_meta(input.scale_meta_ptr());
  });
}

WorkPtr ProcessGroup::Broadcast(const Tensor& tensor, int root) {
  CheckTensor("Broadcast", tensor, "tensor");
  OCTET_CHECK(root >= 0 && root < size_, "ProcessGroup::Broadcast: root ", root, " is not a rank of a group of ",
              size_);
  return Enqueue("Broadcast(" + Describe(tensor) + ", root " + std::to_string(root) + ")", [this, tensor, root] {
    BroadcastBytes(tensor.raw_data(), tensor.nbytes(), root);
    if (rank_ == root) CountSent(static_cast<int64_t>(size_ - 1) * static_cast<int64_t>(tensor.nbytes()));
    if (IsFp8(tensor.dtype())) {
      float meta[2] = {ScaleValue(tensor), 0.0f};
      if (tensor.scale_meta() != nullptr) meta[1] = static_cast<float>(tensor.scale_meta()->amax.Item());
      BroadcastBytes(meta, sizeof(meta), root);
      if (rank_ != root) tensor.impl()->set_scale_meta(MakePerTensorScale(meta[0], meta[1]));
    }
  });
}

WorkPtr ProcessGroup::AllToAll(const Tensor& input, const Tensor& output) {
  CheckTensor("AllToAll", input, "input");
  CheckTensor("AllToAll", output, "output");
  OCTET_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel(), "ProcessGroup::AllToAll: input ",
              Describe(input), " and output ", Describe(output), " must have the same dtype and size");
  OCTET_CHECK(input.numel() % size_ == 0, "ProcessGroup::AllToAll: ", Describe(input),
              " does not split into world size (", size_, ") equal slices");
  return Enqueue("AllToAll(" + Describe(input) + ")", [this, input, output] {
    if (IsFp8(input.dtype())) {
      const float mine = ScaleInvValue(input);
      std::vector<float> all(size_);
      AllGatherBytes(&mine, all.data(), sizeof(float));
      for (int r = 0; r < size_; ++r) {
        OCTET_CHECK(all[r] == mine, "ProcessGroup::AllToAll of ", Name(input.dtype()), ": rank ", r,
                    " has scale_inv ", all[r], " but rank ", rank_, " has ", mine,
                    "; quantize with one shared scale first");
      }
      output.impl()->set_scale_meta(input.scale_meta_ptr());
    }
    const size_t chunk = input.nbytes() / size_;
    AllToAllBytes(input.raw_data(), output.raw_data(), chunk);
    CountSent(static_cast<int64_t>(size_ - 1) * static_cast<int64_t>(chunk));
  });
}

WorkPtr ProcessGroup::Barrier() {
  return Enqueue("Barrier", [this] { BarrierNow(); });
}

// ---- reductions (worker thread) ---------------------------------------------------

void ProcessGroup::ReduceChunks(const float* chunks, int64_t n, ReduceOp op, float* out) const {
  std::memcpy(out, chunks, static_cast<size_t>(n) * sizeof(float));
  for (int s = 1; s < size_; ++s) {
    const float* c = chunks + static_cast<int64_t>(s) * n;
    switch (op) {
      case ReduceOp::kSum:
        for (int64_t i = 0; i < n; ++i) out[i] += c[i];
        break;
      case ReduceOp::kMax:
        for (int64_t i = 0; i < n; ++i) out[i] = (c[i] > out[i] || std::isnan(c[i])) ? c[i] : out[i];
        break;
      case ReduceOp::kMin:
        for (int64_t i = 0; i < n; ++i) out[i] = (c[i] < out[i] || std::isnan(c[i])) ? c[i] : out[i];
        break;
    }
  }
}

// NOTE [reduce in fp32] in the header. Rank r owns slice r of the padded
// tensor: it receives every rank's slice r (AllToAll), reduces it in f32 in
// rank order (so every rank computes bit-identical results whatever the
// transport's order), re-encodes it, and the slices are all-gathered back.
void ProcessGroup::RunAllReduce(const Tensor& t, ReduceOp op) {
  const DType dt = t.dtype();
  const bool fp8 = IsFp8(dt);
  const int64_t numel = t.numel();
  if (size_ == 1 || numel == 0) return;
  const int64_t esize = SizeOf(dt);
  const int64_t chunk = (numel + size_ - 1) / size_;  // elements per rank's slice
  const size_t chunk_bytes = static_cast<size_t>(chunk * esize);

  std::vector<uint8_t> send(chunk_bytes * size_, 0);  // zero bytes are 0.0 in every wire dtype
  std::memcpy(send.data(), t.raw_data(), t.nbytes());
  const std::vector<float> reduced = ReduceMyChunk(send.data(), dt, fp8 ? ScaleInvValue(t) : 1.0f, chunk, op);

  // This rank's valid elements (the padding past numel is not part of the amax).
  const int64_t valid = std::max<int64_t>(0, std::min<int64_t>(chunk, numel - rank_ * chunk));
  float scale = 1.0f, amax = 0.0f;
  if (fp8) {
    const float mine = AmaxRow(reduced.data(), valid);
    std::vector<float> amaxes(size_);
    AllGatherBytes(&mine, amaxes.data(), sizeof(float));
    CountSent(static_cast<int64_t>(size_ - 1) * 4);
    for (float a : amaxes) amax = (std::isnan(a) || a > amax) ? a : amax;
    scale = SharedScale(amax, dt);
  }
  std::vector<uint8_t> mine(chunk_bytes);
  EncodeFromFloat(reduced.data(), dt, scale, mine.data(), chunk);
  AllGatherBytes(mine.data(), send.data(), chunk_bytes);
  CountSent(static_cast<int64_t>(size_ - 1) * static_cast<int64_t>(chunk_bytes));
  std::memcpy(t.raw_data(), send.data(), t.nbytes());
  if (fp8) t.impl()->set_scale_meta(MakePerTensorScale(scale, amax));
}

std::vector<float> ProcessGroup::ReduceMyChunk(const void* send, DType dt, float scale_inv, int64_t chunk,
                                               ReduceOp op) {
  const size_t chunk_bytes = static_cast<size_t>(chunk * SizeOf(dt));
  std::vector<float> scale_invs(size_, 1.0f);
  if (IsFp8(dt)) {
    AllGatherBytes(&scale_inv, scale_invs.data(), sizeof(float));
    CountSent(static_cast<int64_t>(size_ - 1) * 4);
  }
  std::vector<uint8_t> recv(chunk_bytes * size_);
  AllToAllBytes(send, recv.data(), chunk_bytes);
  CountSent(static_cast<int64_t>(size_ - 1) * static_cast<int64_t>(chunk_bytes));
  std::vector<float> wide(static_cast<size_t>(chunk * size_));
  for (int s = 0; s < size_; ++s) {
    DecodeToFloat(recv.data() + s * chunk_bytes, dt, scale_invs[s], wide.data() + s * chunk, chunk);
  }
  std::vector<float> reduced(chunk);
  ReduceChunks(wide.data(), chunk, op, reduced.data());
  return reduced;
}

void ProcessGroup::RunReduceScatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  const DType dt = in.dtype();
  const bool fp8 = IsFp8(dt);
  const int64_t chunk = out.numel();
  const std::vector<float> reduced = ReduceMyChunk(in.raw_data(), dt, fp8 ? ScaleInvValue(in) : 1.0f, chunk, op);
  float scale = 1.0f, amax = 0.0f;
  if (fp8) {
    amax = AmaxRow(reduced.data(), chunk);
    scale = SharedScale(amax, dt);
  }
  EncodeFromFloat(reduced.data(), dt, scale, static_cast<uint8_t*>(out.raw_data()), chunk);
  if (fp8) out.impl()->set_scale_meta(MakePerTensorScale(scale, amax));
}

}  // namespace octet::dist
