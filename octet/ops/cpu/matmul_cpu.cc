// CPU GEMMs: oneDNN matmul for f32 and bf16 (and, through exact FP8 -> BF16
// conversion, for FP8), octet's own blocked kernel for f64, f16 via f32.
//
// NOTE [oneDNN operand geometry]: oneDNN's matmul takes any strides through
// its memory descriptors, but only row-major or column-major matrices (a unit
// stride in one of the two matrix dims, a leading dimension at least the
// other's extent) reach its fast kernels; anything else falls to a reference
// loop hundreds of times slower. So every operand is first normalised: batch
// dims that broadcast (size 1 or stride 0) become size 1, which oneDNN
// broadcasts itself; the strides of size-1 dims are made canonical; batch dims
// that are contiguous for all three tensors are merged; a batched A times a
// shared B whose batch dims fold into M becomes one 2-D GEMM. An operand whose
// matrix is neither row- nor column-major is copied (made contiguous) once.
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
// GEMM path] in ops/cpu_gemm_path.h (WidenedGemm below).
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
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/pointwise_kernels.h>

namespace octet::cpu {
namespace {

// ---- geometry ------------------------------------------------------------------

// See NOTE [oneDNN operand geometry]. shape/strides: rank r >= 2. Writes the
// normalised dims/strides; returns false when the matrix part is neither
// row- nor column-major (the caller copies).
bool NormaliseGeometry(const Shape& shape, const Shape& strides, Shape* dims_out, Shape* strides_out) {
  const size_t r = shape.size();
  Shape dims = shape, st = strides;
  for (size_t d = 0; d + 2 < r; ++d)
    if (st[d] == 0) dims[d] = 1;
  const int64_t rows = dims[r - 2], cols = dims[r - 1];
  int64_t& sr = st[r - 2];
  int64_t& sc = st[r - 1];
  if (rows <= 1 && cols <= 1) {
    sr = std::max<int64_t>(cols, 1);
    sc = 1;
  } else if (rows <= 1) {
    if (sc == 1) sr = cols; else sr = 1;
  } else if (cols <= 1) {
    if (sr == 1) sc = rows; else sc = 1;
  }
  const bool row_major = sc == 1 && sr >= std::max<int64_t>(cols, 1);
  const bool col_major = sr == 1 && sc >= std::max<int64_t>(rows, 1);
  if (!row_major && !col_major) return false;
  // Canonical strides for size-1 batch dims: the span of everything inside.
  int64_t span = 1 + (rows - 1) * sr + (cols - 1) * sc;
  for (size_t d = r - 2; d-- > 0;) {
    if (dims[d] == 1)
      st[d] = std::max<int64_t>(span, 1);
    else
      span += (dims[d] - 1) * st[d];
  }
  *dims_out = std::move(dims);
  *strides_out = std::move(st);
  return true;
}

// One batch dim of a GEMM: its size in out, a and b, and its strides.
struct BatchDim {
  int64_t n, da, sa, db, sb, so;
};

// v = (batch dims of `dims` picked by the member pointers..., r0, r1) with
// strides (..., s0, s1).
void AssignBatched(MatView& v, const std::vector<BatchDim>& dims, int64_t BatchDim::*size,
                   int64_t BatchDim::*stride, int64_t r0, int64_t s0, int64_t r1, int64_t s1) {
  v.dims.clear();
  v.strides.clear();
  for (const BatchDim& d : dims) {
    v.dims.push_back(d.*size);
    v.strides.push_back(d.*stride);
  }
  v.dims.insert(v.dims.end(), {r0, r1});
  v.strides.insert(v.strides.end(), {s0, s1});
}

// Merges batch dims across a, b and out (NOTE [oneDNN operand geometry]) and
// folds a shared B into M. All three views have one rank r >= 2 and
// normalised geometry; out is contiguous.
void Coalesce(MatView& a, MatView& b, MatView& out) {
  const size_t r = out.dims.size();
  std::vector<BatchDim> dims;
  for (size_t d = 0; d + 2 < r; ++d) {
    if (out.dims[d] == 1) continue;
    const BatchDim c{out.dims[d], a.dims[d], a.strides[d], b.dims[d], b.strides[d], out.strides[d]};
    if (!dims.empty()) {
      BatchDim& p = dims.back();
      // Dims d-1 and d of one operand merge when both broadcast, or when both
      // are full and d-1 steps over exactly the extent of d.
      auto mergeable = [&](int64_t pd, int64_t ps, int64_t cd, int64_t cs) {
        return (pd == 1 && cd == 1) || (pd == p.n && cd == c.n && ps == cs * cd);
      };
      if (mergeable(p.da, p.sa, c.da, c.sa) && mergeable(p.db, p.sb, c.db, c.sb) &&
          mergeable(p.n, p.so, c.n, c.so)) {
        p = {p.n * c.n, p.da * c.da, c.sa, p.db * c.db, c.sb, c.so};
        continue;
      }
    }
    dims.push_back(c);
  }
  const int64_t am = a.dims[r - 2], a_sm = a.strides[r - 2], ak = a.dims[r - 1], a_sk = a.strides[r - 1];
  const int64_t bk = b.dims[r - 2], b_sk = b.strides[r - 2], bn = b.dims[r - 1], b_sn = b.strides[r - 1];
  const int64_t om = out.dims[r - 2], o_sm = out.strides[r - 2], on = out.dims[r - 1], o_sn = out.strides[r - 1];
  // Fold: B shared by every batch, A's batch rows evenly spaced like its M
  // rows -> one (batch·M, K) x (K, N) GEMM.
  if (dims.size() == 1 && dims[0].db == 1 && dims[0].da == dims[0].n && (am == 1 || dims[0].sa == a_sm * am) &&
      dims[0].so == o_sm * om) {
    const int64_t rows = dims[0].n * am;
    MatView folded = a;
    folded.dims = {rows, ak};
    folded.strides = {am == 1 ? dims[0].sa : a_sm, a_sk};
    // One row spacing for all rows can break the column-major rule (ld <
    // rows); then the batch stays.
    if (NormaliseGeometry(folded.dims, folded.strides, &folded.dims, &folded.strides)) {
      a = folded;
      b.dims = {bk, bn};
      b.strides = {b_sk, b_sn};
      out.dims = {rows, on};
      out.strides = {o_sm, o_sn};
      return;
    }
  }
  AssignBatched(a, dims, &BatchDim::da, &BatchDim::sa, am, a_sm, ak, a_sk);
  AssignBatched(b, dims, &BatchDim::db, &BatchDim::sb, bk, b_sk, bn, b_sn);
  AssignBatched(out, dims, &BatchDim::n, &BatchDim::so, om, o_sm, on, o_sn);
  // Re-canonicalise the strides of size-1 batch dims after the merge.
  NormaliseGeometry(a.dims, a.strides, &a.dims, &a.strides);
  NormaliseGeometry(b.dims, b.strides, &b.dims, &b.strides);
}

// A tensor operand as a MatView, copying it when oneDNN cannot read it.
MatView ViewOf(const Tensor& t, Tensor* keep) {
  MatView v;
  *keep = t;
  if (!NormaliseGeometry(t.shape(), t.strides(), &v.dims, &v.strides)) {
    *keep = t.Contiguous();
    NormaliseGeometry(keep->shape(), keep->strides(), &v.dims, &v.strides);
  }
  v.data = keep->raw_data();
  v.dtype = keep->dtype();
  return v;
}

// See NOTE [packed weights] in dnnl_gemm.cc: packing B costs one pass over it
// and pays once there are a few hundred rows to reuse it for (measured on the
// GPT shapes; for small or batched GEMMs oneDNN's on-the-fly packing wins).
constexpr int64_t kPackMinRows = 256;
bool WorthPacking(const MatView& b, const MatView& out) {
  return out.dims.size() == 2 && out.dims[0] >= kPackMinRows && b.dims[0] * b.dims[1] >= 4096;
}

// NOTE [small f32 B stays plain]: an f32 GEMM reading an f32 B as it is (no
// conversion to fuse with the packing) leaves B plain when it has at most
// kPlainF32BMaxElements elements (1 MiB, half this Xeon's L2): oneDNN's
// on-the-fly packing of such a B, which stays in L2, costs less than the
// separate packing pass and its write of a second copy. The default GPT's
// f32 GEMMs are all of that size but two (the MLP's weight gradients, a
// 1024 x 1024 B): 51 packs a step, 8 ms of a ~105 ms O0 step
// (scripts/omp_regions.sh). octet_train_step_bench on the AMX Xeon,
// 2026-11-29, three alternating rounds, ms: small O0 105 / 104 / 108 ->
// 101 / 96.3 / 101 (all f32 B packed -> those up to 1 MiB plain); leaving
// every f32 B plain made the wide O0 step 20 % slower (443 against 373 ms),
// and leaving its 768 x 768 ones plain (2.4 MiB) changed nothing (369 / 367
// / 360 against 355 / 369 / 363), so the bound is set below them.
constexpr int64_t kPlainF32BMaxElements = int64_t{1} << 18;
bool WorthPackingF32(const MatView& b, const MatView& out) {
  return WorthPacking(b, out) && b.dims[0] * b.dims[1] > kPlainF32BMaxElements;
}

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

MatView OutView(const Tensor& out) { return {out.raw_data(), out.shape(), out.strides(), out.dtype()}; }

// out = bias (broadcast) or 0: the K == 0 product.
void FillEmptyProduct(const Tensor& bias, const Tensor& out) {
  out.detach().Fill_(0.0);
  if (bias.defined()) {
    Tensor o = out.detach();
    o.CopyFrom_(bias);
  }
}

// An operand as a MatView over its own elements, in its normalised layout. A
// layout oneDNN cannot read, or one with large gaps (the converters widen the
// whole span), is made contiguous first (kept alive in *keep).
MatView CompactView(const Tensor& t, Tensor* keep) {
  *keep = t;
  MatView v;
  const bool ok = NormaliseGeometry(t.shape(), t.strides(), &v.dims, &v.strides);
  if (!ok || SpanOf(v.dims, v.strides) > 2 * std::max<int64_t>(Numel(v.dims), 1)) {
    *keep = t.Contiguous();
    NormaliseGeometry(keep->shape(), keep->strides(), &v.dims, &v.strides);
  }
  v.data = keep->raw_data();
  v.dtype = keep->dtype();
  return v;
}

// An FP8 operand as a CompactView over its bytes (dtype bf16: what the GEMM
// computes on).
MatView Fp8View(const Tensor& t, Tensor* keep) {
  MatView v = CompactView(t, keep);
  v.dtype = DType::kBFloat16;
  return v;
}

// ---- converted A operands ------------------------------------------------------------
// NOTE [converted A reuse]: an A operand oneDNN cannot read as it is (FP8
// codes, or bf16 on the FP32-FMA path) is converted in a pass of its own
// into a per-thread buffer, over its whole span in its own layout. A
// Linear's backward reads its output gradient dY as A twice in a row —
// dX = dY·W, then dW = dYᵀ·X — and both conversions produce the same bytes
// (dYᵀ is a view of the same span). So the buffer remembers what it holds:
// the source storage (weakly: a storage that died, even one whose memory was
// reused, never matches), the first element, the span, both dtypes and the
// storage's version (an in-place write bumps it). The second GEMM then skips
// its conversion pass: a third of the conversion work of an O1 step (perf,
// wide GPT, Zen 5). Values are exact conversions, so reuse cannot change a
// result, only skip recomputing it.
class ConvertedOperand {
 public:
  // v's span (elements of `from`: FP8 codes or bf16 bits) converted to
  // `to` in this buffer, v's geometry kept; `source` owns v's bytes.
  MatView Get(const Tensor& source, MatView v, DType from, DType to) {
    const int64_t span = std::max<int64_t>(SpanOf(v.dims, v.strides), 1);
    const std::shared_ptr<Storage>& storage = source.storage();
    const bool hit = storage_.lock() == storage && data_ == v.data && span_ == span && from_ == from && to_ == to &&
                     version_ == storage->version();
    last_hit_ = hit;
    if (!hit) storage_.reset();  // nothing valid until converted (a throw leaves it empty)
    void* dst = buffer_.Get(static_cast<size_t>(span) * SizeOf(to));  // a hit needs no more room
    if (!hit) {
      ConvertElements(v.data, from, to, span, dst);
      storage_ = storage;
      data_ = v.data;
      span_ = span;
      from_ = from;
      to_ = to;
      version_ = storage->version();
    }
    v.data = dst;
    v.dtype = to;
    return v;
  }

  // After the GEMM that read Get's result: once the conversion has served
  // its second GEMM (a hit: the pair NOTE [converted A reuse] describes is
  // complete), its buffer goes back to the CPU cache (NOTE [transient gemm
  // buffers] in dnnl_gemm.cc). Measured on the wide GPT step (peak RSS after
  // 30 steps): O1 303 -> 297 MiB, O1 with the FP8/FP16 AdamW state 234 ->
  // 227, O2 on the FP32-FMA path 297 -> 292.
  void AfterUse() {
    if (!last_hit_) return;
    buffer_.Release();
    storage_.reset();
    last_hit_ = false;
  }

 private:
  Workspace buffer_;
  bool last_hit_ = false;
  std::weak_ptr<Storage> storage_;
  const void* data_ = nullptr;
  int64_t span_ = 0;
  DType from_ = DType::kFloat32, to_ = DType::kFloat32;
  uint64_t version_ = 0;
};

// The calling thread's A conversions, one per target dtype.
ConvertedOperand& ThreadConvertedA(DType to) {
  thread_local ConvertedOperand bf16, f32;
  return to == DType::kBFloat16 ? bf16 : f32;
}

// ---- the FP32-FMA path for BF16 and FP8 operands ------------------------------------
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
//   oneDNN's gemm:jit plus the passes (simulated on the Zen 5).

// For the call only, as the GEMMs' own (NOTE [transient gemm buffers] in
// dnnl_gemm.cc).
struct WidenBuffers {
  Workspace out, bias;
};
WidenBuffers& ThreadWidenBuffers() {
  thread_local WidenBuffers buffers;
  return buffers;
}

// out = a·b (* *scale when scale is set) (+ bias) with f32 FMAs. a, b: bf16
// or FP8 (their bytes; the FP8 scales are the caller's `scale`), or b f32
// rounded to bf16 values (NOTE [narrowed B] in dnnl_gemm.cc); bias: (N) f32
// or bf16, or undefined; out: contiguous f32 or bf16.
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

// ---- f64: octet's own kernel (gradcheck and references) ---------------------------------

// a (Ba..., M, K), b (Bb..., K, N), out (B..., M, N) contiguous, bias (N) or
// undefined. One output row per task, k outer and n inner so the inner loop
// streams a row of b and vectorises; b is packed to unit column stride first.
void MatmulF64(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const Tensor bc = (b.stride(-1) == 1 || b.size(-1) == 1) ? b : b.Contiguous();
  const int64_t r = out.dim(), M = out.size(r - 2), N = out.size(r - 1), K = a.size(r - 1);
  const int64_t batch = out.numel() / (M * N);
  std::vector<int64_t> a_off(batch, 0), b_off(batch, 0);
  for (int64_t bi = 0; bi < batch; ++bi) {
    int64_t rem = bi;
    for (int64_t d = r - 3; d >= 0; --d) {
      const int64_t idx = rem % out.size(d);
      rem /= out.size(d);
      if (a.size(d) != 1) a_off[bi] += idx * a.stride(d);
      if (bc.size(d) != 1) b_off[bi] += idx * bc.stride(d);
    }
  }
  const double* ap = a.data<double>();
  const double* bp = bc.data<double>();
  double* op = out.data<double>();
  const Tensor bias_c = bias.defined() ? bias.Contiguous() : Tensor();
  const double* biasp = bias_c.defined() ? bias_c.data<double>() : nullptr;
  const int64_t sam = a.stride(r - 2), sak = a.stride(r - 1), sbk = bc.stride(r - 2);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(N * K, 1));
  ParallelFor(batch * M, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bi = row / M, m = row % M;
      double* c = op + row * N;
      std::fill(c, c + N, 0.0);
      const double* arow = ap + a_off[bi] + m * sam;
      const double* bb = bp + b_off[bi];
      for (int64_t k = 0; k < K; ++k) {
        const double av = arow[k * sak];
        const double* brow = bb + k * sbk;
        for (int64_t n = 0; n < N; ++n) c[n] += av * brow[n];
      }
      if (biasp != nullptr)
        for (int64_t n = 0; n < N; ++n) c[n] += biasp[n];
    }
  });
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

bool DecideF32Sgemm() {
  static constexpr ::octet::internal::EnvValue kValues[] = {
      {"matmul", "the default: oneDNN's matmul primitive, B packed by octet"},
      {"sgemm", "oneDNN's sgemm for the GEMMs whose B octet would pack"}};
  return ::octet::internal::ReadEnvChoice("OCTET_CPU_F32_GEMM", kValues, 0) == 1;
}

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
