#include <octet/ops/index_check.h>
#include <octet/ops/index_check_kernels.h>

#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include <octet/core/graph_internal.h>
#include <octet/ops/op_checks.h>

namespace octet {

OCTET_DEFINE_KERNEL(index_check_deferred, IndexCheckFn);

namespace {

std::atomic<bool> g_deferred{false};

// One error record per device (NOTE [deferred index checks]).
struct Records {
  std::mutex mu;
  std::map<std::pair<int, int>, Tensor> by_device;
};
Records& GetRecords() {
  static Records* r = new Records;
  return *r;
}

Tensor RecordFor(Device device) {
  Records& r = GetRecords();
  std::lock_guard<std::mutex> lock(r.mu);
  Tensor& t = r.by_device[{static_cast<int>(device.type), device.index}];
  if (!t.defined()) t = Zeros({4}, {.dtype = DType::kInt64, .device = device});
  return t;
}

const char* OpName(int64_t op) {
  switch (static_cast<IndexCheckOp>(op)) {
    case IndexCheckOp::kEmbedding: return "embedding";
    case IndexCheckOp::kCrossEntropy: return "cross_entropy";
    case IndexCheckOp::kNone: break;
  }
  return "an index check";
}

}  // namespace

void SetDeferredIndexChecks(bool on) { g_deferred.store(on, std::memory_order_relaxed); }
bool DeferredIndexChecks() { return g_deferred.load(std::memory_order_relaxed); }

void CheckIndexCheckCapturable() {
  internal::CheckNotCapturing("an immediate index check (Embedding, CrossEntropy)",
                              "it reads its result on the host; call octet::SetDeferredIndexChecks(true) before "
                              "capturing");
}

Tensor CheckIndicesDeferred(IndexCheckOp op, const Tensor& idx, int64_t bound, bool has_ignore, int64_t ignore,
                            int64_t replacement, Tensor* count) {
  CheckDefined("index_check", idx, "indices");
  CheckDtypeIn("index_check", idx, "indices", {DType::kInt64, DType::kInt32});
  OCTET_CHECK(idx.dim() == 1 && idx.is_contiguous(), "index_check: indices must be contiguous (N), got ",
              Describe(idx));
  Tensor sanitized = Empty(idx.shape(), {.dtype = idx.dtype(), .device = idx.device()});
  Tensor n_valid = Empty({1}, {.dtype = DType::kInt64, .device = idx.device()});
  index_check_deferred(idx.device())(idx, bound, has_ignore, ignore, replacement, static_cast<int64_t>(op),
                                     sanitized, n_valid, RecordFor(idx.device()));
  if (count != nullptr) *count = n_valid;
  return sanitized;
}

void ThrowIfDeferredIndexCheckFailed() {
  std::vector<Tensor> records;
  {
    Records& r = GetRecords();
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& [key, t] : r.by_device) records.push_back(t);
  }
  for (Tensor& t : records) {
    const std::vector<double> v = t.ToDoubles();  // the one host read (NOTE [host reads])
    if (v[0] == 0.0) continue;
    t.Fill_(0.0);
    OCTET_FAIL(OpName(static_cast<int64_t>(v[0])), ": index ", static_cast<int64_t>(v[2]), " at flat position ",
               static_cast<int64_t>(v[1]), " is out of range [0, ", static_cast<int64_t>(v[3]), ") (on ", t.device(),
               "; found by a deferred index check, NOTE [deferred index checks]: in a call since the previous "
               "check; the bad value was replaced so the step could finish)");
  }
}

}  // namespace octet
