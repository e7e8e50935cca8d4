#include <octet/distributed/ddp.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/core/scaling_math.h>

namespace octet::dist {

const char* Name(GradSync s) {
  switch (s) {
    case GradSync::kFp32: return "fp32";
    case GradSync::kBf16: return "bf16";
    case GradSync::kFp8E4M3: return "fp8_e4m3";
    case GradSync::kFp8E5M2: return "fp8_e5m2";
  }
  return "?";
}

bool ParseGradSync(const std::string& text, GradSync* out) {
  if (text == "fp32") *out = GradSync::kFp32;
  else if (text == "bf16") *out = GradSync::kBf16;
  else if (text == "fp8" || text == "fp8_e4m3") *out = GradSync::kFp8E4M3;
  else if (text == "fp8_e5m2") *out = GradSync::kFp8E5M2;
  else return false;
  return true;
}

struct DistributedDataParallel::State {
  ProcessGroup* pg = nullptr;
  DdpOptions options;
  NamedTensors params;
  std::vector<std::vector<int>> buckets;
  std::vector<int> bucket_of;               // param -> bucket
  std::vector<std::vector<float>> residual;  // per bucket (error feedback)

  // Main thread (hooks run there during backward).
  bool sync = true;
  std::vector<bool> ready;       // param's gradient final in this backward
  std::vector<int> pending;      // per bucket: gradients not final yet
  int next_launch = 0;           // buckets start in index order
  CommCounters start_counters;
  bool step_started = false;

  // Communication thread.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<int> queue;
  int in_flight = 0;
  bool stop = false;
  std::exception_ptr error;
  DdpStats running;  // accumulated by the comm thread
  DdpStats last;
  std::thread thread;

  void OnGradReady(int i);
  void Launch(int b);
  void Loop();
  void ReduceBucket(int b);
  void Fp8Reduce(int b, float* buf, int64_t n);
  void ResetStep();
};

void DistributedDataParallel::State::ResetStep() {
  std::fill(ready.begin(), ready.end(), false);
  for (size_t b = 0; b < buckets.size(); ++b) pending[b] = static_cast<int>(buckets[b].size());
  next_launch = 0;
  step_started = false;
}

void DistributedDataParallel::State::OnGradReady(int i) {
  if (!sync || ready[i]) return;
  if (!step_started) {
    step_started = true;
    start_counters = pg->counters();
    std::lock_guard<std::mutex> lock(mu);
    running = {};
  }
  ready[i] = true;
  --pending[bucket_of[i]];
  while (next_launch < static_cast<int>(buckets.size()) && pending[next_launch] == 0) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++running.launched_in_backward;
    }
    Launch(next_launch++);
  }
}

void DistributedDataParallel::State::Launch(int b) {
  {
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back(b);
    ++in_flight;
  }
  cv.notify_all();
}

void DistributedDataParallel::State::Loop() {
  while (true) {
    int b = -1;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      b = queue.front();
      queue.pop_front();
    }
    std::exception_ptr err;
    {
      std::lock_guard<std::mutex> lock(mu);
      err = error;
    }
    if (!err) {
      try {
        ReduceBucket(b);
      } catch (...) {
        err = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      if (err && !error) error = err;
      --in_flight;
    }
    cv.notify_all();
  }
}

// Gathers the bucket's gradients into one f32 buffer, reduces it to the mean
// over ranks in the configured format, and writes it back.
void DistributedDataParallel::State::ReduceBucket(int b) {
  const std::vector<int>& idx = buckets[b];
  int64_t n = 0;
  for (int i : idx) n += params[i].second.numel();
  std::vector<float> buf(static_cast<size_t>(n));
  int64_t off = 0;
  for (int i : idx) {
    const Tensor& p = params[i].second;
    Tensor g = p.grad();
    if (g.defined()) {
      OCTET_CHECK(g.dtype() == DType::kFloat32 && g.is_contiguous() && g.numel() == p.numel(),
                  "DistributedDataParallel: gradient of '", params[i].first, "' is ", Describe(g),
                  "; expected a contiguous float32 gradient of ", p.numel(), " elements");
      std::memcpy(buf.data() + off, g.raw_data(), static_cast<size_t>(p.numel()) * 4);
    } else {
      std::fill(buf.begin() + off, buf.begin() + off + p.numel(), 0.0f);
    }
    off += p.numel();
  }
  const float inv_n = 1.0f / static_cast<float>(pg->size());
  switch (options.grad_sync) {
    case GradSync::kFp32: {
      Tensor t = FromBlob(buf.data(), {n}, DType::kFloat32);
      pg->AllReduce(t)->Wait();
      for (float& v : buf) v *= inv_n;
      break;
    }
    case GradSync::kBf16: {
      Tensor t = Empty({n}, {.dtype = DType::kBFloat16});
      FloatToBf16Row(buf.data(), static_cast<uint16_t*>(t.raw_data()), n);
      pg->AllReduce(t)->Wait();
      Bf16ToFloatRow(static_cast<const uint16_t*>(t.raw_data()), buf.data(), n);
      for (float& v : buf) v *= inv_n;
      break;
    }
    default: Fp8Reduce(b, buf.data(), n); break;
  }
  off = 0;
  for (int i : idx) {
    const Tensor& p = params[i].second;
    Tensor g = p.grad();
    if (!g.defined()) {
      g = Zeros(p.shape());
      p.set_grad(g);
    }
    std::memcpy(g.raw_data(), buf.data() + off, static_cast<size_t>(p.numel()) * 4);
    off += p.numel();
  }
  std::lock_guard<std::mutex> lock(mu);
  running.elements += n;
  running.buckets += 1;
}

// NOTE [fp8 grad sync] in the header.
void DistributedDataParallel::State::Fp8Reduce(int b, float* buf, int64_t n) {
  const DType dt = options.grad_sync == GradSync::kFp8E4M3 ? DType::kFloat8E4M3 : DType::kFloat8E5M2;
  const float fp8_max = static_cast<float>(Info(dt).max_finite);
  const int world = pg->size(), rank = pg->rank();
  std::vector<float>& res = residual[b];
  if (options.error_feedback) {
    if (res.empty()) res.assign(static_cast<size_t>(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) buf[i] += res[i];
  }
  // 1-2: shared scale.
  Tensor amax = Full({1}, AmaxRow(buf, n));
  pg->AllReduce(amax, ReduceOp::kMax)->Wait();
  const float scale = ComputeScale(amax.data<float>()[0], fp8_max, 0, 1.0f, false);
  const float scale_inv = 1.0f / scale;
  // 3: quantize (padded to world·chunk; zero bytes are 0.0).
  const int64_t chunk = (n + world - 1) / world;
  Tensor q = Zeros({chunk * world}, {.dtype = DType::kUInt8});
  uint8_t* qb = q.data<uint8_t>();
  QuantizeRow(buf, scale, dt, Fp8Saturation::kSatFinite, qb, n);
  std::vector<float> deq(static_cast<size_t>(n));
  DequantizeRow(qb, dt, scale_inv, deq.data(), n);
  int64_t saturated = 0, flushed = 0;
  for (int64_t i = 0; i < n; ++i) {
    saturated += std::fabs(buf[i] * scale) > fp8_max;
    flushed += buf[i] != 0.0f && deq[i] == 0.0f;
  }
  if (options.error_feedback) {
    for (int64_t i = 0; i < n; ++i) res[i] = buf[i] - deq[i];
  }
  // 4-5: exchange slices, sum this rank's slice in f32 in rank order.
  Tensor recv = Empty({chunk * world}, {.dtype = DType::kUInt8});
  pg->AllToAll(q, recv)->Wait();
  std::vector<float> sum(static_cast<size_t>(chunk), 0.0f), part(static_cast<size_t>(chunk));
  for (int s = 0; s < world; ++s) {
    DequantizeRow(recv.data<uint8_t>() + s * chunk, dt, scale_inv, part.data(), chunk);
    for (int64_t i = 0; i < chunk; ++i) sum[i] += part[i];
  }
  // 6: re-quantize the sum with s/N: code·(1/s) is the mean.
  Tensor mine = Empty({chunk}, {.dtype = DType::kUInt8});
  QuantizeRow(sum.data(), scale / static_cast<float>(world), dt, Fp8Saturation::kSatFinite, mine.data<uint8_t>(),
              chunk);
  (void)rank;
  // 7: gather every slice; dequantize the mean.
  pg->AllGather(mine, q)->Wait();
  DequantizeRow(q.data<uint8_t>(), dt, scale_inv, buf, n);
  std::lock_guard<std::mutex> lock(mu);
  running.saturated += saturated;
  running.flushed += flushed;
}

DistributedDataParallel::DistributedDataParallel(ProcessGroup& pg, NamedTensors params, DdpOptions options)
    : state_(std::make_shared<State>()) {
  State& st = *state_;
  st.pg = &pg;
  st.options = options;
  st.params = std::move(params);
  OCTET_CHECK(options.bucket_bytes > 0, "DistributedDataParallel: bucket_bytes ", options.bucket_bytes,
              " must be positive");
  for (const auto& [name, p] : st.params) {
    OCTET_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "DistributedDataParallel: parameter '", name,
                "' is not a leaf tensor that requires grad");
    OCTET_CHECK(p.dtype() == DType::kFloat32 && p.is_contiguous() && p.device().is_cpu(),
                "DistributedDataParallel: parameter '", name, "' is ", Describe(p),
                "; the Gloo DDP takes contiguous float32 CPU parameters");
  }
  if (options.broadcast_parameters) {
    std::vector<WorkPtr> works;
    for (const auto& [name, p] : st.params) works.push_back(pg.Broadcast(p.detach(), 0));
    for (WorkPtr& w : works) w->Wait();
    for (const auto& [name, p] : st.params) p.storage()->BumpVersion();  // caches keyed by version re-read
  }
  // Buckets in reverse parameter order.
  const int np = static_cast<int>(st.params.size());
  st.bucket_of.assign(np, -1);
  int64_t bytes = 0;
  for (int i = np - 1; i >= 0; --i) {
    const int64_t pb = st.params[i].second.numel() * 4;
    if (st.buckets.empty() || (bytes > 0 && bytes + pb > options.bucket_bytes)) {
      st.buckets.emplace_back();
      bytes = 0;
    }
    st.buckets.back().push_back(i);
    st.bucket_of[i] = static_cast<int>(st.buckets.size()) - 1;
    bytes += pb;
  }
  st.residual.resize(st.buckets.size());
  st.ready.assign(np, false);
  st.pending.assign(st.buckets.size(), 0);
  st.ResetStep();
  std::weak_ptr<State> weak = state_;
  for (int i = 0; i < np; ++i) {
    st.params[i].second.RegisterPostAccumulateHook([weak, i](const Tensor&) {
      if (std::shared_ptr<State> s = weak.lock()) s->OnGradReady(i);
    });
  }
  st.thread = std::thread([s = state_.get()] { s->Loop(); });
}

DistributedDataParallel::~DistributedDataParallel() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

void DistributedDataParallel::set_sync(bool sync) { state_->sync = sync; }
bool DistributedDataParallel::sync() const { return state_->sync; }
const DdpStats& DistributedDataParallel::last_stats() const { return state_->last; }
std::vector<std::vector<int>> DistributedDataParallel::buckets() const { return state_->buckets; }
const DdpOptions& DistributedDataParallel::options() const { return state_->options; }

void DistributedDataParallel::FinishGradSync() {
  State& st = *state_;
  if (!st.sync) return;
  if (!st.step_started) {
    st.start_counters = st.pg->counters();
    std::lock_guard<std::mutex> lock(st.mu);
    st.running = {};
  }
  std::string unused;
  for (size_t i = 0; i < st.params.size(); ++i) {
    if (!st.ready[i]) unused += (unused.empty() ? "'" : ", '") + st.params[i].first + "'";
  }
  const bool refuse = !unused.empty() && !st.options.allow_unused;
  if (!refuse) {
    // Unused parameters count as zero gradients: start the buckets they held back.
    while (st.next_launch < static_cast<int>(st.buckets.size())) st.Launch(st.next_launch++);
  }
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(st.mu);
    st.cv.wait(lock, [&] { return st.in_flight == 0; });
    err = st.error;
    st.error = nullptr;
    st.last = st.running;
  }
  st.last.bytes_sent = st.pg->counters().bytes_sent - st.start_counters.bytes_sent;
  st.ResetStep();
  if (err) std::rethrow_exception(err);
  OCTET_CHECK(!refuse, "DistributedDataParallel: parameter", unused.find(',') == std::string::npos ? " " : "s ",
              unused, " got no gradient in the synchronised backward; every rank must produce every gradient "
              "(or construct with allow_unused = true to count it as zero)");
}

}  // namespace octet::dist
