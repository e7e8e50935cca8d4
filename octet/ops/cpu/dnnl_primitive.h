// oneDNN matmul primitives for the CPU GEMMs of dnnl_gemm.cc: how one is
// made for a DnnlGemmSpec (the layout B is packed into, a padded copy of A
// where oneDNN reads A slowly) and the cache that holds them (NOTE [oneDNN
// primitive cache] in dnnl_primitive.cc). Internal to ops/cpu/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include <oneapi/dnnl/dnnl.hpp>

#include <octet/ops/cpu/dnnl_gemm.h>
#include <octet/ops/cpu/gemm_pack.h>
#include <octet/ops/matmul_kernels.h>

namespace octet::cpu {

// A matmul primitive for one DnnlGemmSpec (and thread count), and how its
// operands are to be prepared.
struct Primitive {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, out_md, bias_md, scale_md, scratch_md;
  // pack_b: b arrives as b_user_md and is packed into b_md before the matmul,
  // by octet's packers when b_md is the bf16 VNNI or f32 blocked layout they
  // know (vnni_pack, f32_pack), else by a oneDNN reorder.
  bool packed = false;
  bool vnni_pack = false;
  bool f32_pack = false;  // b_md is the f32 blocked layout PackF32B writes
  // pack_b was asked for but the implementation reads a plain B (NOTE [plain
  // weights]): b_md is b's own geometry, and b is used as it is, or converted
  // span-wise by octet's converters when it is bf16 (for f32) or FP8.
  bool plain = false;
  PackedBLayout layout;  // of b_md, when vnni_pack or f32_pack
  // NOTE [column-major A] in dnnl_primitive.cc: when > 0, a (2-D, column-major) is copied with
  // this leading dimension (a_md's) before the matmul.
  int64_t a_ld = 0;
  // NOTE [row-major B beside a column-major A] in dnnl_primitive.cc: when > 0, a plain
  // row-major b is copied (and converted, as PreparedB would) with this leading dimension first.
  int64_t b_ld = 0;
  dnnl::reorder pack;
  dnnl::memory::desc b_user_md, pack_scratch_md;
};

// The CPU engine, and this thread's stream on it.
dnnl::engine& Engine();
dnnl::stream& Stream();

// Whether md is a plain (row- or column-major, unblocked) layout.
bool IsPlain(const dnnl::memory::desc& md);

// The dtype a packing reorder reads B in when it is not b.dtype: a bf16 B of
// an f32 GEMM, which oneDNN's reorder widens exactly itself. Every other
// conversion (FP8 codes, a narrowed f32 B, a rounded f32 B) is octet's,
// before the reorder or in its own packers (NOTE [narrowed B]), so it does
// not shape a primitive.
std::optional<DType> ReorderSource(const DnnlGemmSpec& s);

// spec's primitive, made on first use for this thread count (or one thread
// inside a parallel region of the program's own) and cached.
std::shared_ptr<const Primitive> CachedPrimitive(const DnnlGemmSpec& spec);
MatmulCacheStats PrimitiveCacheStats();
void ClearPrimitiveCache();

// MatmulCacheStats' counters: primitives made for a plain B (here), and the
// GEMMs' B reorders, padded A and B copies, AMX GEMMs and octet-packed Bs
// (counted by dnnl_gemm.cc).
extern std::atomic<int64_t> g_plain_b, g_b_reorders, g_padded_a, g_padded_b, g_amx_gemms, g_packed_b;

}  // namespace octet::cpu
