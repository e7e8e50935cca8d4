// oneDNN matmul primitives for the CPU GEMMs: made and cached (see
// dnnl_primitive.h).
//
// NOTE [oneDNN primitive cache]: creating a matmul primitive costs 0.1-10 ms
// (JIT code generation), so primitives are cached by everything that shapes
// the generated code: dims, strides and dtypes of every operand, the bias and
// the post-ops, whether B is packed, and the thread count. A primitive keeps
// the thread count it was created with (oneDNN reads omp_get_max_threads()
// then, splits the work for that many and runs that many): keyed without it,
// a shape first met at 1 thread ran at 1 thread for the rest of the process
// after the program raised the count to 2 (f32 1024 x 768 x 3072 29.5 ms
// against 15.0), a worker thread set to 1 ran the 2-thread primitive its
// main thread had made, and the bits of a GEMM whose blocking depends on
// the count (the bf16 weight gradients of a width-128 GPT) came from
// whichever thread made it first. Called from inside a parallel region of
// the program's own, a GEMM runs on the calling thread alone, so its
// primitive is made for one thread (oneDNN would otherwise plan for the
// thread's nthreads-var and give that count's bits): the bits of a one-thread
// run (Threads.CallsFromInsideTheProgramsOwnParallelRegionGiveTheBitsOfAOneThreadRun in
// tests/nn/threads_test.cc). The cache is an LRU map guarded by a
// mutex; primitives themselves are immutable and safe to execute from
// several threads. Each execution brings its own scratchpad
// (scratchpad_mode::user, grow-only thread-local buffers), so concurrent
// calls never share one. oneDNN's Debian build runs on OpenMP: the same
// thread pool as every other CPU kernel.
#include <octet/ops/cpu/dnnl_primitive.h>

#include <omp.h>

#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <octet/core/error.h>
#include <octet/ops/cpu/loops.h>

namespace octet::cpu {

std::atomic<int64_t> g_plain_b{0}, g_b_reorders{0}, g_padded_a{0}, g_padded_b{0}, g_amx_gemms{0}, g_packed_b{0};

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& Stream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

// Whether md is a plain (row- or column-major, unblocked) layout.
bool IsPlain(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  return d.format_kind == dnnl_blocked && d.format_desc.blocking.inner_nblks == 0;
}

// The dtype a packing reorder reads B in when it is not b.dtype: a bf16 B of
// an f32 GEMM, which oneDNN's reorder widens exactly itself. Every other
// conversion (FP8 codes, a narrowed f32 B, a rounded f32 B) is octet's,
// before the reorder or in its own packers (NOTE [narrowed B]), so it does
// not shape a primitive.
std::optional<DType> ReorderSource(const DnnlGemmSpec& s) {
  return s.b_user_dtype == DType::kBFloat16 ? s.b_user_dtype : std::nullopt;
}

namespace {

using dnnl::memory;

memory::data_type DnnlType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return memory::data_type::f32;
    case DType::kBFloat16: return memory::data_type::bf16;
    default: OCTET_FAIL("matmul: oneDNN path does not take ", Name(dtype));
  }
}

memory::desc Md(const Shape& dims, const Shape& strides, DType dtype) {
  return memory::desc(memory::dims(dims.begin(), dims.end()), DnnlType(dtype),
                      memory::dims(strides.begin(), strides.end()));
}

// md's blocks of kb x nb as a PackedBLayout, if octet's packers can write it.
bool LayoutOf(const dnnl_memory_desc_t& d, int64_t kb, int64_t nb, PackedBLayout* out) {
  if (kb <= 0 || kb > 32 || nb <= 0 || nb > 64 || d.padded_dims[0] % kb != 0 || d.padded_dims[1] % nb != 0)
    return false;
  const dnnl_blocking_desc_t& bl = d.format_desc.blocking;
  *out = {.k_padded = d.padded_dims[0],
          .k_block = kb,
          .n_padded = d.padded_dims[1],
          .n_block = nb,
          .stride_kb = bl.strides[0],
          .stride_nb = bl.strides[1]};
  return out->stride_kb >= kb * nb && out->stride_nb >= kb * nb;
}

// The VNNI layout of ops/cpu/gemm_pack.h if md is one (2-D bf16, inner
// blocks 16a <nb>b 2a: 32-row K blocks of 16 pairs), else false.
bool AsVnniLayout(const memory::desc& md, PackedBLayout* out) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 2 || d.data_type != dnnl_bf16 || d.format_kind != dnnl_blocked || d.offset0 != 0) return false;
  const dnnl_blocking_desc_t& bl = d.format_desc.blocking;
  if (bl.inner_nblks != 3 || bl.inner_blks[0] != 16 || bl.inner_idxs[0] != 0 || bl.inner_idxs[1] != 1 ||
      bl.inner_blks[2] != 2 || bl.inner_idxs[2] != 0)
    return false;
  const int64_t nb = bl.inner_blks[1];
  const int64_t kb = bl.inner_blks[0] * bl.inner_blks[2];  // the a dim is blocked by 16 * 2
  return LayoutOf(d, kb, nb, out);
}

// The f32 blocked layout of ops/cpu/gemm_pack.h if md is one (2-D f32,
// inner blocks <kb>a <nb>b, e.g. BA16a64b), else false.
bool AsF32BlockedLayout(const memory::desc& md, PackedBLayout* out) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 2 || d.data_type != dnnl_f32 || d.format_kind != dnnl_blocked || d.offset0 != 0) return false;
  const dnnl_blocking_desc_t& bl = d.format_desc.blocking;
  if (bl.inner_nblks != 2 || bl.inner_idxs[0] != 0 || bl.inner_idxs[1] != 1) return false;
  const int64_t kb = bl.inner_blks[0], nb = bl.inner_blks[1];
  return LayoutOf(d, kb, nb, out);
}

// The thread count a primitive is made for and keyed by (NOTE [oneDNN
// primitive cache]): the calling thread's, or 1 inside a parallel region of
// the program's own, where octet's loops and oneDNN's run on the calling
// thread alone.
int PrimitiveThreads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

std::string KeyOf(const DnnlGemmSpec& s, int threads) {
  std::vector<int64_t> k;
  for (const MatView* v : {&s.a, &s.b, &s.out}) {
    k.push_back(static_cast<int64_t>(v->dtype));
    k.push_back(static_cast<int64_t>(v->dims.size()));
    k.insert(k.end(), v->dims.begin(), v->dims.end());
    k.insert(k.end(), v->strides.begin(), v->strides.end());
  }
  k.push_back(static_cast<int64_t>(s.bias_mode));
  k.push_back(static_cast<int64_t>(s.bias_dtype));
  k.push_back(s.bias_stride);
  k.push_back(s.scale);
  k.push_back(s.pack_b);
  // The user dtype shapes only a packing reorder; an unpacked B is converted
  // before the primitive sees it, so its primitive is the plain f32 one.
  const std::optional<DType> reorder_source = ReorderSource(s);
  k.push_back(s.pack_b && reorder_source ? static_cast<int64_t>(*reorder_source) : -1);
  k.push_back(threads);  // NOTE [oneDNN primitive cache]: a primitive runs its creation's count
  return std::string(reinterpret_cast<const char*>(k.data()), k.size() * sizeof(int64_t));
}

// NOTE [column-major A]: oneDNN 2.6's gemm:jit matmul (the f32 GEMM of
// CPUs without AVX-512, NOTE [plain weights]) reads a column-major A whose
// leading dimension is a multiple of 2 KiB at about half speed: its packing
// walks A's columns a leading dimension apart, and such strides fall into
// the same L1 sets. A Linear's weight gradient dW = dYᵀ·X has that A (dYᵀ,
// a leading dimension of dY's width). Measured on an AMD EPYC (Zen 3, AVX2,
// two threads, 2026-11-25; M x K x N, A column-major with leading dimension M,
// ms): 1024x1024x256 7.7-8.3 against 3.4-4.4 row-major; 512x1024x256 3.0-3.1
// against 2.1-2.3; 2048x1024x256 16.4-16.5 against 7.8-9.2; 3072x1024x256
// 22-25 against 11-12; 1024x4096x256 29-31 against 13-18. Leading
// dimensions 768, 800, 1000 and 1040 (x1024x256, random data) took 1.1-1.3x
// the row-major time, and a padded copy gave back little and not reliably
// (3.3 -> 2.9, 3.1 -> 3.6, 3.8 -> 3.5, 4.5 -> 4.4 ms; row-major 2.9, 2.5,
// 3.2, 3.5); 2304 (the wide GPT's qkv gradient, 2304x1024x768) ran the same
// padded as not (25.1 against 25.5 ms). Copying
// A column by column to a leading dimension 64 bytes longer costs a streaming
// pass and gives back the row-major speed (1024x1024x256 copy + matmul
// 4.5-4.7 ms, 3072x1024x256 12.9-15.9); transposing it to row-major cost
// about as much (4.1-5.1, 13.4-16.7) and no more was gained, so the copy
// keeps the orientation. Other implementations (brgemm, with AVX-512) keep A
// as it is: nothing was measured there.
constexpr int64_t kAliasingStrideBytes = 2048;
constexpr int64_t kPadBytes = 64;

// Whether pd runs on oneDNN's gemm:jit (the GEMMs both paddings are for).
bool RunsGemmJit(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("gemm:jit", 0) == 0;
}

// The leading dimension to copy a to before a gemm:jit matmul, or 0.
int64_t PaddedLeadingDim(const MatView& a, const dnnl::matmul::primitive_desc& pd) {
  if (a.dims.size() != 2 || a.dims[0] < 2 || a.dims[1] < 2 || a.strides[0] != 1) return 0;
  const int64_t elem = static_cast<int64_t>(SizeOf(a.dtype));
  if (a.strides[1] < a.dims[0] || (a.strides[1] * elem) % kAliasingStrideBytes != 0) return 0;
  if (!RunsGemmJit(pd)) return 0;
  return a.strides[1] + kPadBytes / elem;
}

// NOTE [row-major B beside a column-major A]: the same gemm:jit matmul reads
// a row-major B slowly when A is column-major (a weight gradient dW = dYᵀ·X,
// B = X) and B's rows are a multiple of 512 bytes apart: consecutive rows
// then start in at most 8 of the L1's 64 sets (a set is an address's bits
// 6-11), and the kernel, walking down B's rows, evicts what it just read.
// Every power-of-two width from 128 floats up is such a width, and 384,
// 640, 768, 2304 and 3072 are too. Measured on an AMD EPYC (Zen 3, AVX2, two
// threads, 2026-11-29; M x K x N, A column-major, B row-major with leading
// dimension N against N + 16, medians of 21, ms): 256x1024x1024 6.3-6.6
// against 3.1-3.3 (the small GPT's fc2 gradient, 26 ms of its 170 ms O0
// step), 128x1024x3072 10.2 against 4.8, 64x1024x1024 1.64 against 0.80,
// 256x1024x768 5.2 against 2.3, 128x2048x512 (train_gpt's default fc2
// gradient) 2.39 against 1.53, 256x1024x512 2.28 against 1.52, 512x1024x1024
// 8.2 against 6.2, 256x1024x384 1.49 against 1.14, 256x1024x256 1.00 against
// 0.76, 768x1024x256 2.83 against 2.33, 384x2048x128 1.41 against 1.23,
// 768x1024x3072 28.0 against 26.0, 256x1024x2304 8.2 against 6.8; at
// 256x1024x1024 the rows 4 KiB + 16, 64, 128, 256 bytes apart ran 3.2-3.4 ms,
// 4.5 KiB (8 sets) 3.7, 5 KiB (4 sets) 4.0, 6 KiB (2 sets) 4.5, 8 KiB (1
// set) 6.5. Widths not a multiple of 512 bytes (1000, 992 floats) ran as
// fast as padded; a row-major A is read another way, and its GEMMs ran the
// same either way (1024x256x1024, 2048x128x512, 2048x512x128); below 128
// columns nothing was gained (256x1024x64 0.206 against 0.201). So such a B
// is copied with rows 64 bytes further apart, one pass over B, fused with
// its conversion on the FP32-FMA path (which converts B span-wise anyway).
constexpr int64_t kAliasingBRowBytes = 512;
constexpr int64_t kPadBMinColumns = 128;

// The leading dimension to copy b to before a gemm:jit matmul, or 0.
int64_t PaddedLeadingDimB(const DnnlGemmSpec& s, const dnnl::matmul::primitive_desc& pd) {
  const MatView &a = s.a, &b = s.b;
  if (a.dims.size() != 2 || b.dims.size() != 2) return 0;
  if (a.strides[0] != 1 || a.dims[0] < 2 || a.dims[1] < 2 || a.strides[1] < a.dims[0]) return 0;  // column-major A
  if (b.strides[1] != 1 || b.dims[0] < 2 || b.dims[1] < kPadBMinColumns || b.strides[0] < b.dims[1]) return 0;
  const int64_t elem = static_cast<int64_t>(SizeOf(b.dtype));
  if ((b.strides[0] * elem) % kAliasingBRowBytes != 0) return 0;
  if (!RunsGemmJit(pd)) return 0;
  // Measured on the AVX2 kernels only (oneDNN's AVX-512 gemm:jit already
  // avoids its direct-read kernels for leading dimensions that are multiples
  // of 256 elements).
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  if ((static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & avx512) == avx512) return 0;
  return b.strides[0] + kPadBytes / elem;
}

std::shared_ptr<const Primitive> CreatePrimitive(const DnnlGemmSpec& s) {
  auto p = std::make_shared<Primitive>();
  p->a_md = Md(s.a.dims, s.a.strides, s.a.dtype);
  p->b_md = Md(s.b.dims, s.b.strides, s.b.dtype);
  const std::optional<DType> reorder_source = ReorderSource(s);
  p->b_user_md = reorder_source ? Md(s.b.dims, s.b.strides, *reorder_source) : p->b_md;
  if (s.pack_b) {
    p->b_md = memory::desc(memory::dims(s.b.dims.begin(), s.b.dims.end()), DnnlType(s.b.dtype),
                           memory::format_tag::any);
  }
  p->out_md = Md(s.out.dims, s.out.strides, s.out.dtype);
  const size_t r = s.out.dims.size();
  Shape bias_dims(r, 1), bias_strides(r, 1);
  bias_dims[r - 1] = s.out.dims[r - 1];
  bias_strides[r - 1] = s.bias_stride;
  for (size_t d = r - 1; d-- > 0;) bias_strides[d] = bias_strides[d + 1] * bias_dims[d + 1];
  if (s.bias_mode != BiasMode::kNone) p->bias_md = Md(bias_dims, bias_strides, s.bias_dtype);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops ops;
  if (s.scale) {
    p->scale_md = Md(Shape(r, 1), Shape(r, 1), DType::kFloat32);
    ops.append_binary(dnnl::algorithm::binary_mul, p->scale_md);
  }
  if (s.bias_mode == BiasMode::kPostOp) ops.append_binary(dnnl::algorithm::binary_add, p->bias_md);
  if (ops.len() > 0) attr.set_post_ops(ops);
  auto make_pd = [&] {
    const dnnl::matmul::desc desc = s.bias_mode == BiasMode::kArg
                                        ? dnnl::matmul::desc(p->a_md, p->b_md, p->bias_md, p->out_md)
                                        : dnnl::matmul::desc(p->a_md, p->b_md, p->out_md);
    return dnnl::matmul::primitive_desc(desc, attr, Engine());
  };
  dnnl::matmul::primitive_desc pd = make_pd();
  if (s.pack_b && IsPlain(pd.weights_desc())) {
    // NOTE [plain weights]: an implementation without a blocked weights
    // layout (oneDNN 2.6's gemm:jit, what AVX2-only CPUs get) asks for a
    // plain B. Packing would then be a oneDNN reorder into the same kind of
    // layout, and its bf16 -> f32 reorder has no JIT kernel on such CPUs
    // (simple:any: 5 ms for a 1024 x 256 B, more than the GEMM). So the
    // primitive is made again for b's own geometry, and b goes in as it is,
    // or converted span-wise by octet's converters.
    p->b_md = Md(s.b.dims, s.b.strides, s.b.dtype);
    pd = make_pd();
    p->plain = true;
    g_plain_b.fetch_add(1, std::memory_order_relaxed);
  }
  if (const int64_t a_ld = PaddedLeadingDim(s.a, pd); a_ld > 0) {
    p->a_ld = a_ld;
    p->a_md = Md(s.a.dims, {1, a_ld}, s.a.dtype);
    pd = make_pd();
  }
  // NOTE [row-major B beside a column-major A]: only a B read as it is.
  if (const int64_t b_ld = !s.pack_b || p->plain ? PaddedLeadingDimB(s, pd) : 0; b_ld > 0) {
    p->b_ld = b_ld;
    p->b_md = Md(s.b.dims, {b_ld, 1}, s.b.dtype);
    pd = make_pd();
  }
  p->scratch_md = pd.scratchpad_desc();
  p->prim = dnnl::matmul(pd);
  p->b_md = pd.weights_desc();
  if (p->plain) return p;
  if (s.pack_b && p->b_md != p->b_user_md && AsVnniLayout(p->b_md, &p->layout)) {
    p->vnni_pack = true;
    p->packed = true;
  } else if (s.pack_b && p->b_md != p->b_user_md && AsF32BlockedLayout(p->b_md, &p->layout)) {
    p->f32_pack = true;
    p->packed = true;
  } else if (s.pack_b && p->b_md != p->b_user_md) {
    dnnl::primitive_attr pack_attr;
    pack_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::reorder::primitive_desc pack_pd(Engine(), p->b_user_md, Engine(), p->b_md, pack_attr);
    p->pack_scratch_md = pack_pd.scratchpad_desc();
    p->pack = dnnl::reorder(pack_pd);
    p->packed = true;
  }
  return p;
}

class PrimitiveCache {
 public:
  static constexpr size_t kCapacity = 256;

  std::shared_ptr<const Primitive> Get(const DnnlGemmSpec& spec) {
    const int threads = PrimitiveThreads();
    std::string key = KeyOf(spec, threads);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++hits_;
        return it->second->second;
      }
      ++misses_;
    }
    // Created outside the lock: JIT compilation can take milliseconds.
    std::shared_ptr<const Primitive> prim;
    {
      // Inside a parallel region oneDNN would still plan for this thread's
      // nthreads-var: made for one thread, as it runs.
      std::optional<ScopedOmpThreads> planned_for;
      if (threads != omp_get_max_threads()) planned_for.emplace(threads);
      prim = CreatePrimitive(spec);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second->second;  // another thread won the race
    lru_.emplace_front(key, prim);
    map_.emplace(std::move(key), lru_.begin());
    if (lru_.size() > kCapacity) {
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return prim;
  }

  MatmulCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {hits_, misses_, static_cast<int64_t>(map_.size()), g_plain_b.load(std::memory_order_relaxed),
            g_b_reorders.load(std::memory_order_relaxed), g_padded_a.load(std::memory_order_relaxed),
            g_padded_b.load(std::memory_order_relaxed), g_amx_gemms.load(std::memory_order_relaxed),
            g_packed_b.load(std::memory_order_relaxed)};
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    lru_.clear();
    hits_ = misses_ = 0;
  }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Primitive>>;
  std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<std::string, std::list<Entry>::iterator> map_;
  int64_t hits_ = 0, misses_ = 0;
};

PrimitiveCache& Cache() {
  static PrimitiveCache* cache = new PrimitiveCache();  // never destroyed: used by exit-time code
  return *cache;
}

}  // namespace

std::shared_ptr<const Primitive> CachedPrimitive(const DnnlGemmSpec& spec) { return Cache().Get(spec); }
MatmulCacheStats PrimitiveCacheStats() { return Cache().Stats(); }
void ClearPrimitiveCache() { Cache().Clear(); }

}  // namespace octet::cpu
