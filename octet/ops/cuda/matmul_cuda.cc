// CUDA kernels of the matmul family (signatures of ops/matmul_kernels.h):
// both go through the one cuBLASLt entry point, CublasLtGemm
// (ops/cuda/gemm_cublaslt.h).
//
// NOTE [cuda matmul batching]: the batch dims of a, b and out are flattened
// into one cuBLASLt strided batch when each operand's batch offsets are
// `index * stride` for one stride (contiguous batches, or a broadcast operand
// with stride 0); otherwise the matrices run one call each. The matrix dims
// of an operand are read in place when one of their strides is 1 (a
// transposed view just flips the GEMM's transpose flag); anything else
// (e.g. an expanded matrix) is copied to contiguous memory first.
//
// NOTE [cuda matmul bias]: a single 2-D GEMM adds the bias in cuBLASLt's BIAS
// epilogue (bias in out's dtype, or bfloat16 for FP8 operands). Otherwise
// out is first filled with the broadcast bias and the GEMM accumulates onto
// it (beta = 1), which rounds once, after the addition; an FP8 GEMM with a
// float32 bias and a bfloat16 out accumulates in a float32 scratch first so
// the bias is added in float32 (ops/matmul_kernels.h).
#include <algorithm>
#include <vector>

#include <octet/core/scaling.h>
#include <octet/ops/copy_kernels.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/cuda/gemm_cublaslt.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/pointwise_kernels.h>

namespace octet::cuda {
namespace {

// How one operand's matrix dims are stored (see NOTE [cuda matmul batching]).
struct MatrixLayout {
  bool ok = false;
  bool trans = false;  // stored as the transpose of the logical matrix
  int64_t ld = 0;
};

MatrixLayout Classify(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  MatrixLayout l;
  if (cs == 1 || cols == 1) {
    l.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : rs;
    l.ok = l.ld >= std::max<int64_t>(cols, 1);
    if (l.ok) return l;
  }
  if (rs == 1 || rows == 1) {
    l.trans = true;
    l.ld = cols <= 1 ? std::max<int64_t>(rows, 1) : cs;
    l.ok = l.ld >= std::max<int64_t>(rows, 1);
  }
  return l;
}

// The flattened batch stride of `t` over out's batch shape, or false when
// its batch offsets are not index * stride.
bool FlatBatchStride(const Tensor& t, const Shape& out_batch, int64_t* stride) {
  const int64_t nb = static_cast<int64_t>(out_batch.size());
  int64_t s = 0, inner = 1;
  bool have = false;
  for (int64_t d = nb - 1; d >= 0; --d) {
    if (out_batch[d] == 1) continue;
    const int64_t st = t.size(d) == 1 ? 0 : t.stride(d);
    if (!have) {
      s = st;
      have = true;
    } else if (st != s * inner) {
      return false;
    }
    inner *= out_batch[d];
  }
  *stride = s;
  return true;
}

// Element offset of batch `bi` (flattened over out_batch) in t.
int64_t BatchOffset(const Tensor& t, const Shape& out_batch, int64_t bi) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(out_batch.size()) - 1; d >= 0; --d) {
    const int64_t idx = bi % out_batch[d];
    bi /= out_batch[d];
    if (t.size(d) != 1) off += idx * t.stride(d);
  }
  return off;
}

// a or b with matrix dims cuBLASLt can read (a contiguous copy otherwise).
Tensor Readable(const Tensor& t, MatrixLayout* layout) {
  const int64_t r = t.dim();
  *layout = Classify(t.size(r - 2), t.size(r - 1), t.stride(r - 2), t.stride(r - 1));
  if (layout->ok) return t;
  Tensor c = t.Contiguous();
  if (IsFp8(t.dtype()) && t.scale_meta() != nullptr && c.scale_meta() == nullptr)
    c = c.WithScaleMeta(t.scale_meta_ptr());
  *layout = Classify(c.size(r - 2), c.size(r - 1), c.stride(r - 2), c.stride(r - 1));
  OCTET_CHECK(layout->ok, "matmul (CUDA): cannot lay out ", Describe(t), " for cuBLASLt");
  return c;
}

const char* At(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.raw_data()) + elements * SizeOf(t.dtype());
}

// The shared body of both kernels. scale_inv_a/b: FP8 only.
void RunMatmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, const Tensor& out, const float* scale_inv_a,
               const float* scale_inv_b, GemmRole role, const Tensor& gelu_pre) {
  const int64_t r = out.dim();
  const int64_t M = out.size(r - 2), N = out.size(r - 1), K = a_in.size(r - 1);
  const Device device = out.device();
  OCTET_CHECK(device.is_cuda() && a_in.device() == device && b_in.device() == device &&
                  (!bias.defined() || bias.device() == device),
              "matmul (CUDA): operands must be on ", device, ", got ", Describe(a_in), ", ", Describe(b_in));
  OCTET_CHECK(out.is_contiguous(), "matmul (CUDA): out must be contiguous, got ", Describe(out));
  if (out.numel() == 0) return;
  const bool fp8 = IsFp8(a_in.dtype());
  if (gelu_pre.defined()) {
    OCTET_CHECK(gelu_pre.is_contiguous() && gelu_pre.shape() == out.shape() && gelu_pre.dtype() == out.dtype() &&
                    gelu_pre.device() == device,
                "matmul (CUDA): gelu_pre must be contiguous like out ", Describe(out), ", got ", Describe(gelu_pre));
  }
  // NOTE [gelu epilogue]: the product into gelu_pre, then the GELU kernel.
  auto gelu_pass = [&] { unary_kernel(device)(UnaryOp::kGelu, gelu_pre, out, 0.0); };
  if (K == 0) {
    // Nothing to multiply: out = bias (broadcast) or zeros.
    const Tensor& dst = gelu_pre.defined() ? gelu_pre : out;
    if (bias.defined()) {
      copy_kernel(device)(bias.Expand(out.shape()), dst);
    } else {
      fill_kernel(device)(dst, 0.0);
    }
    if (gelu_pre.defined()) gelu_pass();
    return;
  }
  MatrixLayout la, lb;
  const Tensor a = Readable(a_in, &la), b = Readable(b_in, &lb);
  const Shape out_batch(out.shape().begin(), out.shape().end() - 2);
  int64_t nbatch = 1;
  for (int64_t s : out_batch) nbatch *= s;
  int64_t sa = 0, sb = 0;
  const bool flat = FlatBatchStride(a, out_batch, &sa) && FlatBatchStride(b, out_batch, &sb);

  GemmArgs g;
  g.device = device.index;
  g.role = role;
  g.m = M;
  g.n = N;
  g.k = K;
  g.trans_a = la.trans;
  g.trans_b = lb.trans;
  g.a = {nullptr, la.ld, a.dtype(), scale_inv_a};
  g.b = {nullptr, lb.ld, b.dtype(), scale_inv_b};
  g.d_dtype = out.dtype();
  g.ldd = N;

  // Bias (NOTE [cuda matmul bias]) and GELU (NOTE [gelu epilogue]).
  const bool bias_epilogue_ok = bias.defined() && nbatch == 1 && out.dtype() != DType::kFloat64 &&
                                (fp8 ? bias.dtype() == DType::kBFloat16 : bias.dtype() == out.dtype());
  // cuBLASLt's aux rows must be multiples of 8 elements.
  const bool gelu_epilogue = gelu_pre.defined() && bias_epilogue_ok && N % 8 == 0;
  const bool gelu_after = gelu_pre.defined() && !gelu_epilogue;
  Tensor target = gelu_after ? gelu_pre : out;  // what the GEMM writes
  Tensor keep_bias;
  if (gelu_epilogue) {
    g.aux = gelu_pre.raw_data();
    g.aux_ld = N;
  }
  if (bias.defined()) {
    if (bias_epilogue_ok) {
      g.epilogue = gelu_epilogue ? GemmEpilogue::kGeluAuxBias : GemmEpilogue::kBias;
      keep_bias = bias.Contiguous();
      g.bias = keep_bias.raw_data();
      g.bias_dtype = bias.dtype();
    } else {
      if (fp8 && bias.dtype() == DType::kFloat32 && out.dtype() != DType::kFloat32) {
        target = Empty(out.shape(), {.dtype = DType::kFloat32, .device = device});
        g.d_dtype = DType::kFloat32;
      }
      copy_kernel(device)(bias.Expand(target.shape()), target);
      g.beta = 1.0f;
    }
  }
  const Tensor& final_dst = gelu_after ? gelu_pre : out;
  // When cuBLASLt cannot run the epilogue (GemmArgs::epilogue_unsupported),
  // the bias is added by accumulating onto it and the GELU is the kernel.
  bool declined = false;
  if (g.epilogue != GemmEpilogue::kNone) g.epilogue_unsupported = &declined;
  if (flat) {
    g.batch = static_cast<int32_t>(nbatch);
    g.batch_stride_a = sa;
    g.batch_stride_b = sb;
    g.batch_stride_d = M * N;
    g.a.data = a.raw_data();
    g.b.data = b.raw_data();
    g.d = target.raw_data();
    CublasLtGemm(g);
  } else {
    for (int64_t bi = 0; bi < nbatch; ++bi) {
      g.a.data = At(a, BatchOffset(a, out_batch, bi));
      g.b.data = At(b, BatchOffset(b, out_batch, bi));
      g.d = const_cast<char*>(At(target, bi * M * N));
      CublasLtGemm(g);
    }
  }
  if (declined) {  // an epilogue implies one 2-D GEMM (nbatch == 1)
    const Tensor& dst = gelu_epilogue ? gelu_pre : out;
    copy_kernel(device)(bias.Expand(dst.shape()), dst);
    g.epilogue = GemmEpilogue::kNone;
    g.epilogue_unsupported = nullptr;
    g.bias = nullptr;
    g.aux = nullptr;
    g.aux_ld = 0;
    g.beta = 1.0f;
    g.d = dst.raw_data();
    CublasLtGemm(g);
    if (gelu_epilogue) gelu_pass();
    return;
  }
  if (!target.is_same(final_dst)) copy_kernel(device)(target, final_dst);
  if (gelu_after) gelu_pass();
}

void MatmulCuda(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, const Tensor& gelu_pre) {
  RunMatmul(a, b, bias, out, nullptr, nullptr, GemmRole::kGeneral, gelu_pre);
}

void ScaledMatmulCuda(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, GemmRole role,
                      const Tensor& gelu_pre) {
  // No metadata means scale_inv = 1 (ops/matmul_kernels.h).
  Tensor one;
  auto scale_inv = [&](const Tensor& t) -> const float* {
    const ScaleMeta* m = t.scale_meta();
    if (m != nullptr && m->scale_inv.defined()) {
      OCTET_CHECK(m->scale_inv.device() == t.device() && m->scale_inv.dtype() == DType::kFloat32,
                  "scaled_matmul (CUDA): the scale_inv of ", Describe(t), " must be float32 on ", t.device());
      return m->scale_inv.data<float>();
    }
    if (!one.defined()) one = Full({1}, 1.0, {.dtype = DType::kFloat32, .device = t.device()});
    return one.data<float>();
  };
  RunMatmul(a, b, bias, out, scale_inv(a), scale_inv(b), role, gelu_pre);
}

// NOTE [FP8 TN rule] (ops/gemm_layout.h), for the device's compute capability.
bool Fp8GemmNeedsTnCuda(Device device) {
  const DeviceProps& p = Props(device.index);
  return Fp8GemmRequiresTN({p.major, p.minor});
}

}  // namespace

OCTET_REGISTER_KERNEL(matmul_kernel, DeviceType::kCUDA, &MatmulCuda);
OCTET_REGISTER_KERNEL(scaled_matmul_kernel, DeviceType::kCUDA, &ScaledMatmulCuda);
OCTET_REGISTER_KERNEL(fp8_gemm_needs_tn, DeviceType::kCUDA, &Fp8GemmNeedsTnCuda);
OCTET_REGISTER_KERNEL(gemm_epilogue_gelu, DeviceType::kCUDA, +[](Device) { return true; });
// cuBLASLt reads A and B in one dtype: CastLinear casts the master weight
// first (NOTE [cast linear] in ops/matmul.h).
OCTET_REGISTER_KERNEL(gemm_mixed_bf16, DeviceType::kCUDA, +[](Device) { return false; });

}  // namespace octet::cuda
