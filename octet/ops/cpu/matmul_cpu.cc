// CPU GEMMs: oneDNN matmul for f32 and bf16 (and, through exact FP8 -> BF16
// conversion, for FP8), octet's own blocked kernel for f64, f16 via f32.
//
// NOTE [CPU FP8 GEMM]: FP8 x FP8 runs as cuBLASLt's tensor cores do it: every
// FP8 value is exactly a BF16 value, products of two BF16 values with 3- or
// 2-bit mantissas are exact in f32, and oneDNN's bf16 kernels (VDPBF16PS)
// accumulate in f32. A is converted into a thread-local BF16 buffer in its
// own layout (a transposed FP8 view stays transposed); B is converted while
// it is packed into oneDNN's blocked layout (NOTE [packed weights]), or into
// a plain buffer for small GEMMs. The output scale scale_inv_a * scale_inv_b
// is a binary_mul post-op reading a runtime f32 value — oneDNN 2.6 drops its
// brgemm kernels when the output scale is a runtime attribute (measured: 2x
// slower), and a constant one would need a new primitive for every scale.
// The bias is a binary_add post-op after it, so out = s * (a·b) + bias as in
// cuBLASLt's epilogue. Measured (2 threads, GPT shapes, benchmarks/
// matmul_bench.cc): 82-88% of the BF16 dot-product peak with the conversion
// included, within a few percent of the bf16 GEMM on the same shapes.
//
// Both BF16 and FP8 GEMMs can instead run on FP32 FMAs, their operands widened
// to f32, where this CPU does FMAs faster than BF16 dot products: NOTE [CPU
// GEMM path] in ops/cpu_gemm_path.h (WidenedGemm, widened_gemm.cc). How
// tensors become oneDNN's operands: matmul_operands.h; the f64 GEMM:
// matmul_f64.cc.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include <octet/core/convert.h>
#include <octet/core/env.h>
#include <octet/core/scaling.h>
#include <octet/ops/cpu/dnnl_gemm.h>
#include <octet/ops/cpu/gemm_timing.h>
#include <octet/ops/cpu/gemm_transpose_a.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/matmul_f64.h>
#include <octet/ops/cpu/matmul_operands.h>
#include <octet/ops/cpu/widened_gemm.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/pointwise_kernels.h>

namespace octet::cpu {
namespace {

// NOTE [row-major A for AMX] (gemm_transpose_a.h): a column-major 2-D bf16
// A with at least kPackMinRows rows and N >= kRowMajorAMinN output columns,
// where oneDNN's BF16 matmul runs on AMX. The copy costs a pass over A
// whatever N is and saves GEMM time in proportion to N (measured, 2 threads,
// K = 1024: N = 256 lost 0.00-0.10 ms at M = 256-1024, N = 768-1024 won
// 0.05-0.08 ms at M = 256 and 0.9-1.0 ms at M = 2304-3072).
constexpr int64_t kRowMajorAMinN = 512;
bool WantsRowMajorA(const MatView& a, int64_t N) {
  static const bool amx = DnnlUsesAmxBf16();
  // The copy is AVX-512 code: OCTET_DISABLE_AVX512 (core/convert.h) turns it off.
  return amx && octet::internal::ActiveConverterIsa().avx512 && N >= kRowMajorAMinN &&
         a.dtype == DType::kBFloat16 && a.dims.size() == 2 && a.dims[0] >= kPackMinRows && a.dims[1] >= 32 &&
         a.strides[0] == 1 && a.strides[1] >= a.dims[0];
}

// A bf16 A's row-major copy in ws.
MatView RowMajorA(const MatView& a, Workspace& ws) {
  const int64_t M = a.dims[0], K = a.dims[1];
  auto* dst = static_cast<uint16_t*>(ws.Get(static_cast<size_t>(M * K) * sizeof(uint16_t)));
  RowMajorBf16A(static_cast<const uint16_t*>(a.data), M, K, a.strides[1], dst);
  return {dst, {M, K}, {K, 1}, DType::kBFloat16};
}

// For the call only, as the GEMMs' own (NOTE [transient gemm buffers] in
// dnnl_gemm.cc).
Workspace& ThreadRowMajorA() {
  thread_local Workspace ws;
  return ws;
}

// out = bias (broadcast) or 0: the K == 0 product.
void FillEmptyProduct(const Tensor& bias, const Tensor& out) {
  out.detach().Fill_(0.0);
  if (bias.defined()) {
    Tensor o = out.detach();
    o.CopyFrom_(bias);
  }
}

// ---- f32 on oneDNN's sgemm (opt-in) ---------------------------------------------------
// NOTE [f32 GEMMs on oneDNN's sgemm]: oneDNN's BLAS-style dnnl_sgemm (its
// jit "gemm" kernels, which pack B block by block inside the GEMM) against
// its matmul primitive (brgemm) with B packed by PackF32B beforehand, the
// default. octet_train_step_bench wide O0 (2 layers, width 768; AMX Xeon,
// two threads, 2026-11-29, seven alternating pairs): 274 / 282 / 275 / 280
// / 288 / 289 / 284 against 297 / 300 / 301 / 288 / 297 / 300 / 301 ms a
// step, 3-8 % faster; small O0 (width 256: only its two MLP weight
// gradients have a B worth packing) unchanged, 76.7-77.9 against 77.0-78.8.
// Bare GEMMs, best of 12 (a program over octet::Matmul against dnnl_sgemm
// on the same operands): 1024 x 3072 x 768 12.8-13.4 against 14.5-15.2 ms,
// 768 x 3072 x 1024 12.4-13.7 against 14.3-16.6, 2048^3 44.8-47.2 against
// 49.0-52.8. It is not the default for what it costs: dnnl_sgemm takes no
// workspace, so its packing buffers come from malloc, not from octet's CPU
// cache (NOTE [transient gemm buffers] in dnnl_gemm.cc), and stay resident
// where glibc keeps them: peak RSS wide 330-334 against 316 MiB, small 137.5
// against 127.2, and up to 2.3 k page faults a wide step (15 once glibc's
// mmap threshold has grown) against 54-68. Taken only where octet would pack
// B (WorthPackingF32; the GEMMs with a plain B, all on it, made the small
// step 2-4 % slower), for a 2-D f32 GEMM whose output is row-major and whose
// bias, if any, is f32; the bias is written into the output first and the
// product added to it (beta = 1), so the bits differ from the primitive's
// (Matmul.F32SgemmPathMatchesTheReferences holds both to float64
// references).
// OCTET_CPU_F32_GEMM=sgemm turns it on.
std::atomic<int> g_sgemm_forced{-1};

bool DecideF32Sgemm() { return ::octet::internal::ReadEnvSwitch("OCTET_CPU_F32_GEMM") == 1; }  // sgemm

// out = a·b (+ bias) on dnnl_sgemm, when spec (out's view) qualifies (see
// the NOTE); false when it does not.
bool RunF32Sgemm(const DnnlGemmSpec& spec, const Tensor& bias, const Tensor& out_tensor) {
  const MatView &a = spec.a, &b = spec.b, &out = spec.out;
  if (out.dims.size() != 2 || out.strides[1] != 1 || (out.dims[0] > 1 && out.strides[0] < out.dims[1])) return false;
  if (bias.defined() && bias.dtype() != DType::kFloat32) return false;
  const int64_t m = out.dims[0], n = out.dims[1], k = a.dims[1];
  const bool a_rows = a.strides[1] == 1, b_rows = b.strides[1] == 1;
  float* c = static_cast<float*>(const_cast<void*>(out.data));
  const int64_t ldc = std::max<int64_t>(out.strides[0], 1);
  float beta = 0.0f;
  if (bias.defined()) {  // every row of out = bias, as FillEmptyProduct writes it
    Tensor o = out_tensor.detach();
    o.CopyFrom_(bias);
    beta = 1.0f;
  }
  const int64_t lda = std::max<int64_t>(a_rows ? a.strides[0] : a.strides[1], 1);
  const int64_t ldb = std::max<int64_t>(b_rows ? b.strides[0] : b.strides[1], 1);
  const dnnl_status_t status =
      dnnl_sgemm(a_rows ? 'N' : 'T', b_rows ? 'N' : 'T', m, n, k, 1.0f, static_cast<const float*>(a.data), lda,
                 static_cast<const float*>(b.data), ldb, beta, c, ldc);
  OCTET_CHECK(status == dnnl_success, "matmul: dnnl_sgemm failed on ", m, " x ", n, " x ", k, " (oneDNN status ",
              static_cast<int>(status), ")");
  return true;
}

// ---- f32 / bf16 / f16 / f64 ----------------------------------------------------------

// NOTE [mixed bf16 GEMM operands]: besides one dtype for a, b and out, the
// CPU kernel takes a bf16 GEMM whose B is f32 (rounded to bf16 on the way
// in, NOTE [narrowed B] in dnnl_gemm.cc) and whose out is f32 (the f32
// accumulators, not rounded to bf16): an amp Linear's master weight and its
// gradient (NOTE [cast linear] in ops/matmul.h). oneDNN's bf16 matmul
// writes f32 itself; on the FP32-FMA path WidenedGemm takes both.
void MatmulCpuImpl(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  if (out.numel() == 0) return;
  if (a.shape().back() == 0) return FillEmptyProduct(bias, out);
  const DType dtype = out.dtype();
  if (a.dtype() != b.dtype() || a.dtype() != dtype) {
    auto f32_or_bf16 = [](DType d) { return d == DType::kFloat32 || d == DType::kBFloat16; };
    OCTET_CHECK(a.dtype() == DType::kBFloat16 && f32_or_bf16(b.dtype()) && f32_or_bf16(dtype),
                "matmul: mixed operands a ", Name(a.dtype()), ", b ", Name(b.dtype()), ", out ", Name(dtype),
                ": the CPU GEMM mixes only a bfloat16 a with a float32 b and/or out");
  } else if (dtype == DType::kFloat64) {
    return MatmulF64(a, b, bias, out);
  } else if (dtype == DType::kFloat16) {
    // No f16 GEMM on CPUs without AVX512-FP16: compute in f32, round once.
    Tensor out32 = Empty(out.shape(), {.dtype = DType::kFloat32});
    MatmulCpuImpl(a.To(DType::kFloat32), b.To(DType::kFloat32), bias.defined() ? bias.To(DType::kFloat32) : Tensor(),
                  out32);
    Tensor o = out.detach();
    o.CopyFrom_(out32);
    return;
  }
  if (a.dtype() == DType::kBFloat16 && ActiveCpuGemmPath() == CpuGemmPath::kFp32Fma)
    return WidenedGemm(a, b, bias, out, nullptr);
  Tensor ka, kb;
  DnnlGemmSpec spec;
  spec.a = ViewOf(a, &ka);
  spec.b = ViewOf(b, &kb);
  if (b.dtype() != a.dtype()) {  // an f32 B of a bf16 GEMM
    spec.b_user_dtype = DType::kFloat32;
    spec.b.dtype = DType::kBFloat16;
  }
  spec.out = OutView(out);
  Coalesce(spec.a, spec.b, spec.out);
  Workspace& row_major = ThreadRowMajorA();
  const ReleaseOnExit release({&row_major});
  if (WantsRowMajorA(spec.a, out.shape().back())) spec.a = RowMajorA(spec.a, row_major);
  const bool plain_f32 = spec.a.dtype == DType::kFloat32 && spec.b.dtype == DType::kFloat32 && !spec.b_user_dtype;
  spec.pack_b = plain_f32 ? WorthPackingF32(spec.b, spec.out) : WorthPacking(spec.b, spec.out);
  // NOTE [f32 GEMMs on oneDNN's sgemm]: opt-in, where B would be packed.
  if (plain_f32 && F32SgemmEnabled() && spec.pack_b && RunF32Sgemm(spec, bias, out)) return;
  Tensor kbias;
  if (bias.defined()) {
    kbias = bias.stride(0) == 1 ? bias : bias.Contiguous();
    spec.bias_mode = BiasMode::kArg;
    spec.bias_dtype = kbias.dtype();
  }
  RunDnnlGemm(spec, kbias.defined() ? kbias.raw_data() : nullptr, nullptr);
}

// ---- FP8 ------------------------------------------------------------------------------

void ScaledMatmulCpuImpl(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  if (out.numel() == 0) return;
  if (a.shape().back() == 0) return FillEmptyProduct(bias, out);
  // As cuBLASLt: alpha = scale_inv_a * scale_inv_b in f32, times the f32 accumulator.
  const float scale = ScaleInvValue(a) * ScaleInvValue(b);
  if (ActiveCpuGemmPath() == CpuGemmPath::kFp32Fma) return WidenedGemm(a, b, bias, out, &scale);
  DnnlGemmSpec spec;
  Tensor keep_a;
  const MatView a_codes = CompactView(a, &keep_a);
  Workspace& row_major = ThreadRowMajorA();
  const ReleaseOnExit release({&row_major});
  spec.a = ThreadConvertedA(DType::kBFloat16).Get(keep_a, a_codes, a.dtype(), DType::kBFloat16);
  // A transposed A is then copied row-major (NOTE [row-major A for AMX]);
  // the conversion stays for the other GEMM of NOTE [converted A reuse].
  if (WantsRowMajorA(spec.a, out.shape().back())) spec.a = RowMajorA(spec.a, row_major);
  Tensor keep_b;
  spec.b = Fp8View(b, &keep_b);  // converted by RunDnnlGemm, fused with packing
  spec.b_fp8 = b.dtype();
  spec.out = OutView(out);
  Coalesce(spec.a, spec.b, spec.out);
  spec.pack_b = WorthPacking(spec.b, spec.out);
  spec.scale = true;
  Tensor kbias;
  if (bias.defined()) {
    kbias = bias.stride(0) == 1 ? bias : bias.Contiguous();
    spec.bias_mode = BiasMode::kPostOp;
    spec.bias_dtype = kbias.dtype();
  }
  RunDnnlGemm(spec, kbias.defined() ? kbias.raw_data() : nullptr, &scale);
  ThreadConvertedA(DType::kBFloat16).AfterUse();
}

// NOTE [gelu epilogue]: the product goes to gelu_pre, then one GELU pass.
void ApplyGelu(const Tensor& gelu_pre, const Tensor& out) {
  if (out.numel() > 0) unary_kernel(kCPU)(UnaryOp::kGelu, gelu_pre, out, 0.0);
}

// 2·M·N·K over the batch: out's elements times a's inner dimension, twice.
double GemmFlops(const Tensor& a, const Tensor& out) {
  return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.shape().back());
}

void MatmulCpu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, const Tensor& gelu_pre) {
  {
    GemmTimer timer(GemmTimer::kCall, GemmFlops(a, out));
    MatmulCpuImpl(a, b, bias, gelu_pre.defined() ? gelu_pre : out);
  }
  if (gelu_pre.defined()) ApplyGelu(gelu_pre, out);
}

void ScaledMatmulCpu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, GemmRole /*role*/,
                     const Tensor& gelu_pre) {
  {
    GemmTimer timer(GemmTimer::kCall, GemmFlops(a, out));
    ScaledMatmulCpuImpl(a, b, bias, gelu_pre.defined() ? gelu_pre : out);
  }
  if (gelu_pre.defined()) ApplyGelu(gelu_pre, out);
}

}  // namespace

bool F32SgemmEnabled() {
  const int forced = g_sgemm_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  static const bool decided = DecideF32Sgemm();
  return decided;
}

void SetF32SgemmForTesting(int forced) { g_sgemm_forced.store(forced, std::memory_order_relaxed); }

OCTET_REGISTER_KERNEL(matmul_kernel, DeviceType::kCPU, &MatmulCpu);
OCTET_REGISTER_KERNEL(scaled_matmul_kernel, DeviceType::kCPU, &ScaledMatmulCpu);
// The CPU GEMM packs FP8 operands from any layout (ops/matmul.h).
OCTET_REGISTER_KERNEL(fp8_gemm_needs_tn, DeviceType::kCPU, +[](Device) { return false; });
OCTET_REGISTER_KERNEL(gemm_epilogue_gelu, DeviceType::kCPU, +[](Device) { return false; });
OCTET_REGISTER_KERNEL(gemm_mixed_bf16, DeviceType::kCPU, +[](Device) { return true; });

}  // namespace octet::cpu
