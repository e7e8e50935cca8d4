// The choice of NOTE [CPU GEMM path] (ops/cpu_gemm_path.h): two
// micro-benchmarks of the instructions themselves, on the calling thread.
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <atomic>
#include <mutex>

#include <octet/core/convert.h>
#include <octet/core/env.h>
#include <octet/core/error.h>
#include <octet/core/log.h>
#include <octet/ops/cpu/amx_gemm.h>
#include <octet/ops/cpu/amx_tiles.h>
#include <octet/ops/cpu/dnnl_gemm.h>

namespace octet {
namespace {

// Independent FMA chains per measurement: enough to cover every core's FMA
// latency times its FMA ports (Zen 3/4 and Skylake 4 x 2, Haswell 5 x 2),
// and few enough to stay in registers with the two constants: AVX-512 has 32
// vector registers, AVX2 16. With 16 AVX2 accumulators GCC spilled them to
// the stack, and Zen 3 measured 52-59 GFLOP/s per thread against the 79-84
// oneDNN's f32 GEMMs reached there (2026-11-25): every frac_of_peak of the
// benchmarks read 1.3-1.4 on that CPU.
constexpr int kAccumulators = 16;
constexpr int kAccumulators256 = 12;
// Rounds per measurement: 16 instructions each, ~0.1-0.3 ms on a 2-4 GHz core.
constexpr int64_t kIters = 20000;
constexpr int kRepeats = 5;
// BF16 dot products are chosen when their rate beats the FMA rate by this
// factor: below it the f32 kernels' higher efficiency and the BF16 path's
// extra packing pass make the two paths about even (measured GEMM rates:
// Zen 4 ratio 2.0 -> BF16 GEMM 1.6x the f32 one; Xeon ratio 0.49 -> 0.63x).
constexpr double kBf16Advantage = 1.25;
// AMX: oneDNN's AMX BF16 GEMMs reach a much smaller share of their
// instruction's peak than its f32 GEMMs reach of the FMA's (Xeon with AMX,
// 2026-11-28, octet_matmul_bench at the GPT shapes and 2048^3: 0.20-0.27
// against 0.64-0.73, a ratio of 0.29-0.41), so AMX counts at a quarter of
// its measured rate against the FMA rate.
constexpr double kAmxGemmShare = 0.25;
// TDPBF16PS rounds per measurement: 4 instructions of 16 cycles each, so
// ~0.03-0.05 ms on a 2-4 GHz core.
constexpr int64_t kAmxIters = 2000;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// flop/s of 16 independent FMA chains (AVX-512: 32 flop per instruction).
__attribute__((target("avx512f"))) double Fp32FmaRate512(int64_t iters) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 mul = _mm512_set1_ps(0.9999f), add = _mm512_set1_ps(1e-4f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  const double sec = Seconds(t0);
  asm volatile("" : : "r"(lanes) : "memory");
  return static_cast<double>(iters) * kAccumulators * 32.0 / sec;
}

// The same with AVX2 FMAs (16 flop per instruction) on kAccumulators256
// chains, for CPUs without AVX-512.
__attribute__((target("avx2,fma"))) double Fp32FmaRate256(int64_t iters) {
  __m256 acc[kAccumulators256];
  for (int i = 0; i < kAccumulators256; ++i) acc[i] = _mm256_set1_ps(1e-3f * static_cast<float>(i));
  const __m256 mul = _mm256_set1_ps(0.9999f), add = _mm256_set1_ps(1e-4f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators256; ++i) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kAccumulators256; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  const double sec = Seconds(t0);
  asm volatile("" : : "r"(lanes) : "memory");
  return static_cast<double>(iters) * kAccumulators256 * 16.0 / sec;
}

// flop/s of 16 independent VDPBF16PS chains (16 lanes x 2 products x 2 flop).
__attribute__((target("avx512f,avx512bf16"))) double Bf16DotRate512(int64_t iters) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3A80);  // ~1e-3
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  const double sec = Seconds(t0);
  asm volatile("" : : "r"(lanes) : "memory");
  return static_cast<double>(iters) * kAccumulators * 64.0 / sec;
}

// NOTE [AMX probe]: flop/s of TDPBF16PS on four independent accumulator
// tiles, tmm0-3 += {tmm4, tmm5} x {tmm6, tmm7}, as a GEMM's micro-kernel
// pairs them. Every tile is 16 rows of 64 bytes: A 16x32 BF16, B 32x16 BF16
// (pairs of rows interleaved), C 16x16 f32, so one instruction is
// 16 * 16 * 32 * 2 = 16384 flop. With A all 1.0 and B all 2^-10 every
// accumulator element gains 32 * 2^-10 per instruction, exactly; `sum`
// receives C[0][0] of tmm0 for the test that checks it.
__attribute__((target("amx-tile,amx-bf16"))) double AmxBf16RateOnTiles(int64_t iters, float* sum) {
  const cpu::TileConfig& cfg = cpu::FullTiles();
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[16 * 16];
  std::fill(std::begin(a), std::end(a), uint16_t{0x3F80});  // 1.0
  std::fill(std::begin(b), std::end(b), uint16_t{0x3A80});  // 2^-10
  asm volatile("" : : "r"(&cfg), "r"(a), "r"(b) : "memory");  // the asm below reads them through pointers
  _tile_loadconfig(&cfg);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  const double sec = Seconds(t0);
  _tile_release();
  if (sum != nullptr) *sum = c[0];
  return static_cast<double>(iters) * 4 * 16384.0 / sec;
}

// CpuHasAvx512Bf16 also honours OCTET_DISABLE_AVX512 (core/convert.h).
bool HasAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") && CpuHasAvx512Bf16();
}

// The two single-thread rates (0 for an instruction the CPU lacks); returns
// whether the CPU has AVX-512 BF16.
bool MeasureRates(CpuGemmPathInfo* out) {
  CpuGemmPathInfo& info = *out;
  // Interleaved, best of kRepeats: a neighbour's burst of load on a shared
  // machine hits both measurements alike and a single slow run is discarded.
  for (int r = 0; r < kRepeats; ++r) {
    info.fp32_fma_gflops = std::max(info.fp32_fma_gflops, internal::Fp32FmaRate(kIters) * 1e-9);
    info.bf16_dot_gflops = std::max(info.bf16_dot_gflops, internal::Bf16DotRate(kIters) * 1e-9);
    info.amx_bf16_gflops = std::max(info.amx_bf16_gflops, internal::AmxBf16Rate(kAmxIters) * 1e-9);
  }
  return HasAvx512Bf16();
}

CpuGemmPathInfo Decide() {
  const char* env = std::getenv("OCTET_CPU_GEMM");
  const std::optional<CpuGemmPath> forced = internal::ParseCpuGemmPath(env == nullptr ? "" : env);
  ::octet::internal::CheckEnvSwitches();  // NOTE [every switch checked at every read]
  CpuGemmPathInfo info;
  const bool bf16 = MeasureRates(&info);
  if (forced) {
    info.path = *forced;
    info.reason = std::string("OCTET_CPU_GEMM=") + Name(*forced);
  } else if (!bf16) {
    info.path = CpuGemmPath::kFp32Fma;
    info.reason = "no AVX-512 BF16 on this CPU";
  } else {
    info.path = internal::PrefersBf16(info) ? CpuGemmPath::kBf16Dot : CpuGemmPath::kFp32Fma;
    const char* op = info.path == CpuGemmPath::kBf16Dot ? ">=" : "<";
    info.reason = info.amx_bf16_gflops > 0.0
                      ? std::string("measured: max(BF16 dot, AMX BF16 / 4) ") + op + " 1.25x FP32 FMA"
                      : std::string("measured: BF16 dot ") + op + " 1.25x FP32 FMA";
  }
  info.bf16_dot_kernels = internal::UsesBf16DotKernels(info, forced.has_value());
  return info;
}

// g_path's encoding: bit 0 the path, bit 1 bf16_dot_kernels.
int Encode(const CpuGemmPathInfo& info) {
  return static_cast<int>(info.path) | (info.bf16_dot_kernels ? 2 : 0);
}

std::mutex g_mu;
std::optional<CpuGemmPathInfo> g_info;  // guarded by g_mu
// Encode(*g_info) once decided, else -1: the kernels read it without the lock.
std::atomic<int> g_path{-1};

}  // namespace

const char* Name(CpuGemmPath path) { return path == CpuGemmPath::kBf16Dot ? "bf16" : "fp32"; }

CpuGemmPathInfo GetCpuGemmPath() {
  CpuGemmPathInfo info;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_info) return *g_info;
    g_info = Decide();  // throws (caching nothing) on a bad OCTET_CPU_GEMM
    g_path.store(Encode(*g_info), std::memory_order_release);
    info = *g_info;
  }
  // Outside the lock: a log sink may run GEMMs itself.
  OCTET_LOG(kDebug, "CPU BF16/FP8 GEMMs compute with ",
            info.path == CpuGemmPath::kBf16Dot ? "BF16 dot products" : "FP32 FMAs", " (", info.reason,
            "; one thread: FP32 FMA ", info.fp32_fma_gflops, " GFLOP/s, BF16 dot ", info.bf16_dot_gflops, " GFLOP/s)");
  return info;
}

bool ActiveCpuAmxGemm() { return cpu::AmxGemmEnabled(); }

bool ActiveCpuF32Sgemm() { return cpu::F32SgemmEnabled(); }

bool CpuF32GemmPacksB() { return cpu::DnnlTakesBlockedF32B(); }

CpuGemmPath ActiveCpuGemmPath() {
  const int p = g_path.load(std::memory_order_acquire);
  return p >= 0 ? static_cast<CpuGemmPath>(p & 1) : GetCpuGemmPath().path;
}

bool ActiveBf16DotKernels() {
  const int p = g_path.load(std::memory_order_acquire);
  return p >= 0 ? (p & 2) != 0 : GetCpuGemmPath().bf16_dot_kernels;
}

namespace internal {

double Fp32FmaRate(int64_t iters) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Fp32FmaRate512(iters);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Fp32FmaRate256(iters);
  return 0.0;
}

double Bf16DotRate(int64_t iters) { return HasAvx512Bf16() ? Bf16DotRate512(iters) : 0.0; }

double AmxBf16Rate(int64_t iters, float* sum) {
  if (!HasAvx512Bf16() || !AmxTilesPermitted() || !cpu::DnnlUsesAmxBf16()) return 0.0;
  return AmxBf16RateOnTiles(iters, sum);
}

// AMX tiles (NOTE [AMX probe]): Linux hands a process the 8 KiB of tile
// state only after it asks (arch_prctl ARCH_REQ_XCOMP_PERM for feature 18,
// XTILEDATA); the grant covers every thread. oneDNN asks the same way.
bool AmxTilesPermitted() {
  static const bool permitted = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return permitted;
}

bool PrefersBf16(const CpuGemmPathInfo& rates) {
  const double bf16 = std::max(rates.bf16_dot_gflops, kAmxGemmShare * rates.amx_bf16_gflops);
  return bf16 > 0.0 && bf16 >= kBf16Advantage * rates.fp32_fma_gflops;
}

bool UsesBf16DotKernels(const CpuGemmPathInfo& info, bool forced) {
  if (info.path != CpuGemmPath::kBf16Dot) return false;
  return forced || (info.bf16_dot_gflops > 0.0 && info.bf16_dot_gflops >= kBf16Advantage * info.fp32_fma_gflops);
}

std::optional<CpuGemmPath> ParseCpuGemmPath(const std::string& value) {
  switch (::octet::internal::ParseEnvSwitch("OCTET_CPU_GEMM", value.c_str())) {  // auto, bf16, fp32
    case 1: return CpuGemmPath::kBf16Dot;
    case 2: return CpuGemmPath::kFp32Fma;
    default: return std::nullopt;
  }
}

bool CpuRunsBf16Gemm() { return cpu::DnnlHasBf16Matmul(); }

void SetCpuGemmPathForTesting(std::optional<CpuGemmPath> path) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!path) {
    g_info.reset();
    g_path.store(-1, std::memory_order_release);
    return;
  }
  if (!g_info) {
    g_info = CpuGemmPathInfo{};
    MeasureRates(&*g_info);  // the rates stay real (benchmarks read them)
  }
  g_info->path = *path;
  g_info->reason = "set for testing";
  g_info->bf16_dot_kernels = UsesBf16DotKernels(*g_info, /*forced=*/true);
  g_path.store(Encode(*g_info), std::memory_order_release);
}

}  // namespace internal
}  // namespace octet
