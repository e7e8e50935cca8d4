// The FP32-FMA path of the CPU GEMMs for BF16 and FP8 operands (see
// widened_gemm.h).
//
// NOTE [CPU GEMM path] (ops/cpu_gemm_path.h): both operands are widened
// exactly to f32 (in their own layouts, so transposed views stay transposed),
// the f32 GEMM runs, and a bf16 output is rounded once from the f32 result.
//
// NOTE [FP32-FMA path costs]: what this path pays over an f32 GEMM is the
// pass that widens A and the pass that narrows a bf16 output. Timed per
// parallel region in a small GPT step at O2 (OCTET_CPU_GEMM=fp32, Zen 5, 2
// threads, 2026-11-25; an LD_PRELOAD wrapper around libgomp's GOMP_parallel
// summing the time of each region's function): narrowing 5.6 ms and
// widening 4.1 ms of a ~80 ms step, while oneDNN's GEMMs themselves took
// 59.6 ms against O0's 66.0 and the bf16 pointwise, norm and attention
// kernels ~5 ms less than O0's f32 ones: O2 ends 1.02-1.10x O0's step time
// on this path (small model; 0.90-1.06x wide). Inside a step both passes
// run 3-4x slower than the same call repeated in a loop (a 1 Mi-element
// widening 130-240 us against 46-70, whether the data was evicted or not
// first); converting the same span a second time right after the first is
// as fast as the loop, so it is the state the step leaves the caches in.
// Tried and not kept (2026-11-25):
// - row panels: B packed once, then one parallel region in which each
//   thread widens its block of A rows, runs a one-thread primitive on them
//   and narrows its output rows at once, while they are in its cache.
//   Per WidenedGemm call over a small O2 step, three alternating rounds:
//   1.46-1.60 ms without, 1.49-1.67 with one block per thread, 1.51-1.72
//   with two; no gain (NOTE [gemm thread split] for the GEMM side).
// - streaming (non-temporal) stores for the widened A: 46 -> 47 us per call
//   on average over a step.
// - oneDNN computing on the bf16 operands itself: its f32 matmul cannot
//   write bf16 ("could not create a primitive descriptor" for f32 x f32 ->
//   bf16), and its bf16 matmul without the dot-product instruction
//   (ONEDNN_MAX_CPU_ISA=AVX512_CORE, emulated) runs 2.6-2.8x slower than
//   the f32 one (1024x768x768 9.8 against 3.5 ms, 2048^3 133 against 50).
// - a GEMM of octet's own that widens while it packs and scales, biases
//   and rounds to bf16 in its tile stores (2026-11-27; the whole of it,
//   with its tests and benchmark switches, is commit 116aa44). Goto's
//   algorithm with a 12 x 32 AVX-512 register tile: B packed once per call
//   into 384-deep blocks of 32-column panels by both threads, tasks of ~120
//   rows x <= 768 columns claimed from a counter, A widened and transposed
//   into 12-row panels per block, the bf16 output rounded in registers
//   exactly as FloatToBf16Bits. Its kernel alone ran at 98-100 % of a
//   thread's FP32 FMA peak and the whole GEMM at 0.92-1.00x oneDNN's f32
//   matmul (f32, B column-major, GPT shapes, two threads); with the two
//   passes saved it was still 0-9 % slower than this path in
//   octet_matmul_bench, and in the step (OCTET_CPU_GEMM=fp32, three
//   alternating rounds, quiet VM) small O2 78.4 / 77.7 / 78.7 ms against
//   75.3 / 75.7 / 77.4, wide O2 289 / 289 / 290 against 273 / 274 / 283,
//   wide O1 291 / 287 / 287 against 280 / 282 / 291 (small O1 and O0
//   equal): 2-5 % slower, for 26-28 MiB less peak RSS on the wide model
//   (no f32 copy of A or of the output: O2 293 against 319 MiB, O1 322
//   against 350). perf put what the passes cost back inside it: the
//   conversions' arithmetic and the stores of the bf16 output to fresh
//   pages, not the extra memory round trip. Not kept (a kernel of our own
//   only where it wins). An AVX2 6 x 16 version ran 8-12 % slower than
//   oneDNN's gemm:jit plus the passes (simulated on the Zen 5); on a real
//   AVX2 CPU (Zen 3, 2026-11-30, f32 alone) 1.19-1.35x oneDNN's time as it
//   was, 1.02-1.07x on one thread once its masked stores (vmaskmovps, slow
//   on AMD cores) were plain ones (docs/cpu-speed.md, twenty-first session).
#include <octet/ops/cpu/widened_gemm.h>

#include <algorithm>
#include <cstdint>

#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/ops/cpu/dnnl_gemm.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/matmul_operands.h>

namespace octet::cpu {
namespace {

// For the call only, as the GEMMs' own (NOTE [transient gemm buffers] in
// dnnl_gemm.cc).
struct WidenBuffers {
  Workspace out, bias;
};
WidenBuffers& ThreadWidenBuffers() {
  thread_local WidenBuffers buffers;
  return buffers;
}

}  // namespace

void WidenedGemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, const float* scale) {
  WidenBuffers& ws = ThreadWidenBuffers();
  const ReleaseOnExit release({&ws.out, &ws.bias});
  Tensor ka, kb;
  DnnlGemmSpec spec;
  spec.a = CompactView(a, &ka);
  spec.b = CompactView(b, &kb);
  const bool f32_out = out.dtype() == DType::kFloat32;
  float* out32 = f32_out ? out.data<float>()
                         : static_cast<float*>(ws.out.Get(static_cast<size_t>(out.numel()) * sizeof(float)));
  spec.out = {out32, out.shape(), out.strides(), DType::kFloat32};
  Coalesce(spec.a, spec.b, spec.out);
  spec.pack_b = WorthPacking(spec.b, spec.out);
  spec.a = ThreadConvertedA(DType::kFloat32).Get(ka, spec.a, a.dtype(), DType::kFloat32);
  // RunDnnlGemm widens B: while packing it into oneDNN's f32 blocked layout
  // (one pass over B instead of two), or span-wise when it stays plain.
  if (IsFp8(b.dtype()))
    spec.b_fp8 = b.dtype();
  else if (b.dtype() == DType::kBFloat16)
    spec.b_user_dtype = DType::kBFloat16;
  else
    spec.b_round_bf16 = true;  // an f32 B of a bf16 GEMM (NOTE [narrowed B] in dnnl_gemm.cc)
  spec.b.dtype = DType::kFloat32;
  spec.scale = scale != nullptr;
  const float* bias32 = nullptr;
  if (bias.defined()) {
    const Tensor bc = bias.Contiguous();
    const int64_t n = bc.numel();
    float* dst = static_cast<float*>(ws.bias.Get(static_cast<size_t>(n) * sizeof(float)));
    if (bc.dtype() == DType::kFloat32) {
      std::copy(bc.data<float>(), bc.data<float>() + n, dst);
    } else {
      OCTET_CHECK(bc.dtype() == DType::kBFloat16, "matmul: bias dtype ", Name(bc.dtype()), " on the f32 path");
      Bf16ToFloatRow(static_cast<const uint16_t*>(bc.raw_data()), dst, n);
    }
    bias32 = dst;
    // Scaled: the bias comes after the scale (as cuBLASLt's epilogue).
    spec.bias_mode = scale != nullptr ? BiasMode::kPostOp : BiasMode::kArg;
    spec.bias_dtype = DType::kFloat32;
  }
  RunDnnlGemm(spec, bias32, scale);
  ThreadConvertedA(DType::kFloat32).AfterUse();
  if (!f32_out) {
    uint16_t* dst = static_cast<uint16_t*>(out.raw_data());
    ParallelFor(out.numel(), 1 << 15, [&](int64_t b, int64_t e) { FloatToBf16Row(out32 + b, dst + b, e - b); });
  }
}

}  // namespace octet::cpu
