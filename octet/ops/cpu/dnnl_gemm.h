// The CPU backend's one entry point into oneDNN's matmul (internal to
// ops/cpu/): a GEMM described by raw pointers, dims and strides, run through
// a cached primitive (NOTE [oneDNN primitive cache] in dnnl_primitive.cc).
// ops/cpu/matmul_cpu.cc turns tensors into these descriptions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include <octet/core/tensor.h>

namespace octet::cpu {

// One operand (or the output) as oneDNN reads it: dims and strides in
// elements, one rank for a, b and out; batch dims of a and b equal out's or
// are 1 (broadcast). The matrix part must be row- or column-major (NOTE
// [oneDNN operand geometry] in matmul_operands.h). dtype: f32 or bf16.
struct MatView {
  const void* data = nullptr;
  Shape dims;
  Shape strides;
  DType dtype = DType::kFloat32;
};

// How the bias (N) enters: the matmul's own bias argument (added to the
// product) or a binary_add post-op (added after the scale post-op).
enum class BiasMode : int64_t { kNone = 0, kArg = 1, kPostOp = 2 };

// out = a·b, then * scale (if `scale`), then + bias (per bias_mode).
struct DnnlGemmSpec {
  MatView a, b, out;
  BiasMode bias_mode = BiasMode::kNone;
  DType bias_dtype = DType::kFloat32;
  int64_t bias_stride = 1;
  bool scale = false;   // a binary_mul post-op by one runtime f32 value
  bool pack_b = false;  // reorder b into oneDNN's blocked layout first (NOTE [packed weights])
  // When set, b.data holds FP8 values of this dtype (b.dtype, bf16 or f32,
  // is what the GEMM computes on; b's geometry describes the FP8 elements):
  // they are converted exactly on the way in, fused with the packing when b
  // is packed.
  std::optional<DType> b_fp8;
  // When set, b.data holds elements of this dtype while b.dtype is what the
  // GEMM computes on, converted on the way in like b_fp8 (fused with the
  // packing when b is packed): bf16 for an f32 GEMM (exact), or f32 for a
  // bf16 GEMM (rounded to nearest even: NOTE [narrowed B] in dnnl_gemm.cc).
  std::optional<DType> b_user_dtype;
  // An f32 b (b.dtype f32, no b_user_dtype) whose values are rounded to bf16
  // precision on the way in: the FP32-FMA path's form of a narrowed B.
  bool b_round_bf16 = false;
};

// Runs spec. bias: (N) elements with spec.bias_stride, or null; scale: one
// f32, or null. Throws octet::Error naming the operands if oneDNN fails.
void RunDnnlGemm(const DnnlGemmSpec& spec, const void* bias, const float* scale);

// Whether oneDNN has a bf16 matmul on this CPU (decided once per process by
// making a small primitive): AVX-512 (with or without its BF16 extension,
// subject to ONEDNN_MAX_CPU_ISA). Without it only the FP32-FMA path can run
// BF16 and FP8 GEMMs (NOTE [CPU GEMM path]).
bool DnnlHasBf16Matmul();

// Whether oneDNN's f32 matmul on this CPU reads B in a blocked layout, which
// octet packs B into where the GEMM is worth it (WorthPackingF32), or a plain
// B (NOTE [plain weights] in dnnl_primitive.cc: oneDNN 2.6's gemm:jit, what
// AVX2-only CPUs get). Decided once per process by making a primitive
// descriptor; subject to ONEDNN_MAX_CPU_ISA like every primitive.
bool DnnlTakesBlockedF32B();

// Whether oneDNN's BF16 kernels may use AMX tiles: its effective ISA (the
// CPU's, capped by ONEDNN_MAX_CPU_ISA or dnnl::set_max_cpu_isa) includes
// AVX512_CORE_AMX. Fixes oneDNN's ISA, like the first primitive does.
bool DnnlUsesAmxBf16();

// Elements between the first and one past the last element that a view of
// `dims` with `strides` touches (0 when a dim is 0).
int64_t SpanOf(const Shape& dims, const Shape& strides);

// dst[0, n) = src[0, n) converted from `from` to `to`: FP8 codes to bf16 or
// f32 (unscaled) and bf16 to f32, exactly; f32 to bf16 rounded to nearest
// even (FloatToBf16Bits); on the OpenMP pool. The one converter of GEMM
// operands oneDNN cannot read as they are. Throws for other pairs.
void ConvertElements(const void* src, DType from, DType to, int64_t n, void* dst);

// dst[0, n) = src[0, n) rounded to bf16 precision and widened back to f32
// (Bf16BitsToFloat(FloatToBf16Bits(x))), on the OpenMP pool.
void RoundElementsToBf16(const float* src, int64_t n, float* dst);

// A grow-only 64-byte aligned buffer (one per thread and purpose), from
// octet's CPU allocator (its cache for 64 KiB and more); Get may move the
// memory, so earlier pointers from the same buffer become invalid. Release
// gives it back (NOTE [transient gemm buffers] in dnnl_gemm.cc).
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  void* Get(size_t bytes);
  void Release();

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Releases the workspaces it is given when it goes out of scope, however the
// scope ends: the buffers of one GEMM call (NOTE [transient gemm buffers] in
// dnnl_gemm.cc).
class ReleaseOnExit {
 public:
  static constexpr size_t kMax = 5;
  ReleaseOnExit(std::initializer_list<Workspace*> workspaces);
  ReleaseOnExit(const ReleaseOnExit&) = delete;
  ReleaseOnExit& operator=(const ReleaseOnExit&) = delete;
  ~ReleaseOnExit();

 private:
  std::array<Workspace*, kMax> workspaces_{};
  size_t count_ = 0;
};

// NOTE [f32 GEMMs on oneDNN's sgemm] (matmul_cpu.cc): whether a large f32
// GEMM runs on dnnl_sgemm instead of the matmul primitive with B packed by
// octet. Off unless OCTET_CPU_F32_GEMM=sgemm (the default, matmul, keeps
// the primitive); any other value throws, naming the variable.
bool F32SgemmEnabled();
// -1: as the environment says; 0 / 1: forced (tests, benchmarks).
void SetF32SgemmForTesting(int forced);

}  // namespace octet::cpu
