#include <octet/core/host_reads.h>

#include <atomic>

namespace octet {
namespace {
std::atomic<int64_t> g_host_reads{0};
}  // namespace

int64_t HostReadCount() { return g_host_reads.load(std::memory_order_relaxed); }

namespace internal {
void CountHostRead() { g_host_reads.fetch_add(1, std::memory_order_relaxed); }
}  // namespace internal

}  // namespace octet
