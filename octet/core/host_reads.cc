#include <octet/core/host_reads.h>

#include <atomic>

#include <octet/core/graph_internal.h>

namespace octet {
namespace {
std::atomic<int64_t> g_host_reads{0};
}  // namespace

int64_t HostReadCount() { return g_host_reads.load(std::memory_order_relaxed); }

namespace internal {
void CountHostRead() {
  CheckNotCapturing("reading a tensor's values on the host (Item, At, ToDoubles, a copy to the CPU)",
                    "the value read at capture would not be the one a replay computes");
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace internal

}  // namespace octet
