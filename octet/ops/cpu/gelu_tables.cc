// bf16 GELU by table lookups: NOTE [bf16 gelu tables] in ops/cpu_gelu_path.h.
#include <octet/ops/cpu/gelu_tables.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <absl/strings/str_format.h>

#include <octet/core/convert.h>
#include <octet/core/env.h>
#include <octet/core/error.h>
#include <octet/core/log.h>
#include <octet/ops/cpu/isa.h>
#include <octet/ops/cpu/pointwise_runs.h>
#include <octet/ops/cpu_gelu_path.h>
#include <octet/ops/cpu_gelu_path_testing.h>

#if OCTET_CPU_AVX512_BUILD
#include <immintrin.h>
#endif

namespace octet {
namespace cpu {
namespace {

constexpr int64_t kCodes = 65536;
// Values a chunk: the lookups, the multiply and the narrowing each take one
// chunk at a time through L1.
constexpr int64_t kChunk = 512;

struct Tables {
  std::vector<float> gelu, grad;
};

// Filled by the f32 kernels themselves (the same functor and ISA build as
// the computed bf16 kernels), so a lookup returns the computed bits.
const Tables& GetTables() {
  static const Tables tables = [] {
    std::vector<float> x(kCodes), ones(kCodes, 1.0f);
    for (int64_t i = 0; i < kCodes; ++i) x[i] = Bf16BitsToFloat(static_cast<uint16_t>(i));
    Tables t{std::vector<float>(kCodes), std::vector<float>(kCodes)};
    GeluF32Run(x.data(), t.gelu.data(), kCodes);
    // 1 * gelu'(x) is gelu'(x): the kernel's one multiply by dy is exact for dy = 1.
    GeluGradF32Run(ones.data(), x.data(), t.grad.data(), kCodes);
    return t;
  }();
  return tables;
}

void LookupBase(const float* table, const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = table[x[i]];
}

#if OCTET_CPU_AVX512_BUILD
// The masked forms with zero sources: the unmasked intrinsics' undefined
// sources trip GCC 12's -Wmaybe-uninitialized here.
OCTET_AVX512_TARGET void LookupAvx512(const float* table, const uint16_t* x, float* out, int64_t n) {
  const __m512 zero = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16));
    const __m512i i0 = _mm512_maskz_cvtepu16_epi32(0xFFFF, c0), i1 = _mm512_maskz_cvtepu16_epi32(0xFFFF, c1);
    _mm512_storeu_ps(out + i, _mm512_mask_i32gather_ps(zero, 0xFFFF, i0, table, 4));
    _mm512_storeu_ps(out + i + 16, _mm512_mask_i32gather_ps(zero, 0xFFFF, i1, table, 4));
  }
  for (; i < n; ++i) out[i] = table[x[i]];
}
#endif

OCTET_INLINE void MulWidenedBody(const bfloat16* a, const float* g, float* res, int64_t n) {
  for (int64_t i = 0; i < n; ++i) res[i] = Bf16BitsToFloat(a[i].bits) * g[i];
}

// ---- the choice -----------------------------------------------------------------------

// 16 Ki bf16 codes spread like activations (about normal, sd 1.5): the sum
// of four uniforms from a fixed xorshift sequence.
std::vector<bfloat16> ProbeInputs() {
  std::vector<bfloat16> v(16384);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  const auto uniform = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  };
  for (bfloat16& b : v) {
    const float z = (uniform() + uniform() + uniform() + uniform() - 2.0f) * 2.6f;
    b.bits = FloatToBf16Bits(z);
  }
  return v;
}

// Best of kRounds single-thread times, ns a value, of a bf16 run by table
// and computed (interleaved: a burst of load elsewhere hits both alike).
template <typename Table, typename Compute>
void TimeBoth(Table&& table_run, Compute&& compute_run, int64_t n, double* table_ns, double* compute_ns) {
  constexpr int kRounds = 7, kReps = 4;
  GetTables();  // built before timing
  const auto time = [&](auto&& run) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kReps; ++r) run();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(kReps * n);
  };
  time(table_run);  // warm: the table's lines for these codes, the code itself
  time(compute_run);
  *table_ns = *compute_ns = INFINITY;
  for (int r = 0; r < kRounds; ++r) {
    *table_ns = std::min(*table_ns, time(table_run));
    *compute_ns = std::min(*compute_ns, time(compute_run));
  }
}

// The path of one direction: forced, or the faster of the two times.
CpuGeluPath Choose(std::optional<CpuGeluPath> forced, double table_ns, double compute_ns, std::string* reason) {
  if (forced) {
    *reason = std::string("OCTET_CPU_GELU=") + Name(*forced);
    return *forced;
  }
  const bool table = table_ns < compute_ns;
  *reason = absl::StrFormat("measured: table %.3f %s compute %.3f ns a value", table_ns, table ? "<" : ">=", compute_ns);
  return table ? CpuGeluPath::kTable : CpuGeluPath::kCompute;
}

CpuGeluPathInfo Decide() {
  const char* env = std::getenv("OCTET_CPU_GELU");
  const std::optional<CpuGeluPath> forced = internal::ParseCpuGeluPath(env == nullptr ? "" : env);
  ::octet::internal::CheckEnvSwitches();  // NOTE [every switch checked at every read]
  const std::vector<bfloat16> x = ProbeInputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<bfloat16> dy(x.rbegin(), x.rend()), y(x.size());
  CpuGeluPathInfo info;
  TimeBoth([&] { GeluTableRun(x.data(), y.data(), n); }, [&] { GeluBf16ComputeRun(x.data(), y.data(), n); }, n,
           &info.table_ns, &info.compute_ns);
  TimeBoth([&] { GeluGradTableRun(dy.data(), x.data(), y.data(), n); },
           [&] { GeluGradBf16ComputeRun(dy.data(), x.data(), y.data(), n); }, n, &info.backward_table_ns,
           &info.backward_compute_ns);
  info.path = Choose(forced, info.table_ns, info.compute_ns, &info.reason);
  info.backward_path = Choose(forced, info.backward_table_ns, info.backward_compute_ns, &info.backward_reason);
  return info;
}

std::mutex g_mu;
std::optional<CpuGeluPathInfo> g_info;  // guarded by g_mu
// Once decided, bit 0 the forward's path and bit 1 the backward's (1:
// table), else -1: read without the lock.
std::atomic<int> g_paths{-1};

int PathBits(const CpuGeluPathInfo& info) {
  return (info.path == CpuGeluPath::kTable ? 1 : 0) | (info.backward_path == CpuGeluPath::kTable ? 2 : 0);
}

int DecidedPathBits() {
  const int p = g_paths.load(std::memory_order_acquire);
  return p >= 0 ? p : PathBits(GetCpuGeluPath());
}

}  // namespace

bool UseGeluTables() { return (DecidedPathBits() & 1) != 0; }
bool UseGeluGradTables() { return (DecidedPathBits() & 2) != 0; }

const float* GeluTable() { return GetTables().gelu.data(); }

void LookupBf16Codes(const float* table, const uint16_t* x, float* out, int64_t n) {
#if OCTET_CPU_AVX512_BUILD
  if (UseAvx512Kernels()) return LookupAvx512(table, x, out, n);
#endif
  LookupBase(table, x, out, n);
}

void GeluTableRun(const bfloat16* x, bfloat16* o, int64_t n) {
  const float* table = GeluTable();
  alignas(64) float res[kChunk];
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t m = std::min(kChunk, n - c0);
    LookupBf16Codes(table, reinterpret_cast<const uint16_t*>(x + c0), res, m);
    FloatToBf16Row(res, reinterpret_cast<uint16_t*>(o + c0), m);
  }
}

void GeluGradTableRun(const bfloat16* dy, const bfloat16* x, bfloat16* o, int64_t n) {
  const float* table = GetTables().grad.data();
  const auto mul = IsaBuild<&MulWidenedBody>();
  alignas(64) float g[kChunk], res[kChunk];
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t m = std::min(kChunk, n - c0);
    LookupBf16Codes(table, reinterpret_cast<const uint16_t*>(x + c0), g, m);
    mul(dy + c0, g, res, m);
    FloatToBf16Row(res, reinterpret_cast<uint16_t*>(o + c0), m);
  }
}

}  // namespace cpu

const char* Name(CpuGeluPath path) { return path == CpuGeluPath::kTable ? "table" : "compute"; }

CpuGeluPathInfo GetCpuGeluPath() {
  CpuGeluPathInfo info;
  {
    std::lock_guard<std::mutex> lock(cpu::g_mu);
    if (cpu::g_info) return *cpu::g_info;
    cpu::g_info = cpu::Decide();  // throws (caching nothing) on a bad OCTET_CPU_GELU
    cpu::g_paths.store(cpu::PathBits(*cpu::g_info), std::memory_order_release);
    info = *cpu::g_info;
  }
  OCTET_LOG(kDebug, "CPU bf16 GELU: forward ", Name(info.path), " (", info.reason, "), backward ",
            Name(info.backward_path), " (", info.backward_reason, ")");
  return info;
}

namespace internal {

std::optional<CpuGeluPath> ParseCpuGeluPath(const std::string& value) {
  switch (::octet::internal::ParseEnvSwitch("OCTET_CPU_GELU", value.c_str())) {  // auto, table, compute
    case 1: return CpuGeluPath::kTable;
    case 2: return CpuGeluPath::kCompute;
    default: return std::nullopt;
  }
}

void SetCpuGeluPathForTesting(std::optional<CpuGeluPath> path) {
  std::lock_guard<std::mutex> lock(cpu::g_mu);
  if (!path) {
    cpu::g_info.reset();
    cpu::g_paths.store(-1, std::memory_order_release);
    return;
  }
  CpuGeluPathInfo info;
  info.path = info.backward_path = *path;
  info.reason = info.backward_reason = "set for testing";
  cpu::g_info = info;
  cpu::g_paths.store(cpu::PathBits(info), std::memory_order_release);
}

}  // namespace internal
}  // namespace octet
