// CublasLtMatmul, the Tensor form of the CUDA GEMM (gemm_cublaslt.h): 2-D
// tensors and views turned into the GemmArgs CublasLtGemm executes
// (gemm_cublaslt.cc), with their FP8 scale metadata checked.
#include <octet/ops/cuda/gemm_cublaslt.h>

#include <algorithm>

#include <octet/core/scaling.h>

namespace octet::cuda {
namespace {

// A 2-D tensor as a stored row-major operand; a transposed view (unit row
// stride) flips `trans` instead of being copied.
GemmOperand OperandOf(const Tensor& t, bool* trans, Tensor* keep, const char* arg) {
  OCTET_CHECK(t.dim() == 2, "CublasLtMatmul: ", arg, " must be 2-D, got ", Describe(t));
  Tensor s = t;
  GemmOperand op;
  const int64_t rows = s.size(0), cols = s.size(1);
  if (s.stride(1) == 1 || cols == 1) {
    op.ld = rows == 1 ? std::max<int64_t>(cols, 1) : std::max<int64_t>(s.stride(0), 1);
    if (op.ld < cols) {  // overlapping rows: copy
      s = s.Contiguous();
      op.ld = std::max<int64_t>(cols, 1);
    }
  } else if (s.stride(0) == 1 || rows == 1) {
    // Column-major view: the stored matrix is sᵀ [cols, rows].
    *trans = !*trans;
    op.ld = cols == 1 ? std::max<int64_t>(rows, 1) : std::max<int64_t>(s.stride(1), 1);
    if (op.ld < rows) {
      s = s.T().Contiguous().T();
      op.ld = std::max<int64_t>(rows, 1);
    }
  } else {
    s = s.Contiguous();
    op.ld = std::max<int64_t>(cols, 1);
  }
  *keep = s;
  op.data = s.raw_data();
  op.dtype = s.dtype();
  if (IsFp8(s.dtype())) {
    const ScaleMeta* meta = t.scale_meta();  // the original carries the metadata
    OCTET_CHECK(meta != nullptr && meta->granularity == ScaleGranularity::kPerTensor && meta->scale_inv.defined(),
                "CublasLtMatmul: FP8 ", arg, " needs per-tensor scale metadata, got ", Describe(t));
    OCTET_CHECK(meta->scale_inv.device() == s.device() && meta->scale_inv.dtype() == DType::kFloat32,
                "CublasLtMatmul: ", arg, "'s scale_inv must be float32 on ", s.device());
    op.scale_inv = meta->scale_inv.data<float>();
  }
  return op;
}

}  // namespace

void CublasLtMatmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& d, GemmRole role,
                    float alpha, float beta) {
  OCTET_CHECK(a.device().is_cuda() && b.device() == a.device() && d.device() == a.device(),
              "CublasLtMatmul: a, b and d must be on one CUDA device, got ", Describe(a), ", ", Describe(b), ", ",
              Describe(d));
  OCTET_CHECK(d.dim() == 2 && (d.stride(1) == 1 || d.size(1) <= 1),
              "CublasLtMatmul: d must be 2-D with unit "
              "column stride, got ",
              Describe(d));
  GemmArgs g;
  g.device = a.device().index;
  g.role = role;
  const int64_t m = trans_a ? a.size(1) : a.size(0), k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0), n = trans_b ? b.size(0) : b.size(1);
  OCTET_CHECK(a.dim() == 2 && b.dim() == 2 && k == kb && d.size(0) == m && d.size(1) == n,
              "CublasLtMatmul: shapes do not match: op(a) ", (trans_a ? "(transposed) " : ""), Describe(a), ", op(b) ",
              (trans_b ? "(transposed) " : ""), Describe(b), ", d ", Describe(d));
  Tensor keep_a, keep_b;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.a = OperandOf(a, &g.trans_a, &keep_a, "a");
  g.b = OperandOf(b, &g.trans_b, &keep_b, "b");
  g.m = m;
  g.n = n;
  g.k = k;
  g.d = d.raw_data();
  g.d_dtype = d.dtype();
  g.ldd = d.size(0) == 1 ? std::max<int64_t>(n, 1) : d.stride(0);
  g.alpha = alpha;
  g.beta = beta;
  if (IsFp8(d.dtype())) {
    const ScaleMeta* meta = d.scale_meta();
    OCTET_CHECK(meta != nullptr && meta->scale.defined() && meta->scale.device() == d.device(),
                "CublasLtMatmul: an FP8 d needs per-tensor scale metadata on its device, got ", Describe(d));
    g.d_scale = meta->scale.data<float>();
    if (meta->amax.defined()) g.d_amax = meta->amax.data<float>();
  }
  CublasLtGemm(g);
}

}  // namespace octet::cuda
