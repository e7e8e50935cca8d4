// The CPU GEMMs on oneDNN matmul primitives (see dnnl_gemm.h): operands prepared, B packed, run.
//
// NOTE [packed weights]: oneDNN's brgemm kernels read B fastest in a
// blocked layout of their own (format_tag::any; for bf16, pairs of K rows
// interleaved VNNI style). Handed a plain B they repack panels on the fly,
// for every block of rows, which measured 10-15% slower here for the GPT
// shapes (f32 2048^3: 396 -> 459 GFLOP/s, bf16: 813 -> 930). With pack_b the
// primitive is created for format_tag::any and B is packed into that layout
// first (one pass over B, into a thread-local buffer): bf16 (and FP8, which
// is converted in the same pass) by octet's packer (gemm_pack.h) — oneDNN's
// bf16 reorder runs at 31 GB/s from a row-major B and 7-15 GB/s from a
// column-major one, 2-4x slower — and f32 (from f32 or bf16) likewise by
// octet's packer, since oneDNN's f32 reorder took 1.0 ms for a 768 x 3072 B
// (8 % of the GEMM). Other layouts fall back to a oneDNN reorder. Whether
// packing pays is the caller's decision (WorthPacking in matmul_cpu.cc).
//
// NOTE [narrowed B]: a bf16 GEMM may take an f32 B (b_user_dtype f32): an
// amp Linear's FP32 master weight (NOTE [cast linear] in ops/matmul.h). Its
// values are rounded to bf16 on the way in, exactly as FloatToBf16Bits
// rounds (nearest even, NaN to the canonical NaN), fused with the packing:
// the GEMM then gives the same bits as one on a bf16 copy of B, without the
// pass that makes the copy and the pass that reads it. On the FP32-FMA path
// (b_round_bf16) the f32 values are rounded to bf16 precision and kept in
// f32, so both paths compute on the same values.
//
// NOTE [f32 GEMM efficiency]: issue 12 asks for f32 GEMMs at 85 % of the
// FP32 FMA peak; on two threads they reach 74-82 % (octet_matmul_bench
// Matmul/f32, Zen 5, 2026-11-24). Measured why: the primitive alone on one
// thread runs at 84-89 % of one core's peak, and two single-threaded
// processes side by side keep 83-87 % each, so neither the cores nor the
// memory system are the bound; on two threads in one process the primitive
// alone reaches 80-82 % (ONEDNN_VERBOSE execution times; 86 % in a bare
// program with a prepacked B) and the whole call 74-79 %: packing B
// (PackF32B, ~3.5 % of the samples) and the wait at the end of oneDNN's
// parallel region (libgomp, ~7.5 %) are the difference; fresh output pages
// are not (the CPU allocator caches them). Splitting one GEMM into halves
// run one per thread did not help (378/350 against 367/370 GFLOP/s,
// 1024x3072x768, bare program), nor did OMP_PROC_BIND. A blocked GEMM of
// octet's own was tried and not kept: a 12 x 32 AVX-512 register tile (24
// accumulators; alone it runs at 95-98 % of peak), B packed once into
// 32-column panels by PackF32B, threads splitting M, row-major f32 A read
// in place and any other A widened per block (which would also have removed
// the FP32-FMA path's A and output passes, NOTE [CPU GEMM path]). It matched
// oneDNN where B fits in L2 (1024x768x768 on two threads: 347-348 against
// 341-359 GFLOP/s) and fell 15-20 % behind where it does not (N or K 3072,
// 2048^3: 65-75 % of peak), on one thread as on two; the loss is in
// streaming B panels from L3. Larger M blocks did not recover it, and the
// ±20 % run-to-run noise of the VM it was measured on left it untuned.
// Nor do Debian's other BLAS libraries reach it: alternating with
// octet_matmul_bench on the four Matmul/f32 shapes (two threads, Zen 5,
// 2026-11-24), octet through oneDNN 346-359 GFLOP/s (80-83 % of peak, the
// whole call), OpenBLAS 0.3.21's SGEMM with its Cooperlake kernels 314-350
// and BLIS 0.9 with its skx kernels 299-350 (bare calls, row-major
// operands). Left to detect this CPU, BLIS 0.9 runs its generic kernels (55
// GFLOP/s). Nor does LIBXSMM 1.17 (Debian's libxsmm-dev, static only;
// 2026-11-28): its JIT f32 micro-kernel runs at 98-100 % of a thread's peak
// on cached operands, like the blocked GEMM above, but its OpenMP GEMM
// (libxsmm_sgemm_omp, libxsmmext) reached 330-354 GFLOP/s on the three GPT
// shapes and 187-211 at 2048^3, best of 7, against octet's 357-371 and 384
// in the same sitting. Its bf16 kernels without the dot-product instruction
// (LIBXSMM_TARGET=skx: bf16 widened inside the kernel) run at 130-141
// GFLOP/s a thread, 62 % of the FP32 FMA peak, so they are no FP32-FMA path
// either (NOTE [FP32-FMA path costs] in widened_gemm.cc).
//
// NOTE [gemm thread split]: oneDNN splits a GEMM's work between the threads
// once, evenly, so a thread on a slower core sets the pace. The VMs issue
// 12 is measured on have such cores: pinned, one vCPU ran an FMA-bound loop
// 1.2-1.3x and a streaming loop 1.2-1.4x slower than the other (minutes
// later the two were equal again), and perf of a small O2 step showed one
// thread idle in libgomp for 23 % of its samples, among them 11 % of the
// time the other spent in oneDNN's GEMMs. Running each large GEMM instead
// as row chunks, each a oneDNN primitive planned for one thread and claimed
// by whichever thread is free, with B packed once and shared, was measured
// (2026-11-24, alternating runs): octet_matmul_bench Matmul bf16/f32 at M =
// 1024 unchanged within noise with 4, 8 or 16 chunks (bf16 704-758 against
// 730-772 GFLOP/s), and the small GPT step with 16 chunks 7-12 % slower
// (three rounds: O2 49.7-50.8 against 45.7-46.7 ms, O1 55.3-57.6 against
// 49.6-51.3): one-thread primitives on short row blocks lose more than the
// balance gains. So oneDNN keeps its own split. With one or two blocks per
// thread (2026-11-25, to keep the FP32-FMA path's conversions in cache:
// NOTE [FP32-FMA path costs] in widened_gemm.cc) the one-thread primitives
// matched oneDNN's split in a bare program (1024x768x256 f32: 1.10-1.23
// against 1.10-1.20 ms; 1024x3072x768 14.2-14.7 against 14.2-14.7 ms) and
// gave the step nothing either.
#include <octet/ops/cpu/dnnl_gemm.h>

#include <octet/core/allocator.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <octet/core/bf16_simd_internal.h>
#include <octet/core/convert.h>
#include <octet/ops/cpu/amx_gemm.h>
#include <octet/ops/cpu/dnnl_primitive.h>
#include <octet/ops/cpu/gemm_pack.h>
#include <octet/ops/cpu/gemm_timing.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/matmul_kernels.h>

namespace octet::cpu {

Workspace::~Workspace() { Release(); }

void Workspace::Release() {
  if (data_ != nullptr) GetAllocator(DeviceType::kCPU).Free(data_, capacity_, kCPU);
  data_ = nullptr;
  capacity_ = 0;
}

ReleaseOnExit::ReleaseOnExit(std::initializer_list<Workspace*> workspaces) {
  OCTET_CHECK(workspaces.size() <= kMax, "ReleaseOnExit: at most ", kMax, " workspaces, got ", workspaces.size());
  for (Workspace* w : workspaces) workspaces_[count_++] = w;
}

ReleaseOnExit::~ReleaseOnExit() {
  for (size_t i = 0; i < count_; ++i) workspaces_[i]->Release();
}

void* Workspace::Get(size_t bytes) {
  if (bytes > capacity_) {
    Release();
    const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
    data_ = GetAllocator(DeviceType::kCPU).Allocate(rounded, kCPU);
    capacity_ = rounded;
  }
  return data_;
}

int64_t SpanOf(const Shape& dims, const Shape& strides) {
  int64_t span = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) return 0;
    span += (dims[d] - 1) * strides[d];
  }
  return span;
}

void ConvertElements(const void* src, DType from, DType to, int64_t n, void* dst) {
  if (IsFp8(from) && to == DType::kBFloat16) {
    const uint8_t* s = static_cast<const uint8_t*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) { Fp8ToBf16Row(s + b, from, d + b, e - b); });
  } else if (IsFp8(from) && to == DType::kFloat32) {
    const uint8_t* s = static_cast<const uint8_t*>(src);
    float* d = static_cast<float*>(dst);
    // x * 1.0f is exact: every FP8 value is an f32 value.
    ParallelFor(n, 1 << 15, [&](int64_t b, int64_t e) { DequantizeRow(s + b, from, 1.0f, d + b, e - b); });
  } else if (from == DType::kBFloat16 && to == DType::kFloat32) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    ParallelFor(n, 1 << 15, [&](int64_t b, int64_t e) { Bf16ToFloatRow(s + b, d + b, e - b); });
  } else if (from == DType::kFloat32 && to == DType::kBFloat16) {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    ParallelFor(n, 1 << 15, [&](int64_t b, int64_t e) { FloatToBf16Row(s + b, d + b, e - b); });
  } else {
    OCTET_FAIL("matmul: no operand conversion from ", Name(from), " to ", Name(to));
  }
}

void RoundElementsToBf16(const float* src, int64_t n, float* dst) {
  ParallelFor(n, 1 << 15, [&](int64_t b, int64_t e) { convert_internal::RoundToBf16Row(src + b, e - b, dst + b); });
}

namespace {

using dnnl::memory;

// NOTE [transient gemm buffers]: a GEMM's packed B, scratchpads and padded
// or plain copies live for the call only. They come from octet's CPU cache
// and go back to it when the call ends (ReleaseOnExit), so that between GEMMs
// their memory serves activations and the next GEMM reuses pages already
// touched. Kept per thread for the whole run, as they were, they held the
// largest GEMM's buffers resident on top of everything else. Measured on the
// wide GPT step (2 layers, width 768, T=256, B=4; octet_train_step_bench
// peak RSS): O0 332 -> 323 MiB, O1 312 -> 304, O2 280 -> 274, the step time
// unchanged (docs/cpu-speed.md, 2026-11-28, seventh session).
struct DnnlBuffers {
  Workspace scratchpad, pack_scratchpad, packed_b, b_plain, a_padded;
};
DnnlBuffers& ThreadDnnlBuffers() {
  thread_local DnnlBuffers buffers;
  return buffers;
}

// `runs` runs of `len` elements, src_ld elements apart at src, each made by
// prepare(in, out) dst_ld elements apart in ws: the padded copies of NOTE
// [column-major A] and NOTE [row-major B beside a column-major A] (in
// dnnl_primitive.cc). prepare runs inside the parallel region.
template <class Prepare>
const void* PaddedRuns(const void* src, size_t src_elem, size_t dst_elem, int64_t runs, int64_t len, int64_t src_ld,
                       int64_t dst_ld, Workspace& ws, Prepare prepare) {
  char* dst = static_cast<char*>(ws.Get(static_cast<size_t>(dst_ld * (runs - 1) + len) * dst_elem));
  const char* in = static_cast<const char*>(src);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / len);
  ParallelFor(runs, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      prepare(in + static_cast<size_t>(r * src_ld) * src_elem, dst + static_cast<size_t>(r * dst_ld) * dst_elem);
  });
  return dst;
}

// a's columns copied a_ld apart into ws (NOTE [column-major A]).
const void* PaddedA(const MatView& a, int64_t a_ld, Workspace& ws) {
  const int64_t m = a.dims[0], k = a.dims[1];
  const size_t elem = SizeOf(a.dtype);
  g_padded_a.fetch_add(1, std::memory_order_relaxed);
  return PaddedRuns(a.data, elem, elem, k, m, a.strides[1], a_ld, ws,
                    [&](const char* in, char* out) { std::memcpy(out, in, static_cast<size_t>(m) * elem); });
}

// What spec.b holds that a reader of b.dtype needs converted: FP8 codes, or
// a user dtype other than the one the reader (a oneDNN reorder) widens
// itself; nullopt when b's elements are b.dtype's.
std::optional<DType> BConversionSource(const DnnlGemmSpec& spec, std::optional<DType> reader_widens) {
  return spec.b_fp8 ? spec.b_fp8 : spec.b_user_dtype != reader_widens ? spec.b_user_dtype : std::nullopt;
}

// n of spec.b's elements at in, as a reader of b.dtype takes them, at out:
// converted exactly from `from`, rounded to bf16 precision (a rounded f32 B,
// RoundElementsToBf16), or copied. On the OpenMP pool, or on the calling
// thread inside a parallel region.
void PrepareBElements(const DnnlGemmSpec& spec, std::optional<DType> from, const void* in, int64_t n, void* out) {
  if (from)
    ConvertElements(in, *from, spec.b.dtype, n, out);
  else if (spec.b_round_bf16)
    RoundElementsToBf16(static_cast<const float*>(in), n, static_cast<float*>(out));
  else
    std::memcpy(out, in, static_cast<size_t>(n) * SizeOf(spec.b.dtype));
}

// PreparedB's B (reader_widens: none) with its rows b_ld elements apart in
// ws (NOTE [row-major B beside a column-major A] in dnnl_primitive.cc): b is
// 2-D and row-major.
const void* PaddedB(const DnnlGemmSpec& spec, int64_t b_ld, Workspace& ws) {
  const MatView& b = spec.b;
  const int64_t n = b.dims[1];
  const std::optional<DType> from = BConversionSource(spec, std::nullopt);
  g_padded_b.fetch_add(1, std::memory_order_relaxed);
  return PaddedRuns(b.data, SizeOf(from.value_or(b.dtype)), SizeOf(b.dtype), b.dims[0], n, b.strides[0], b_ld, ws,
                    [&](const char* in, char* out) { PrepareBElements(spec, from, in, n, out); });
}

// spec.b's elements as a reader of b.dtype takes them — a oneDNN reorder
// (which itself widens a B held in `reader_widens`) or the primitive: FP8
// codes and any other user dtype converted, a rounded f32 B rounded, into ws
// with the same strides (the span from the first to the last element);
// anything else as it is.
const void* PreparedB(const DnnlGemmSpec& spec, std::optional<DType> reader_widens, Workspace& ws) {
  const std::optional<DType> from = BConversionSource(spec, reader_widens);
  if (!from && !spec.b_round_bf16) return spec.b.data;
  const int64_t span = std::max<int64_t>(SpanOf(spec.b.dims, spec.b.strides), 1);
  void* dst = ws.Get(static_cast<size_t>(span) * SizeOf(spec.b.dtype));
  PrepareBElements(spec, from, spec.b.data, span, dst);
  return dst;
}

std::string ViewStr(const MatView& v) {
  return std::string(Name(v.dtype)) + ShapeStr(v.dims) + " strides " + ShapeStr(v.strides);
}

// Whether spec, packed as p, runs on octet's AMX GEMM (NOTE [amx gemm] in
// amx_gemm.cc): a bf16 A read in place row-major, an f32 or bf16 out
// row-major (rows at least a row apart, as AmxGemm requires), no batch, a
// geometry AmxGemm takes, and N <= 3 K.
bool RunsOnAmxGemm(const DnnlGemmSpec& s, const Primitive& p) {
  if (!p.vnni_pack || p.a_ld > 0 || s.a.dtype != DType::kBFloat16 || !AmxGemmEnabled()) return false;
  const size_t r = s.out.dims.size();
  for (size_t d = 0; d + 2 < r; ++d)
    if (s.a.dims[d] != 1 || s.b.dims[d] != 1 || s.out.dims[d] != 1) return false;
  const int64_t k = s.a.dims[r - 1], n = s.out.dims[r - 1];
  if (n > 3 * k) return false;  // oneDNN's kernels are faster there (NOTE [amx gemm])
  return s.a.strides[r - 1] == 1 && s.a.strides[r - 2] >= k && s.out.strides[r - 1] == 1 &&
         s.out.strides[r - 2] >= n && AmxGemmTakes(p.layout, k, s.out.dtype);
}

// spec's GEMM on octet's AMX GEMM, with B already packed.
void RunAmxGemm(const DnnlGemmSpec& s, const uint16_t* packed, const PackedBLayout& layout, const void* bias,
                const float* scale) {
  const size_t r = s.out.dims.size();
  AmxGemmArgs g;
  g.a = static_cast<const uint16_t*>(s.a.data);
  g.lda = s.a.strides[r - 2];
  g.b = packed;
  g.layout = layout;
  g.m = s.out.dims[r - 2];
  g.n = s.out.dims[r - 1];
  g.k = s.a.dims[r - 1];
  g.out = const_cast<void*>(s.out.data);
  g.ldc = s.out.strides[r - 2];
  g.out_dtype = s.out.dtype;
  thread_local std::vector<float> bias_f32;
  if (s.bias_mode != BiasMode::kNone) {
    bias_f32.resize(static_cast<size_t>(g.n));
    for (int64_t j = 0; j < g.n; ++j)
      bias_f32[j] = s.bias_dtype == DType::kBFloat16
                        ? Bf16BitsToFloat(static_cast<const uint16_t*>(bias)[j * s.bias_stride])
                        : static_cast<const float*>(bias)[j * s.bias_stride];
    g.bias = bias_f32.data();
    g.bias_first = s.bias_mode == BiasMode::kArg;
  }
  g.scale = s.scale ? scale : nullptr;
  AmxGemm(g);
  g_amx_gemms.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

bool DnnlHasBf16Matmul() {
  static const bool has = [] {
    try {
      const memory::desc md({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), Engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

bool DnnlTakesBlockedF32B() {
  static const bool blocked = [] {
    const memory::desc a({300, 600}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc b({600, 700}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc out({300, 700}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, out), Engine());
    return !IsPlain(pd.weights_desc());
  }();
  return blocked;
}

bool DnnlUsesAmxBf16() {
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
}

void RunDnnlGemm(const DnnlGemmSpec& spec, const void* bias, const float* scale) {
  try {
    std::shared_ptr<const Primitive> p = CachedPrimitive(spec);
    dnnl::engine& eng = Engine();
    std::unordered_map<int, memory> args;
    DnnlBuffers& buffers = ThreadDnnlBuffers();
    const ReleaseOnExit release({&buffers.scratchpad, &buffers.pack_scratchpad, &buffers.packed_b, &buffers.b_plain,
                                 &buffers.a_padded});  // NOTE [transient gemm buffers]
    const void* a_data = p->a_ld > 0 ? PaddedA(spec.a, p->a_ld, buffers.a_padded) : spec.a.data;
    args.emplace(DNNL_ARG_SRC, memory(p->a_md, eng, const_cast<void*>(a_data)));
    // What b.data holds: FP8 codes, a bf16 or f32 b_user_dtype, or b.dtype.
    const DType b_source = spec.b_fp8 ? *spec.b_fp8 : spec.b_user_dtype.value_or(spec.b.dtype);
    std::optional<GemmTimer> pack_timer(std::in_place, GemmTimer::kPack);
    if (p->f32_pack) {
      // See NOTE [packed weights]; a bf16 or FP8 B is widened, a rounded f32
      // one rounded, in the same pass.
      void* packed = buffers.packed_b.Get(p->b_md.get_size());
      PackF32B(spec.b.data, b_source, spec.b.dims[0], spec.b.dims[1], spec.b.strides[0], spec.b.strides[1], p->layout,
               static_cast<float*>(packed), spec.b_round_bf16);
      g_packed_b.fetch_add(1, std::memory_order_relaxed);
      args.emplace(DNNL_ARG_WEIGHTS, memory(p->b_md, eng, packed));
    } else if (p->vnni_pack) {
      // See NOTE [packed weights]; FP8 is converted, f32 rounded, in the same pass.
      void* packed = buffers.packed_b.Get(p->b_md.get_size());
      PackVnniB(spec.b.data, b_source, spec.b.dims[0], spec.b.dims[1], spec.b.strides[0], spec.b.strides[1], p->layout,
                static_cast<uint16_t*>(packed));
      g_packed_b.fetch_add(1, std::memory_order_relaxed);
      if (RunsOnAmxGemm(spec, *p)) {
        pack_timer.reset();
        GemmTimer execute_timer(GemmTimer::kExecute);
        RunAmxGemm(spec, static_cast<const uint16_t*>(packed), p->layout, bias, scale);
        return;
      }
      args.emplace(DNNL_ARG_WEIGHTS, memory(p->b_md, eng, packed));
    } else if (p->packed) {
      // oneDNN's reorder packs what octet's converters made of B (b_user_md).
      const void* b_data = PreparedB(spec, ReorderSource(spec), buffers.b_plain);
      memory packed(p->b_md, eng, buffers.packed_b.Get(p->b_md.get_size()));
      std::unordered_map<int, memory> pack_args;
      pack_args.emplace(DNNL_ARG_FROM, memory(p->b_user_md, eng, const_cast<void*>(b_data)));
      pack_args.emplace(DNNL_ARG_TO, packed);
      if (p->pack_scratch_md.get_size() > 0)
        pack_args.emplace(DNNL_ARG_SCRATCHPAD,
                          memory(p->pack_scratch_md, eng, buffers.pack_scratchpad.Get(p->pack_scratch_md.get_size())));
      p->pack.execute(Stream(), pack_args);
      g_b_reorders.fetch_add(1, std::memory_order_relaxed);
      args.emplace(DNNL_ARG_WEIGHTS, packed);
    } else {
      // Plain B (NOTE [plain weights] when pack_b was asked for), padded
      // where NOTE [row-major B beside a column-major A] says so.
      const void* b_data = p->b_ld > 0 ? PaddedB(spec, p->b_ld, buffers.b_plain)
                                       : PreparedB(spec, std::nullopt, buffers.b_plain);
      args.emplace(DNNL_ARG_WEIGHTS, memory(p->b_md, eng, const_cast<void*>(b_data)));
    }
    pack_timer.reset();
    args.emplace(DNNL_ARG_DST, memory(p->out_md, eng, const_cast<void*>(spec.out.data)));
    void* scratch = buffers.scratchpad.Get(std::max<size_t>(p->scratch_md.get_size(), 64));
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(p->scratch_md, eng, scratch));
    int post = 0;
    if (spec.scale) {
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post) | DNNL_ARG_SRC_1,
                   memory(p->scale_md, eng, const_cast<float*>(scale)));
      ++post;
    }
    if (spec.bias_mode == BiasMode::kArg) {
      args.emplace(DNNL_ARG_BIAS, memory(p->bias_md, eng, const_cast<void*>(bias)));
    } else if (spec.bias_mode == BiasMode::kPostOp) {
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post) | DNNL_ARG_SRC_1,
                   memory(p->bias_md, eng, const_cast<void*>(bias)));
    }
    GemmTimer execute_timer(GemmTimer::kExecute);
    p->prim.execute(Stream(), args);
    Stream().wait();
  } catch (const dnnl::error& e) {
    const bool bf16 = spec.a.dtype == DType::kBFloat16 || spec.b.dtype == DType::kBFloat16;
    OCTET_FAIL("matmul: oneDNN failed (", e.what(), ", status ", static_cast<int>(e.status), ") for a ",
               ViewStr(spec.a), " x b ", ViewStr(spec.b), " -> ", ViewStr(spec.out),
               bf16 && !DnnlHasBf16Matmul()
                   ? "; this CPU's oneDNN has no bf16 matmul (it needs AVX-512): BF16 and FP8 GEMMs run on the "
                     "FP32-FMA path here, which OCTET_CPU_GEMM=bf16 overrides"
                   : "");
  }
}

MatmulCacheStats GetMatmulCacheStats() { return PrimitiveCacheStats(); }
void ClearMatmulCacheForTesting() { ClearPrimitiveCache(); }

}  // namespace octet::cpu
