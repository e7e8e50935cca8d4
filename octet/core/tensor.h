// Tensor: a strided view of a Storage with a dtype, a device, optional FP8
// scale metadata and optional autograd metadata.
//
// A Tensor is a cheap handle (a shared_ptr to a TensorImpl): copying a Tensor
// aliases it. Views (Reshape, Permute, Narrow, Expand, ...) share storage with
// their base; Contiguous/Clone/To copy.
//
// Shapes use the row-major convention: the last dim is the fastest-varying in a
// contiguous tensor. Strides and offsets count elements, not bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <octet/core/device.h>
#include <octet/core/dtype.h>
#include <octet/core/error.h>
#include <octet/core/storage.h>

namespace octet {

using Shape = std::vector<int64_t>;

std::string ShapeStr(const Shape& shape);
// The element count (a zero dim makes it 0 whatever the others). Throws when
// it overflows int64; TryNumel returns false then instead.
int64_t Numel(const Shape& shape);
bool TryNumel(const Shape& shape, int64_t* numel);
// Row-major strides. Throws when a stride overflows int64 (only possible with
// a zero dim in front of huge ones: the element count is checked by Numel).
Shape ContiguousStrides(const Shape& shape);
// Resolves a possibly negative dim against a rank; throws naming `op` if out
// of range. A rank-0 tensor accepts dim 0 and -1 (as PyTorch) and gets 0: an
// op that cannot act on a rank-0 tensor checks that itself (`shape()[0]` of a
// rank-0 tensor does not exist).
int64_t WrapDim(int64_t dim, int64_t rank, const char* op);
// Throws naming `op` when `value` converted to `dtype` would not be the value
// truncated toward zero: for an integer dtype, NaN, an infinity, or a value
// outside its range after truncation (Full({2}, 300, {.dtype = kUInt8})).
// Other dtypes accept any value (float dtypes round, overflowing to inf;
// bool is value != 0).
void CheckRepresentable(double value, DType dtype, const char* op);

struct ScaleMeta;  // core/scaling.h
class Tensor;
using TensorList = std::vector<Tensor>;

// Throws naming `op`, the first offending element and its index when `src`
// (a float or FP8 tensor) holds a value that converting to the integer dtype
// `dtype` could not represent (as CheckRepresentable; FP8 elements are read
// unscaled, as the copy reads them). A no-op for other dtype pairs and for
// tensors off the CPU: a device kernel converts such values by NOTE [float to
// integer] (core/dtype_traits.h) instead, since checking would read the
// tensor back to the host.
void CheckIntegerConvertible(const Tensor& src, DType dtype, const char* op);

namespace autograd {
class Node;
struct AutogradMeta;
// Frees an AutogradMeta. core knows the type only by name (core includes
// nothing above it): the deleter, like TensorImpl::mutable_autograd_meta, is
// defined in autograd/node.cc, where the type is complete.
struct AutogradMetaDeleter {
  void operator()(AutogradMeta* meta) const;
};
}  // namespace autograd

struct TensorOptions {
  DType dtype = DType::kFloat32;
  Device device = kCPU;
  bool requires_grad = false;
};

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  ~TensorImpl();

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }

  const std::shared_ptr<const ScaleMeta>& scale_meta() const { return scale_meta_; }
  void set_scale_meta(std::shared_ptr<const ScaleMeta> meta) { scale_meta_ = std::move(meta); }

  autograd::AutogradMeta* autograd_meta() const { return autograd_.get(); }
  // Creates the metadata on first use. Defined in autograd/node.cc.
  autograd::AutogradMeta& mutable_autograd_meta();

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_;
  int64_t numel_;
  DType dtype_;
  std::shared_ptr<const ScaleMeta> scale_meta_;
  std::unique_ptr<autograd::AutogradMeta, autograd::AutogradMetaDeleter> autograd_;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata --------------------------------------------------------
  const Shape& shape() const { return Checked().shape(); }
  const Shape& strides() const { return Checked().strides(); }
  int64_t size(int64_t dim) const;  // throws on a rank-0 tensor (no dims)
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return Checked().offset(); }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return Checked().numel(); }
  DType dtype() const { return Checked().dtype(); }
  Device device() const { return Checked().storage()->device(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * static_cast<size_t>(SizeOf(dtype())); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return Checked().storage(); }

  // Pointer to element [0,...,0]. data<T>() checks that T matches the dtype.
  void* raw_data() const;
  template <typename T>
  T* data() const;

  // ---- FP8 scaling -----------------------------------------------------
  // The scale metadata of an FP8 tensor (null for other dtypes or an FP8
  // tensor made without a scale).
  const ScaleMeta* scale_meta() const { return Checked().scale_meta().get(); }
  const std::shared_ptr<const ScaleMeta>& scale_meta_ptr() const { return Checked().scale_meta(); }
  // A tensor sharing this one's bytes with different scale metadata (a
  // metadata-only op: no bytes are touched).
  Tensor WithScaleMeta(std::shared_ptr<const ScaleMeta> meta) const;

  // ---- element access (tests, printing; synchronous) ---------------------
  // Value of element idx as double; FP8 values are multiplied by scale_inv.
  double At(std::initializer_list<int64_t> idx) const;
  double At(const Shape& idx) const;
  double Item() const;  // the single element of a 1-element tensor
  // All elements in row-major order, as double (FP8 dequantized).
  std::vector<double> ToDoubles() const;
  std::vector<float> ToFloats() const;

  // ---- autograd ----------------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as requiring grad. Throws on a non-leaf or a non-float tensor.
  Tensor& requires_grad_(bool enabled = true);
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;  // drops the gradient (sets it undefined)
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  bool is_leaf() const;
  // A tensor sharing storage, with no autograd history.
  Tensor detach() const;
  // Runs backward from this tensor. grad defaults to 1 for a 1-element tensor.
  void Backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Hook on the gradient flowing into this tensor; may return a replacement
  // (an undefined return keeps the gradient as it is). A replacement of
  // another shape, dtype or device than the gradient the hook received
  // throws during backward, naming the tensor and both gradients.
  void RegisterHook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaf only: called after the gradient has been accumulated into grad(),
  // i.e. when this backward pass will not change it again (DDP uses it).
  void RegisterPostAccumulateHook(std::function<void(const Tensor&)> hook) const;

  // ---- views (share storage; differentiable) ------------------------------
  Tensor View(const Shape& shape) const;     // requires compatible strides; -1 infers a dim
  Tensor Reshape(const Shape& shape) const;  // view when possible, else copy
  Tensor Permute(const Shape& dims) const;
  Tensor Transpose(int64_t dim0, int64_t dim1) const;
  Tensor T() const;  // 2-D transpose
  // Narrow, Slice and Select throw on a rank-0 tensor (it has no dim to
  // index); Squeeze and Transpose of one return it (as PyTorch).
  Tensor Narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor Slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor Select(int64_t dim, int64_t index) const;  // removes dim
  Tensor Expand(const Shape& shape) const;          // broadcast view (stride 0)
  Tensor Squeeze(int64_t dim) const;
  Tensor Unsqueeze(int64_t dim) const;
  Tensor Flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // ---- copies (differentiable) ------------------------------------------
  Tensor Contiguous() const;  // self when already contiguous
  Tensor Clone() const;
  // Dtype conversion. FP8 -> other: dequantizes with scale_inv. Other -> FP8:
  // quantizes with scale 1 (saturating); use ops/cast.h Quantize for a scale.
  // Float -> integer truncates toward zero; a CPU tensor holding NaN, an
  // infinity or a value outside the integer dtype's range throws, naming the
  // first such element (CheckIntegerConvertible; a device tensor saturates,
  // NOTE [float to integer]). -> bool: value != 0.
  Tensor To(DType dtype) const;
  Tensor To(Device device) const;
  // In-place copy of src (broadcast to this shape, converted to this dtype).
  // A src sharing memory with this tensor reads as it was before the copy.
  // FP8 keeps values (NOTE [fp8 copies] in ops/shape.cc): FP8 -> FP8 needs
  // equal scale_inv on both sides and a copy between FP8 and another dtype
  // needs the FP8 side's scale_inv to be 1; otherwise it throws (Dequantize
  // or Quantize first).
  Tensor& CopyFrom_(const Tensor& src);
  // Sets every element to value; an FP8 tensor stores the code of
  // value * scale (saturating to the largest finite code), so it reads back
  // as value.
  Tensor& Fill_(double value);

  // "Tensor(float32[2, 3])" and the first max_elements values (then
  // "... (N more)"). Throws for a negative max_elements.
  std::string ToString(int64_t max_elements = 64) const;

 private:
  const TensorImpl& Checked() const {
    OCTET_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
// "float32[2, 3] cpu" — how error messages name a tensor.
std::string Describe(const Tensor& t);

// ---- factories -------------------------------------------------------------
// Every factory throws for a negative dim, or a shape whose element count or
// byte size overflows int64 (the error names the shape and the dtype).
// Full/Zeros/Ones/Scalar also throw for a value the dtype cannot represent
// (CheckRepresentable).
Tensor Empty(const Shape& shape, const TensorOptions& options = {});
Tensor Zeros(const Shape& shape, const TensorOptions& options = {});
Tensor Ones(const Shape& shape, const TensorOptions& options = {});
Tensor Full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor Scalar(double value, const TensorOptions& options = {});  // shape []
// 0, 1, ..., n-1 (n >= 0)
Tensor Arange(int64_t n, const TensorOptions& options = {.dtype = DType::kInt64});
// Copies `values` (row-major) into a new tensor of `shape`, converting to
// options.dtype (as To: a value an integer dtype cannot represent throws).
Tensor FromVector(const std::vector<double>& values, const Shape& shape, const TensorOptions& options = {});
Tensor FromVector(const std::vector<float>& values, const Shape& shape, const TensorOptions& options = {});
Tensor FromVector(const std::vector<int64_t>& values, const Shape& shape,
                  const TensorOptions& options = {.dtype = DType::kInt64});
Tensor FromVector(const std::vector<int32_t>& values, const Shape& shape,
                  const TensorOptions& options = {.dtype = DType::kInt32});
Tensor EmptyLike(const Tensor& t);
Tensor ZerosLike(const Tensor& t);
// Wraps caller-owned memory (not freed by octet; must outlive the tensor).
Tensor FromBlob(void* data, const Shape& shape, DType dtype, Device device = kCPU);

}  // namespace octet

#include <octet/core/dtype_traits.h>

template <typename T>
T* octet::Tensor::data() const {
  OCTET_CHECK(DTypeOf<T>::value == dtype(), "data<", Name(DTypeOf<T>::value), ">() called on a ", Name(dtype()),
              " tensor");
  return static_cast<T*>(raw_data());
}
