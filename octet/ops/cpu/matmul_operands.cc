// The operands of the CPU GEMMs (see matmul_operands.h).
#include <octet/ops/cpu/matmul_operands.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace octet::cpu {
namespace {

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

}  // namespace

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

MatView OutView(const Tensor& out) { return {out.raw_data(), out.shape(), out.strides(), out.dtype()}; }

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

MatView Fp8View(const Tensor& t, Tensor* keep) {
  MatView v = CompactView(t, keep);
  v.dtype = DType::kBFloat16;
  return v;
}

ConvertedOperand& ThreadConvertedA(DType to) {
  thread_local ConvertedOperand bf16, f32;
  return to == DType::kBFloat16 ? bf16 : f32;
}

}  // namespace octet::cpu
