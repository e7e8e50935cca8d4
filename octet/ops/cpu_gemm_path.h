// Which instructions the CPU GEMMs on bfloat16 and FP8 operands compute with.
//
// NOTE [CPU GEMM path]: a BF16 (or FP8, which is exact in BF16) GEMM can run
// on a CPU in two ways, both accumulating in f32:
//   kBf16Dot  the operands stay BF16 and oneDNN's kernels use BF16
//             instructions: AMX tiles (TDPBF16PS) where the CPU has them
//             and oneDNN uses them, else the AVX-512 dot product
//             (VDPBF16PS: 2 products per f32 lane);
//   kFp32Fma  the operands are widened to f32 (exactly: every BF16 and FP8
//             value is an f32 value) while they are copied or packed, and
//             oneDNN's f32 kernels run on FP32 FMAs; a BF16 output is rounded
//             once from the f32 result.
// The results agree up to the order of the f32 accumulation. Which is faster
// depends on the CPU: on AMD Zen 4/5, VDPBF16PS does twice the flops of an
// FMA per cycle; on Intel Xeons with AVX-512 BF16 and no AMX it does half
// (measured: FP32 FMA peak 351 GFLOP/s, VDPBF16PS 171, so a BF16 GEMM ran at
// 0.63x the f32 one); on Xeons with AMX, VDPBF16PS is again half the FMA
// rate but the tiles are ~15x the FMA's (measured: FMA 222-242, VDPBF16PS
// 110-117, AMX 3100-3500 GFLOP/s per thread; oneDNN's BF16 GEMMs ran at
// 4.5-6x its f32 ones).
// So the path is chosen per process from the measured rates of the
// instructions on this CPU (a few ms of micro-benchmark at the first BF16/FP8
// GEMM): kBf16Dot when max(VDPBF16PS, AMX / 4) >= 1.25 x FMA (AMX GEMMs reach
// 0.3-0.4 times the share of their peak that FMA GEMMs reach of theirs),
// unless the environment variable OCTET_CPU_GEMM says `bf16` or `fp32`
// (`auto` or empty: measure). Any other value is an error at the first
// BF16/FP8 GEMM (and from GetCpuGemmPath). A CPU without AVX-512 BF16 always
// gets kFp32Fma unless the override says otherwise.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstdint>
#include <optional>
#include <string>

namespace octet {

enum class CpuGemmPath { kBf16Dot, kFp32Fma };

// "bf16" or "fp32" (the spelling OCTET_CPU_GEMM takes).
const char* Name(CpuGemmPath path);

struct CpuGemmPathInfo {
  CpuGemmPath path = CpuGemmPath::kBf16Dot;
  // Measured single-thread peaks of the two instructions (flop/s / 1e9);
  // 0 when the CPU lacks the instruction. Measured even under an override.
  double fp32_fma_gflops = 0.0;
  double bf16_dot_gflops = 0.0;
  // The AMX tile BF16 rate (TDPBF16PS), 0 unless the CPU has AMX, Linux
  // grants the process its tile state and oneDNN's BF16 kernels use it
  // (not under ONEDNN_MAX_CPU_ISA below AVX512_CORE_AMX).
  double amx_bf16_gflops = 0.0;
  // Whether octet's own BF16 kernels (attention's tiles: NOTE [bf16
  // attention tiles] in ops/cpu/attention_bf16.h) use VDPBF16PS: on the
  // kBf16Dot path when OCTET_CPU_GEMM forces it or VDPBF16PS alone beats the
  // FMA by 1.25x. Not where only AMX made the GEMMs pick kBf16Dot: those
  // kernels have no AMX version, and VDPBF16PS runs at half the FMA rate
  // on such CPUs.
  bool bf16_dot_kernels = false;
  // Why this path: "OCTET_CPU_GEMM=fp32", "measured", "no AVX-512 BF16", ...
  std::string reason;
};

// The path for this process: decided at the first call (thread-safe), then
// cached. Throws octet::Error naming the variable and the accepted values
// when OCTET_CPU_GEMM holds anything but bf16, fp32, auto or "" (and keeps
// throwing: nothing is cached then).
CpuGemmPathInfo GetCpuGemmPath();

// GetCpuGemmPath().path, without a lock or a copy once decided (what the
// GEMMs call). Throws like GetCpuGemmPath.
CpuGemmPath ActiveCpuGemmPath();

// GetCpuGemmPath().bf16_dot_kernels, read the same way.
bool ActiveBf16DotKernels();

// Whether BF16 GEMMs with a packed B run on octet's own AMX kernel where it
// is faster than oneDNN's (NOTE [amx gemm] in ops/cpu/amx_gemm.cc): the CPU
// has AMX-BF16, oneDNN may use it, OCTET_CPU_AMX_GEMM is not 0, and neither
// OCTET_DISABLE_AVX512 nor OCTET_DISABLE_AVX512_BF16 is 1.
bool ActiveCpuAmxGemm();

// Whether the f32 GEMMs whose B octet would pack run on oneDNN's sgemm
// instead of its matmul primitive (NOTE [f32 GEMMs on oneDNN's sgemm] in
// ops/cpu/matmul_cpu.cc): off unless OCTET_CPU_F32_GEMM=sgemm; any value
// but matmul, sgemm or "" throws octet::Error naming the variable.
bool ActiveCpuF32Sgemm();

// Whether oneDNN's matmul takes its f32 B operands in a blocked layout on
// this CPU, so that octet packs the Bs worth packing into it (NOTE [packed
// weights] in ops/cpu/dnnl_gemm.cc). False where oneDNN's kernel reads B as
// it is (its gemm:jit, what AVX2-only CPUs get: NOTE [plain weights] in
// ops/cpu/dnnl_primitive.cc); a conversion of B (bf16 or FP8, or an O2
// master weight's rounding) is then a pass of its own at every GEMM.
bool CpuF32GemmPacksB();

// NOTE [cpu gemm timing]: how much of a program's time its CPU GEMMs take,
// and at what rate: what bounds a training step that is mostly GEMMs
// (issue 12 asks every shortfall to name its bound). Off by default, when
// the GEMMs read one relaxed atomic flag and nothing else. When on, every
// GEMM of the CPU backend (Matmul and ScaledMatmul, any dtype, forward and
// backward) adds its flops, 2·M·N·K over its batch, and the wall time of
// three nested parts:
//   seconds          the whole kernel call: operand conversions, B packing,
//                    oneDNN's primitive, a bf16 output's narrowing;
//   pack_seconds     B's packing into oneDNN's layout (with the conversion
//                    fused into it) or its conversion when it stays plain;
//   execute_seconds  oneDNN's primitive alone.
// So flops / execute_seconds is oneDNN's own rate, flops / seconds what a
// caller gets. Times are measured on the calling thread around regions that
// occupy the whole OpenMP pool; GEMMs called from several threads at once
// add up their overlapping times.
struct CpuGemmTimes {
  int64_t calls = 0;
  double flops = 0;
  double seconds = 0;
  double pack_seconds = 0;
  double execute_seconds = 0;
};
void SetCpuGemmTiming(bool on);
// Totals since the last ResetCpuGemmTimes (or the start of the process).
CpuGemmTimes GetCpuGemmTimes();
void ResetCpuGemmTimes();

namespace internal {

// One thread's rate (flop/s) over `iters` rounds of 16 independent
// FP32 FMAs (AVX-512, else AVX2; 0 without either) or VDPBF16PS (0 without
// AVX-512 BF16): the micro-benchmarks the path is chosen from, also run on
// every thread by benchmarks/cpu_peak.h.
double Fp32FmaRate(int64_t iters);
double Bf16DotRate(int64_t iters);
// `iters` rounds of 4 independent TDPBF16PS (NOTE [AMX probe] in
// cpu_gemm_path.cc; 0 where amx_bf16_gflops would be 0). `sum`, if given,
// receives one accumulator element: exactly iters * 32 * 2^-10.
double AmxBf16Rate(int64_t iters, float* sum = nullptr);

// Whether the CPU has AMX-BF16 tiles and Linux granted this process their
// state (asked once, at the first call: NOTE [AMX probe] in
// cpu_gemm_path.cc). octet's own AMX kernels run only where it is true.
bool AmxTilesPermitted();

// The decision rule of NOTE [CPU GEMM path] on measured rates.
bool PrefersBf16(const CpuGemmPathInfo& rates);
// CpuGemmPathInfo::bf16_dot_kernels for a decided path (forced: by
// OCTET_CPU_GEMM or for testing).
bool UsesBf16DotKernels(const CpuGemmPathInfo& info, bool forced);

// std::nullopt for "auto" or ""; throws octet::Error for an unknown value.
std::optional<CpuGemmPath> ParseCpuGemmPath(const std::string& value);

}  // namespace internal
}  // namespace octet
