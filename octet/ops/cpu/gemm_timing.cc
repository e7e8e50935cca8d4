// The counters of NOTE [cpu gemm timing] (ops/cpu_gemm_path.h).
#include <octet/ops/cpu/gemm_timing.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include <octet/ops/cpu_gemm_path.h>

namespace octet::cpu {

namespace {

std::atomic<bool> g_timing{false};
// Nanoseconds per part (GemmTimer::Part), calls, and flops.
std::atomic<int64_t> g_part_ns[3];
std::atomic<int64_t> g_calls{0};
std::atomic<double> g_flops{0.0};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

GemmTimer::GemmTimer(Part part, double flops)
    : part_(part), flops_(flops), start_ns_(g_timing.load(std::memory_order_relaxed) ? NowNs() : -1) {}

GemmTimer::~GemmTimer() {
  if (start_ns_ < 0) return;
  g_part_ns[part_].fetch_add(NowNs() - start_ns_, std::memory_order_relaxed);
  if (part_ != kCall) return;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_flops.fetch_add(flops_, std::memory_order_relaxed);
}

}  // namespace octet::cpu

namespace octet {

void SetCpuGemmTiming(bool on) { cpu::g_timing.store(on, std::memory_order_relaxed); }

CpuGemmTimes GetCpuGemmTimes() {
  auto sec = [](int part) { return 1e-9 * static_cast<double>(cpu::g_part_ns[part].load(std::memory_order_relaxed)); };
  CpuGemmTimes t;
  t.calls = cpu::g_calls.load(std::memory_order_relaxed);
  t.flops = cpu::g_flops.load(std::memory_order_relaxed);
  t.seconds = sec(cpu::GemmTimer::kCall);
  t.pack_seconds = sec(cpu::GemmTimer::kPack);
  t.execute_seconds = sec(cpu::GemmTimer::kExecute);
  return t;
}

void ResetCpuGemmTimes() {
  for (auto& ns : cpu::g_part_ns) ns.store(0, std::memory_order_relaxed);
  cpu::g_calls.store(0, std::memory_order_relaxed);
  cpu::g_flops.store(0.0, std::memory_order_relaxed);
}

}  // namespace octet
