#include <octet/ops/shape.h>

#include <octet/core/host_reads.h>

#include <numeric>

#include <octet/autograd/function.h>
#include <octet/core/allocator.h>
#include <octet/core/scaling.h>
#include <octet/ops/copy_kernels.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>

namespace octet {

OCTET_DEFINE_KERNEL(copy_kernel, CopyKernelFn);
OCTET_DEFINE_KERNEL(fill_kernel, FillKernelFn);

Shape InferShape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  Shape known_dims;
  int64_t infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      OCTET_CHECK(infer < 0, op, ": only one dimension can be -1 in ", ShapeStr(shape));
      infer = static_cast<int64_t>(i);
    } else {
      OCTET_CHECK(out[i] >= 0, op, ": invalid dimension ", out[i], " in ", ShapeStr(shape));
      known_dims.push_back(out[i]);
    }
  }
  // A product past int64 is more than any tensor's numel: invalid either way.
  int64_t known = 0;
  const bool fits = TryNumel(known_dims, &known);
  if (infer >= 0) {
    OCTET_CHECK(fits && known != 0 && numel % known == 0, op, ": shape ", ShapeStr(shape), " is invalid for ",
                numel, " elements");
    out[infer] = numel / known;
    known = numel;
  }
  OCTET_CHECK(fits && known == numel, op, ": shape ", ShapeStr(shape), " is invalid for ", numel, " elements");
  return out;
}

bool ComputeViewStrides(const Shape& old_shape, const Shape& old_strides, const Shape& shape, Shape* strides) {
  strides->assign(shape.size(), 0);
  if (Numel(old_shape) == 0 || old_shape.empty()) {
    *strides = ContiguousStrides(shape);
    return true;
  }
  // Walk chunks of old dims that are contiguous among themselves and match
  // them against runs of new dims with the same element count.
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        (*strides)[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor MakeAlias(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  // Bounds: the largest element reached must lie inside the storage.
  if (Numel(shape) > 0) {
    int64_t hi = offset, lo = offset;
    for (size_t d = 0; d < shape.size(); ++d) {
      (strides[d] >= 0 ? hi : lo) += (shape[d] - 1) * strides[d];
    }
    OCTET_CHECK(lo >= 0 && static_cast<size_t>(hi + 1) * SizeOf(base.dtype()) <= base.storage()->nbytes(),
                "view ", ShapeStr(shape), " with strides ", ShapeStr(strides), " at offset ", offset,
                " lies outside the storage of ", Describe(base));
  }
  auto impl = std::make_shared<TensorImpl>(base.storage(), shape, strides, offset, base.dtype());
  impl->set_scale_meta(base.scale_meta_ptr());
  return Tensor(std::move(impl));
}

namespace {

// ---- view ops -------------------------------------------------------------------

struct AliasOp : autograd::Op<AliasOp> {
  // Generic "x viewed with new geometry" whose backward is a reshape of dy back
  // to x's shape. Used by View, Squeeze, Unsqueeze (any view that keeps element
  // order).
  static constexpr const char* kName = "view";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Shape& shape, const Shape& strides) {
    ctx.shapes = {x.shape()};
    return MakeAlias(x, shape, strides, x.offset());
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) { return {dy.Reshape(ctx.shapes[0])}; }
};

struct PermuteOp : autograd::Op<PermuteOp> {
  static constexpr const char* kName = "permute";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Shape& dims) {
    OCTET_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: ", ShapeStr(dims), " does not list the ",
                x.dim(), " dims of ", Describe(x));
    std::vector<bool> seen(x.dim(), false);
    Shape shape(x.dim()), strides(x.dim()), inverse(x.dim());
    for (int64_t i = 0; i < x.dim(); ++i) {
      const int64_t d = WrapDim(dims[i], x.dim(), kName);
      OCTET_CHECK(!seen[d], "permute: dim ", d, " repeated in ", ShapeStr(dims));
      seen[d] = true;
      shape[i] = x.shape()[d];
      strides[i] = x.strides()[d];
      inverse[d] = i;
    }
    ctx.shapes = {inverse};
    return MakeAlias(x, shape, strides, x.offset());
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) { return {dy.Permute(ctx.shapes[0])}; }
};

struct SliceOp : autograd::Op<SliceOp> {
  static constexpr const char* kName = "slice";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, int64_t dim, int64_t start, int64_t end,
                        int64_t step) {
    OCTET_CHECK(x.dim() > 0, "slice: cannot slice a rank-0 tensor ", Describe(x));
    const int64_t d = WrapDim(dim, x.dim(), kName);
    const int64_t n = x.shape()[d];
    OCTET_CHECK(step > 0, "slice: step must be positive, got ", step);
    if (start < 0) start += n;  // no overflow: n >= 0
    if (end < 0) end += n;
    OCTET_CHECK(start >= 0 && start <= n && end >= start && end <= n, "slice: range [", start, ", ", end,
                ") is out of bounds for dim ", d, " of size ", n, " in ", Describe(x));
    Shape shape = x.shape(), strides = x.strides();
    shape[d] = end == start ? 0 : (end - start - 1) / step + 1;  // ceil((end - start) / step), no overflow
    // A step past the dim's size keeps at most one element, whose stride does not matter.
    if (__builtin_mul_overflow(strides[d], step, &strides[d])) {
      OCTET_CHECK(shape[d] <= 1, "slice: step ", step, " times stride ", x.strides()[d], " of dim ", d,
                  " overflows int64 in ", Describe(x));
      strides[d] = x.strides()[d];
    }
    ctx.shapes = {x.shape()};
    ctx.ints = {d, start, end, step};
    return MakeAlias(x, shape, strides, x.offset() + start * x.strides()[d]);
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    Tensor dx = Zeros(ctx.shapes[0], {.dtype = dy.dtype(), .device = dy.device()});
    dx.Slice(ctx.ints[0], ctx.ints[1], ctx.ints[2], ctx.ints[3]).CopyFrom_(dy);
    return {dx};
  }
};

struct ExpandOp : autograd::Op<ExpandOp> {
  static constexpr const char* kName = "expand";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, const Shape& shape) {
    const int64_t lead = static_cast<int64_t>(shape.size()) - x.dim();
    OCTET_CHECK(lead >= 0, "expand: cannot expand ", Describe(x), " to fewer dims ", ShapeStr(shape));
    Shape out_shape(shape.size()), strides(shape.size(), 0);
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      if (d < lead) {
        OCTET_CHECK(shape[d] >= 0, "expand: invalid size ", shape[d], " in ", ShapeStr(shape));
        out_shape[d] = shape[d];
        continue;
      }
      const int64_t xs = x.shape()[d - lead];
      const int64_t want = shape[d] == -1 ? xs : shape[d];
      OCTET_CHECK(xs == want || xs == 1, "expand: ", Describe(x), " cannot be expanded to ", ShapeStr(shape),
                  " (dim ", d, ": ", xs, " vs ", want, ")");
      out_shape[d] = want;
      strides[d] = xs == want ? x.strides()[d - lead] : 0;
    }
    int64_t numel = 0;
    OCTET_CHECK(TryNumel(out_shape, &numel), "expand: shape ", ShapeStr(shape),
                " has more elements than int64 can count");
    ctx.shapes = {x.shape()};
    return MakeAlias(x, out_shape, strides, x.offset());
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) { return {SumToShape(dy, ctx.shapes[0])}; }
};

// ---- copies ---------------------------------------------------------------------

// dst[i] = convert(src[i]), src already broadcast to dst's shape: the copy
// behind CopyFrom_, Clone, To and Cat. FP8 codes convert raw, without scales
// (CopyFrom_ checks them first, NOTE [fp8 copies]). A src that partially
// overlaps dst goes through a temporary and the identical view is a no-op
// (NOTE [overlapping operands] in op_checks.h): decided here, on the host,
// so every device's copy kernel may assume disjoint operands.
void CopyInto(const Tensor& dst, const Tensor& src) {
  if (src.device() != dst.device()) {
    // Cross-device: convert on the source side, then move bytes.
    Tensor staged = Empty(dst.shape(), {.dtype = dst.dtype(), .device = src.device()});
    if (staged.numel() > 0) copy_kernel(src.device())(src, staged);
    Tensor moved = staged.To(dst.device());
    if (dst.numel() > 0) copy_kernel(dst.device())(moved, dst);
  } else if (dst.numel() > 0 && !SameElements(dst, src)) {
    if (PartiallyOverlaps(dst, src)) {
      Tensor staged = Empty(src.shape(), {.dtype = src.dtype(), .device = src.device()});
      copy_kernel(src.device())(src, staged);
      copy_kernel(dst.device())(staged, dst);
    } else {
      copy_kernel(dst.device())(src, dst);
    }
  }
}

Tensor RawCopy(const Tensor& x, DType dtype, Device device) {
  Tensor out = Empty(x.shape(), {.dtype = dtype, .device = device});
  CopyInto(out, x);
  return out;
}

// A per-tensor scale_inv of an FP8 t (1 without metadata), named for op's
// error. On a device a host read (NOTE [host reads] in core/host_reads.h).
float Fp8ScaleInv(const char* op, const Tensor& t) {
  CheckPerTensorScale(op, t);
  return ScaleInvValue(t);
}

// Whether two FP8 tensors' scales are equal without reading them: one
// metadata object (or none on both), or one scale_inv tensor.
bool SameScaleObject(const Tensor& a, const Tensor& b) {
  const ScaleMeta* ma = a.scale_meta();
  const ScaleMeta* mb = b.scale_meta();
  if (ma == mb) return true;
  return ma != nullptr && mb != nullptr && ma->granularity == mb->granularity && ma->scale_inv.defined() &&
         mb->scale_inv.defined() && ma->scale_inv.raw_data() == mb->scale_inv.raw_data() &&
         ma->scale_inv.dtype() == mb->scale_inv.dtype() && ma->scale_inv.numel() == mb->scale_inv.numel();
}

// NOTE [fp8 copies]: CopyFrom_ keeps values, not codes. FP8 -> FP8 copies
// the codes (converted between the two formats) when both scale_inv are
// equal (no metadata counts as 1), and throws when they differ: requantizing
// into dst's scale would lose precision silently, so the caller decides
// (Dequantize, or Quantize with dst's scale). Plain -> FP8 quantizes with
// scale 1 and FP8 -> plain dequantizes with scale 1 (what the copy kernel
// does), so they throw unless the FP8 side's scale_inv is 1. Reading a scale
// is a host read on a device; it happens only when an FP8 tensor is involved
// and the two sides do not share the scale object (these copies are not on
// any training step's path: Clone, To and Cat copy raw).
void CheckFp8CopyScales(const Tensor& dst, const Tensor& src) {
  const bool dst_fp8 = IsFp8(dst.dtype()), src_fp8 = IsFp8(src.dtype());
  if (!dst_fp8 && !src_fp8) return;
  if (dst_fp8 && src_fp8) {
    if (SameScaleObject(dst, src)) return;
    const float di = Fp8ScaleInv("copy_", dst), si = Fp8ScaleInv("copy_", src);
    OCTET_CHECK(di == si, "copy_: src ", Describe(src), " has scale_inv ", si, " but dst ", Describe(dst),
                " has scale_inv ", di, "; copying the FP8 codes would change the values and requantizing would "
                "lose precision silently: Dequantize src, or Quantize it with dst's scale, first");
  } else if (dst_fp8) {
    const float di = Fp8ScaleInv("copy_", dst);
    OCTET_CHECK(di == 1.0f, "copy_: dst ", Describe(dst), " has scale_inv ", di, " but src ", Describe(src),
                " is not FP8, and a copy quantizes with scale 1: Quantize src with dst's scale (ops/cast.h) instead");
  } else {
    const float si = Fp8ScaleInv("copy_", src);
    OCTET_CHECK(si == 1.0f, "copy_: src ", Describe(src), " has scale_inv ", si, " but dst ", Describe(dst),
                " is not FP8, and a copy dequantizes with scale 1: copy from Dequantize(src) instead");
  }
}

struct CloneOp : autograd::Op<CloneOp> {
  static constexpr const char* kName = "clone";
  static Tensor Forward(autograd::Ctx&, const Tensor& x) {
    Tensor out = RawCopy(x, x.dtype(), x.device());
    if (x.scale_meta()) out = out.WithScaleMeta(x.scale_meta_ptr());
    return out;
  }
  static TensorList Backward(autograd::Ctx&, const Tensor& dy) { return {dy}; }
};

std::string ToName(DType dtype) { return std::string("To(") + Name(dtype) + ")"; }

struct ToDtypeOp : autograd::Op<ToDtypeOp> {
  static constexpr const char* kName = "to_dtype";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, DType dtype) {
    ctx.dtypes = {x.dtype()};
    if (IsFp8(x.dtype()) && !IsFp8(dtype)) {
      // Dequantize: real value = fp8 * scale_inv.
      Tensor f = RawCopy(x, DType::kFloat32, x.device());
      const float si = ScaleInvValue(x);
      if (si != 1.0f) f = UnaryRaw(UnaryOp::kMulScalar, f, si);
      if (dtype == DType::kFloat32) return f;
      CheckIntegerConvertible(f, dtype, ToName(dtype).c_str());
      return RawCopy(f, dtype, x.device());
    }
    if (IsFp8(dtype)) {
      OCTET_CHECK(!IsFp8(x.dtype()) || ScaleInvValue(x) == 1.0f, "To(", Name(dtype), "): converting ",
                  Describe(x), " with a scale between FP8 formats needs Dequantize + Quantize");
      // Scale 1, saturating; amax recorded for telemetry.
      Tensor out = RawCopy(x, dtype, x.device());
      const float amax =
          IsFp8(x.dtype()) ? 0.0f : static_cast<float>(AbsMax(x.dtype() == DType::kFloat32 ? x : x.To(DType::kFloat32)).Item());
      return out.WithScaleMeta(MakePerTensorScale(1.0f, amax, x.device()));
    }
    CheckIntegerConvertible(x, dtype, ToName(dtype).c_str());
    return RawCopy(x, dtype, x.device());
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) { return {dy.To(ctx.dtypes[0])}; }
};

struct ToDeviceOp : autograd::Op<ToDeviceOp> {
  static constexpr const char* kName = "to_device";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, Device device) {
    ctx.ints = {static_cast<int64_t>(x.device().type), x.device().index};
    const Tensor src = x.Contiguous();
    Tensor out = Empty(x.shape(), {.dtype = x.dtype(), .device = device});
    CopyBytes(out.raw_data(), device, src.raw_data(), src.device(), src.nbytes());
    if (const ScaleMeta* m = x.scale_meta()) {
      auto meta = std::make_shared<ScaleMeta>(*m);
      meta->scale = m->scale.To(device);
      meta->scale_inv = m->scale_inv.To(device);
      meta->amax = m->amax.To(device);
      out = out.WithScaleMeta(std::move(meta));
    }
    return out;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    return {dy.To(Device(static_cast<DeviceType>(ctx.ints[0]), static_cast<int>(ctx.ints[1])))};
  }
};

// NOTE [fp8 cat]: Cat and Stack of FP8 tensors concatenate the codes, which
// keeps the values only when every input has the same scale_inv (no metadata
// counts as 1); the result then carries that scale. Different scales throw,
// naming both: requantizing to one scale would lose precision silently, so
// the caller dequantizes (or requantizes) first. Inputs sharing one ScaleMeta
// (pieces of one quantized tensor: Split, Chunk, views) or one scale_inv
// tensor are recognised without reading the scale; otherwise a CUDA input's
// scale is a host read (a sync), acceptable for these ops, which are not on a
// training step's path. Returns the result's metadata (null for non-FP8
// inputs or when none has any); inputs that are not all of one FP8 dtype or
// not all defined are left to Cat's own checks.
std::shared_ptr<const ScaleMeta> Fp8ConcatMeta(const char* op, const TensorList& xs) {
  if (xs.empty() || !xs[0].defined() || !IsFp8(xs[0].dtype())) return nullptr;
  for (const Tensor& t : xs)
    if (!t.defined() || t.dtype() != xs[0].dtype()) return nullptr;
  bool one_object = true;
  for (const Tensor& t : xs) one_object = one_object && t.scale_meta_ptr() == xs[0].scale_meta_ptr();
  if (one_object) {
    CheckPerTensorScale(op, xs[0]);
    return xs[0].scale_meta_ptr();
  }
  const float si0 = Fp8ScaleInv(op, xs[0]);
  for (size_t i = 1; i < xs.size(); ++i) {
    if (SameScaleObject(xs[0], xs[i])) continue;
    const float si = Fp8ScaleInv(op, xs[i]);
    OCTET_CHECK(si == si0, op, ": FP8 tensors with different scales: tensors[0] ", Describe(xs[0]),
                " has scale_inv ", si0, " but tensors[", i, "] ", Describe(xs[i]), " has scale_inv ", si,
                "; joining the codes would change the values and requantizing would lose precision silently: "
                "Dequantize the inputs (or Quantize them with one scale) first");
  }
  // Equal scales in different objects: the first metadata's scale tensors and
  // the largest amax.
  const ScaleMeta* m0 = nullptr;
  Tensor amax;
  for (const Tensor& t : xs) {
    const ScaleMeta* m = t.scale_meta();
    if (m == nullptr) continue;
    if (m0 == nullptr) m0 = m;
    if (m->amax.defined()) amax = amax.defined() ? Maximum(amax, m->amax) : m->amax;
  }
  auto meta = std::make_shared<ScaleMeta>();
  meta->granularity = ScaleGranularity::kPerTensor;
  meta->scale = m0->scale;
  meta->scale_inv = m0->scale_inv;
  meta->amax = amax;
  return meta;
}

struct CatOp : autograd::Op<CatOp> {
  static constexpr const char* kName = "cat";
  static Tensor Forward(autograd::Ctx& ctx, const TensorList& xs, int64_t dim) {
    OCTET_CHECK(!xs.empty(), "cat: needs at least one tensor");
    const Tensor& first = xs[0];
    CheckDefined(kName, first, "tensors[0]");
    // Tensors of another rank than tensor 0 are rejected below.
    OCTET_CHECK(first.dim() > 0, "cat: tensor 0 is a rank-0 tensor ", Describe(first),
                ", which has no dim to concatenate along (Stack them instead)");
    const int64_t d = WrapDim(dim, first.dim(), kName);
    Shape shape = first.shape();
    int64_t total = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& t = xs[i];
      CheckDefined(kName, t, "tensors[i]");
      CheckSameDtype(kName, first, t);
      CheckSameDevice(kName, first, t);
      OCTET_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " is ", Describe(t), " but tensor 0 is ",
                  Describe(first));
      for (int64_t k = 0; k < t.dim(); ++k)
        OCTET_CHECK(k == d || t.shape()[k] == shape[k], "cat: tensor ", i, " ", Describe(t),
                    " does not match tensor 0 ", Describe(first), " outside dim ", d);
      ctx.ints.push_back(t.shape()[d]);
      OCTET_CHECK(!__builtin_add_overflow(total, t.shape()[d], &total), "cat: the sizes along dim ", d,
                  " add up past int64");
    }
    shape[d] = total;
    const std::shared_ptr<const ScaleMeta> meta = Fp8ConcatMeta(kName, xs);  // NOTE [fp8 cat]
    Tensor out = Empty(shape, {.dtype = first.dtype(), .device = first.device()});
    int64_t at = 0;
    for (const Tensor& t : xs) {
      CopyInto(out.Narrow(d, at, t.shape()[d]), t);  // raw codes: the scales are checked equal
      at += t.shape()[d];
    }
    if (meta) out = out.WithScaleMeta(meta);
    ctx.ints.push_back(d);
    return out;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const int64_t d = ctx.ints.back();
    TensorList out;
    int64_t at = 0;
    for (size_t i = 0; i + 1 < ctx.ints.size(); ++i) {
      out.push_back(dy.Narrow(d, at, ctx.ints[i]).Contiguous());
      at += ctx.ints[i];
    }
    return out;
  }
};

}  // namespace

// ---- Tensor methods --------------------------------------------------------------

Tensor Tensor::View(const Shape& shape) const {
  const Shape s = InferShape(shape, numel(), "view");
  Shape strides;
  OCTET_CHECK(ComputeViewStrides(this->shape(), this->strides(), s, &strides), "view: ", Describe(*this),
              " with strides ", ShapeStr(this->strides()), " cannot be viewed as ", ShapeStr(s),
              " without a copy; use Reshape");
  return AliasOp::Apply(*this, s, strides);
}

Tensor Tensor::Reshape(const Shape& shape) const {
  const Shape s = InferShape(shape, numel(), "reshape");
  Shape strides;
  if (ComputeViewStrides(this->shape(), this->strides(), s, &strides)) return AliasOp::Apply(*this, s, strides);
  return Contiguous().View(s);
}

Tensor Tensor::Permute(const Shape& dims) const { return PermuteOp::Apply(*this, dims); }

Tensor Tensor::Transpose(int64_t dim0, int64_t dim1) const {
  const int64_t a = WrapDim(dim0, dim(), "transpose"), b = WrapDim(dim1, dim(), "transpose");
  if (dim() == 0) return Permute({});  // as PyTorch: a rank-0 tensor transposes to itself
  Shape perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[a], perm[b]);
  return Permute(perm);
}

Tensor Tensor::T() const {
  OCTET_CHECK(dim() == 2, "T: expects a 2-D tensor, got ", Describe(*this));
  return Transpose(0, 1);
}

Tensor Tensor::Narrow(int64_t dim, int64_t start, int64_t length) const {
  OCTET_CHECK(length >= 0, "narrow: negative length ", length);
  OCTET_CHECK(this->dim() > 0, "narrow: cannot narrow a rank-0 tensor ", Describe(*this));
  const int64_t d = WrapDim(dim, this->dim(), "narrow");
  const int64_t n = shape()[d];
  const int64_t s = start < 0 ? start + n : start;  // no overflow: n >= 0
  // length <= n - s, not s + length <= n: the sum may overflow.
  OCTET_CHECK(s >= 0 && s <= n && length <= n - s, "narrow: start ", start, " and length ", length,
              " are out of bounds for dim ", d, " of size ", n, " in ", Describe(*this));
  return SliceOp::Apply(*this, d, s, s + length, int64_t{1});
}

Tensor Tensor::Slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return SliceOp::Apply(*this, dim, start, end, step);
}

Tensor Tensor::Select(int64_t dim, int64_t index) const {
  OCTET_CHECK(this->dim() > 0, "select: cannot select from a rank-0 tensor ", Describe(*this));
  const int64_t d = WrapDim(dim, this->dim(), "select");
  const int64_t n = shape()[d];
  OCTET_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of ",
              Describe(*this));
  if (index < 0) index += n;
  return Narrow(d, index, 1).Squeeze(d);
}

Tensor Tensor::Expand(const Shape& shape) const { return ExpandOp::Apply(*this, shape); }

Tensor Tensor::Squeeze(int64_t dim) const {
  const int64_t d = WrapDim(dim, this->dim(), "squeeze");
  if (this->dim() == 0) return AliasOp::Apply(*this, shape(), strides());  // as PyTorch: itself
  OCTET_CHECK(shape()[d] == 1, "squeeze: dim ", d, " of ", Describe(*this), " has size ", shape()[d], ", not 1");
  Shape s = shape(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return AliasOp::Apply(*this, s, st);
}

Tensor Tensor::Unsqueeze(int64_t dim) const {
  const int64_t d = WrapDim(dim, this->dim() + 1, "unsqueeze");
  Shape s = shape(), st = strides();
  const int64_t new_stride = d < this->dim() ? st[d] * s[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return AliasOp::Apply(*this, s, st);
}

Tensor Tensor::Flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return Reshape({1});
  const int64_t a = WrapDim(start_dim, dim(), "flatten"), b = WrapDim(end_dim, dim(), "flatten");
  OCTET_CHECK(a <= b, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape s(shape().begin(), shape().begin() + a);
  int64_t n = 0;
  // Only a tensor with a zero dim elsewhere can have dims whose product overflows.
  OCTET_CHECK(TryNumel(Shape(shape().begin() + a, shape().begin() + b + 1), &n), "flatten: dims ", a, " to ", b,
              " of ", Describe(*this), " have more elements than int64 can count");
  s.push_back(n);
  s.insert(s.end(), shape().begin() + b + 1, shape().end());
  return Reshape(s);
}

Tensor Tensor::Contiguous() const { return is_contiguous() ? *this : Clone(); }
Tensor Tensor::Clone() const { return CloneOp::Apply(*this); }

Tensor Tensor::To(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  return ToDtypeOp::Apply(*this, dtype);
}

Tensor Tensor::To(Device device) const {
  if (device == this->device()) return *this;
  if (device.is_cpu()) internal::CountHostRead();  // NOTE [host reads] in core/host_reads.h
  return ToDeviceOp::Apply(*this, device);
}

Tensor& Tensor::CopyFrom_(const Tensor& src) {
  CheckDefined("copy_", *this, "self");
  CheckDefined("copy_", src, "src");
  CheckInPlaceAllowed("copy_", *this);
  const Shape& shape = this->shape();
  BroadcastShapes(src.shape(), shape, "copy_");  // validates; target shape must win
  CheckFp8CopyScales(*this, src);
  CopyInto(*this, src.shape() == shape ? src.detach() : src.detach().Expand(shape));
  storage()->BumpVersion();
  return *this;
}

Tensor& Tensor::Fill_(double value) {
  CheckInPlaceAllowed("fill_", *this);
  // An FP8 tensor stores the code of value * scale (saturating to the largest
  // finite code, as Quantize does), so it reads back as value. The scale is a
  // host read on a device.
  if (IsFp8(dtype()) && numel() > 0) {
    CheckPerTensorScale("fill_", *this);
    value = static_cast<double>(static_cast<float>(value) * ScaleValue(*this));
  }
  if (numel() > 0) fill_kernel(device())(*this, value);
  storage()->BumpVersion();
  return *this;
}

// ---- cat / split ---------------------------------------------------------------------

Tensor Cat(const TensorList& tensors, int64_t dim) { return CatOp::Apply(tensors, dim); }

TensorList Split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  OCTET_CHECK(x.dim() > 0, "split: cannot split a rank-0 tensor ", Describe(x));
  const int64_t d = WrapDim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    OCTET_CHECK(s >= 0, "split: negative size in split sizes");
    OCTET_CHECK(!__builtin_add_overflow(total, s, &total), "split: sizes ", ShapeStr(sizes),
                " add up past int64, more than dim ", d, " of ", Describe(x), " has");
  }
  OCTET_CHECK(total == x.shape()[d], "split: sizes add up to ", total, " but dim ", d, " of ", Describe(x),
              " has ", x.shape()[d]);
  TensorList out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(x.Narrow(d, at, s));
    at += s;
  }
  return out;
}

TensorList Chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  OCTET_CHECK(x.dim() > 0, "chunk: cannot chunk a rank-0 tensor ", Describe(x));
  const int64_t d = WrapDim(dim, x.dim(), "chunk");
  OCTET_CHECK(chunks > 0 && x.shape()[d] % chunks == 0, "chunk: dim ", d, " of ", Describe(x),
              " does not divide into ", chunks, " equal chunks");
  return Split(x, std::vector<int64_t>(chunks, x.shape()[d] / chunks), d);
}

Tensor Stack(const TensorList& tensors, int64_t dim) {
  OCTET_CHECK(!tensors.empty(), "stack: needs at least one tensor");
  Fp8ConcatMeta("stack", tensors);  // NOTE [fp8 cat]: the scale error names stack, not cat
  TensorList u;
  const int64_t d = WrapDim(dim, tensors[0].dim() + 1, "stack");
  for (const Tensor& t : tensors) u.push_back(t.Unsqueeze(d));
  return Cat(u, d);
}

}  // namespace octet
