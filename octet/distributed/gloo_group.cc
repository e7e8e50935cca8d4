#include <octet/distributed/gloo_group.h>

#include <absl/strings/str_cat.h>
#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/pair.h>

#include <signal.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace octet::dist {
namespace {

// Gloo's rendezvous::Store on top of an octet Store, under a key prefix.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(dist::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  // The octet Store throws octet::Error (a std::runtime_error) on failure.
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.Set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.Get(prefix_ + key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    store_.Wait(full, std::min(timeout, timeout_));
  }

 private:
  dist::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// NOTE [lost rank]: Gloo reports a dead peer as an IoException naming the
// peer's socket address ("Connection closed by peer [127.0.0.1]:41234"), not
// its rank: the listening address of the peer's pair with this rank. After
// connecting, every rank publishes the local address of each of its pairs
// (transport::Pair::address()); rank r's pair with rank q is what q's
// messages call r, so the group can map an address in an error back to a rank.
std::string PairAddresses(gloo::Context& ctx, int rank, int size) {
  std::string out;
  for (int r = 0; r < size; ++r) {
    if (r != rank) out += ctx.getPair(r)->address().str();
    out += '\n';
  }
  return out;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n') {
      lines.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return lines;
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(int rank, int size, std::shared_ptr<gloo::rendezvous::Context> ctx,
                   std::shared_ptr<gloo::transport::Device> device, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size), ctx_(std::move(ctx)), device_(std::move(device)), timeout_(timeout) {
    peers_.resize(size);
  }
  // Peer addresses as seen from this rank (NOTE [lost rank]); best effort.
  void SetPeers(std::vector<std::string> peers) { peers_ = std::move(peers); }
  ~GlooProcessGroup() override { StopWorker(); }

  std::string backend() const override { return "gloo"; }

 protected:
  void AllToAllBytes(const void* in, void* out, size_t chunk) override {
    if (chunk == 0) return;
    if (size() == 1) {
      std::memcpy(out, in, chunk);
      return;
    }
    gloo::AlltoallOptions opts(ctx_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), chunk * size());
    opts.setOutput(static_cast<uint8_t*>(out), chunk * size());
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::alltoall(opts);
  }
  void AllGatherBytes(const void* in, void* out, size_t chunk) override {
    if (chunk == 0) return;
    if (size() == 1) {
      std::memcpy(out, in, chunk);
      return;
    }
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), chunk);
    opts.setOutput(static_cast<uint8_t*>(out), chunk * size());
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  }
  void BroadcastBytes(void* buf, size_t n, int root) override {
    if (n == 0 || size() == 1) return;
    gloo::BroadcastOptions opts(ctx_);
    opts.setOutput(static_cast<uint8_t*>(buf), n);
    opts.setRoot(root);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  }
  void BarrierNow() override {
    if (size() == 1) return;
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  }
  std::string DescribeFailure(const std::exception& e) override {
    const std::string what = e.what();
    for (int r = 0; r < size(); ++r) {
      if (!peers_[r].empty() && what.find(peers_[r]) != std::string::npos) {
        return absl::StrCat("lost rank ", r, " (", peers_[r], "): ", what);
      }
    }
    if (what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos) {
      return absl::StrCat("no answer within ", timeout_.count(), " ms (a peer is dead or stuck): ", what);
    }
    return what;
  }

 private:
  uint32_t NextTag() { return tag_++; }

  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> peers_;  // rank -> "[ip]:port" of its pair
  uint32_t tag_ = 1;                // worker thread only
};

// NOTE [dead peer SIGPIPE]: a rank that writes to the socket of a peer that
// has died gets SIGPIPE, whose default action kills the process silently
// (seen in CI: GlooFailure.KilledRankIsNamedOnEveryOtherRank, a surviving
// rank ended by signal 13 instead of reporting the lost rank). With SIGPIPE
// ignored the write fails with EPIPE, Gloo throws, and the collective
// reports the lost rank (NOTE [lost rank]). Only the default disposition is
// changed: an application's own handler is left alone.
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  (void)sigaction(SIGPIPE, &ignore, nullptr);
}

}  // namespace

std::unique_ptr<ProcessGroup> CreateGlooProcessGroup(Store* store, int rank, int size, const GlooOptions& options) {
  OCTET_CHECK(size >= 1 && rank >= 0 && rank < size, "Gloo group: rank ", rank, " is not in [0, ", size, ")");
  OCTET_CHECK(options.timeout.count() > 0, "Gloo group: timeout ", options.timeout.count(), " ms");
  if (size == 1) return std::unique_ptr<ProcessGroup>(new GlooProcessGroup(0, 1, nullptr, nullptr, options.timeout));
  OCTET_CHECK(store != nullptr, "Gloo group: no store for a group of more than one rank");
  IgnoreSigpipeUnlessHandled();
  std::string failure;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(options.timeout);
    GlooStoreAdapter adapter(*store, options.prefix + "/gloo/", options.timeout);
    ctx->connectFullMesh(adapter, device);
    auto group = std::make_unique<GlooProcessGroup>(rank, size, ctx, device, options.timeout);
    adapter.set(absl::StrCat("pairs/", rank), [&] {
      const std::string a = PairAddresses(*ctx, rank, size);
      return std::vector<char>(a.begin(), a.end());
    }());
    std::vector<std::string> peers(size);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      const std::vector<char> v = adapter.get(absl::StrCat("pairs/", r));
      const std::vector<std::string> lines = SplitLines(std::string(v.begin(), v.end()));
      if (static_cast<int>(lines.size()) == size) peers[r] = lines[rank];
    }
    group->SetPeers(std::move(peers));
    return std::unique_ptr<ProcessGroup>(std::move(group));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  OCTET_FAIL("Gloo group: rank ", rank, " of ", size, " could not connect to its peers: ", failure);
}

}  // namespace octet::dist
