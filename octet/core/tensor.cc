#include <octet/core/tensor.h>

#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include <octet/core/graph_internal.h>
#include <octet/core/host_reads.h>
#include <octet/core/scaling.h>

namespace octet {

std::string ShapeStr(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool TryNumel(const Shape& shape, int64_t* numel) {
  int64_t n = 1;
  bool overflow = false, zero = false;
  for (int64_t d : shape) {
    zero |= d == 0;
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  *numel = zero ? 0 : n;
  return zero || !overflow;
}

int64_t Numel(const Shape& shape) {
  int64_t n = 0;
  OCTET_CHECK(TryNumel(shape, &n), "shape ", ShapeStr(shape), " has more elements than int64 can count");
  return n;
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  bool overflow = false;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    OCTET_CHECK(!overflow, "shape ", ShapeStr(shape), ": its strides overflow int64");
    strides[i] = s;
    overflow = __builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s);
  }
  return strides;
}

int64_t WrapDim(int64_t dim, int64_t rank, const char* op) {
  const int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  OCTET_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " is out of range for a tensor of rank ", rank,
              " (expected [", lo, ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(rank, 1) : dim;
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(Numel(shape_)),
      dtype_(dtype) {
  OCTET_DCHECK(shape_.size() == strides_.size());
}

TensorImpl::~TensorImpl() = default;

namespace {

// Like WrapDim for an op that indexes a dim: a rank-0 tensor has none.
int64_t WrapIndexedDim(int64_t dim, const Tensor& t, const char* op) {
  OCTET_CHECK(t.dim() > 0, op, ": dim ", dim, " given for a rank-0 tensor ", Describe(t), ", which has no dims");
  return WrapDim(dim, t.dim(), op);
}

}  // namespace

int64_t Tensor::size(int64_t dim) const { return shape()[WrapIndexedDim(dim, *this, "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[WrapIndexedDim(dim, *this, "stride")]; }

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  const Shape& st = strides();
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sh.size()) - 1; i >= 0; --i) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = Checked();
  char* base = static_cast<char*>(t.storage()->data());
  return base == nullptr ? nullptr : base + t.offset() * SizeOf(t.dtype());
}

Tensor Tensor::WithScaleMeta(std::shared_ptr<const ScaleMeta> meta) const {
  const TensorImpl& t = Checked();
  auto impl = std::make_shared<TensorImpl>(t.storage(), t.shape(), t.strides(), t.offset(), t.dtype());
  impl->set_scale_meta(std::move(meta));
  return Tensor(std::move(impl));
}

namespace {

double ReadElement(const void* p, DType dtype) {
  double v = 0;
  DispatchAll(dtype, "read element", [&]<typename T>() { v = ConvertElement<double>(*static_cast<const T*>(p)); });
  return v;
}

}  // namespace

double Tensor::At(const Shape& idx) const {
  internal::CountHostRead();  // NOTE [host reads]
  if (!device().is_cpu()) return To(kCPU).At(idx);
  OCTET_CHECK(static_cast<int64_t>(idx.size()) == dim(), "At: index ", ShapeStr(idx), " has ", idx.size(),
              " coordinates but the tensor has shape ", ShapeStr(shape()));
  int64_t off = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    OCTET_CHECK(idx[i] >= 0 && idx[i] < shape()[i], "At: index ", ShapeStr(idx), " is out of range for shape ",
                ShapeStr(shape()));
    off += idx[i] * strides()[i];
  }
  const char* p = static_cast<const char*>(raw_data()) + off * SizeOf(dtype());
  double v = ReadElement(p, dtype());
  if (IsFp8(dtype())) v *= ScaleInvValue(*this);
  return v;
}

double Tensor::At(std::initializer_list<int64_t> idx) const { return At(Shape(idx)); }

double Tensor::Item() const {
  OCTET_CHECK(numel() == 1, "Item: expected a tensor with one element, got shape ", ShapeStr(shape()));
  return At(Shape(dim(), 0));
}

std::vector<double> Tensor::ToDoubles() const {
  internal::CountHostRead();  // NOTE [host reads]
  if (!device().is_cpu()) return To(kCPU).ToDoubles();
  const Tensor c = Contiguous();
  std::vector<double> out(c.numel());
  const char* p = static_cast<const char*>(c.raw_data());
  const double scale_inv = IsFp8(dtype()) ? ScaleInvValue(*this) : 1.0;
  DispatchAll(dtype(), "ToDoubles", [&]<typename T>() {
    for (int64_t i = 0; i < c.numel(); ++i) out[i] = ConvertElement<double>(reinterpret_cast<const T*>(p)[i]);
  });
  if (scale_inv != 1.0)
    for (double& v : out) v *= scale_inv;
  return out;
}

std::vector<float> Tensor::ToFloats() const {
  std::vector<double> d = ToDoubles();
  return std::vector<float>(d.begin(), d.end());
}

std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  std::string s = std::string(Name(t.dtype())) + ShapeStr(t.shape());
  // Appended, not `" " + ...`: GCC 12 warns falsely (-Wrestrict) about that inlined memcpy.
  if (!t.device().is_cpu()) s.append(" ").append(ToString(t.device()));
  return s;
}

std::string Tensor::ToString(int64_t max_elements) const {
  OCTET_CHECK(max_elements >= 0, "ToString: max_elements must be >= 0, got ", max_elements);
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << Describe(*this);
  if (IsFp8(dtype()) && scale_meta()) os << ", scale_inv=" << ScaleInvValue(*this);
  if (requires_grad()) os << ", requires_grad";
  os << ")\n";
  const std::vector<double> v = ToDoubles();
  const Shape& sh = shape();
  os << std::setprecision(6);
  if (sh.empty()) {
    os << v[0];
    return os.str();
  }
  const int64_t last = sh.back();
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(v.size()), max_elements);
  for (int64_t i = 0; i < n; ++i) {
    if (last > 0 && i % last == 0) os << (i ? "\n[" : "[");
    os << v[i];
    if (last > 0 && (i + 1) % last == 0)
      os << "]";
    else if (i + 1 < n)
      os << ", ";
  }
  if (n < static_cast<int64_t>(v.size())) os << " ... (" << v.size() - n << " more)";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.ToString(); }

// ---- factories -------------------------------------------------------------

namespace {

// The bytes a contiguous tensor of shape and dtype needs; throws naming op for
// a negative dim or an element count or byte size past int64.
size_t StorageBytes(const Shape& shape, DType dtype, const char* op) {
  for (int64_t d : shape) OCTET_CHECK(d >= 0, op, ": negative dimension in shape ", ShapeStr(shape));
  int64_t numel = 0, nbytes = 0;
  OCTET_CHECK(TryNumel(shape, &numel), op, ": shape ", ShapeStr(shape), " of ", Name(dtype),
              " has more elements than int64 can count");
  OCTET_CHECK(!__builtin_mul_overflow(numel, int64_t{SizeOf(dtype)}, &nbytes), op, ": shape ", ShapeStr(shape),
              " of ", Name(dtype), " (", numel, " elements of ", SizeOf(dtype),
              " bytes) has a byte size past int64");
  return static_cast<size_t>(nbytes);
}

// Whether `value` truncated toward zero lies in integer dtype's range (false
// for NaN and infinities); true for every other dtype. The bounds are
// SaturatingCast's (NOTE [float to integer] in core/dtype_traits.h).
bool FitsDType(double value, DType dtype) {
  bool fits = true;
  DispatchAll(dtype, "FitsDType", [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const double t = std::trunc(value);
      fits = t >= internal::IntegerLo<T, double>() && t < internal::IntegerHiExclusive<T, double>();
    }
  });
  return fits;
}

// An integer dtype's range as "[min, max]"; "any" for every other dtype.
std::string RangeStr(DType dtype) {
  std::string range = "any";
  DispatchAll(dtype, "RangeStr", [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      range = "[" + std::to_string(static_cast<long long>(std::numeric_limits<T>::min())) + ", " +
              std::to_string(static_cast<long long>(std::numeric_limits<T>::max())) + "]";
    }
  });
  return range;
}

}  // namespace

void CheckRepresentable(double value, DType dtype, const char* op) {
  OCTET_CHECK(FitsDType(value, dtype), op, ": value ", value, " cannot be represented in ", Name(dtype),
              " (finite values whose integer part lies in ", RangeStr(dtype), ")");
}

void CheckIntegerConvertible(const Tensor& src, DType dtype, const char* op) {
  // NOTE [float to integer] in core/dtype_traits.h.
  if (!IsFloat(src.dtype()) || IsFloat(dtype) || dtype == DType::kBool || !src.device().is_cpu()) return;
  const int64_t n = src.numel();
  if (n == 0) return;
  const Shape& shape = src.shape();
  const Shape& strides = src.strides();
  DispatchAll(src.dtype(), op, [&]<typename T>() {
    if constexpr (!std::is_integral_v<T>) {
      const T* base = static_cast<const T*>(src.raw_data());
      Shape idx(shape.size(), 0);
      int64_t off = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = ConvertElement<double>(base[off]);
        OCTET_CHECK(FitsDType(v, dtype), op, ": ", Describe(src), " holds ", v, " at index ", ShapeStr(idx),
                    ", which ", Name(dtype), " cannot represent (finite values whose integer part lies in ",
                    RangeStr(dtype), ")");
        // Next row-major index.
        for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
          off += strides[d];
          if (++idx[d] < shape[d]) break;
          off -= idx[d] * strides[d];
          idx[d] = 0;
        }
      }
    }
  });
}

Tensor Empty(const Shape& shape, const TensorOptions& options) {
  const size_t nbytes = StorageBytes(shape, options.dtype, "Empty");
  auto storage = std::make_shared<Storage>(nbytes, options.device);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), shape, ContiguousStrides(shape), 0, options.dtype));
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

namespace {

Tensor FullNamed(const Shape& shape, double value, const TensorOptions& options, const char* op) {
  StorageBytes(shape, options.dtype, op);
  CheckRepresentable(value, options.dtype, op);
  TensorOptions o = options;
  o.requires_grad = false;
  Tensor t = Empty(shape, o);
  t.Fill_(value);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor Full(const Shape& shape, double value, const TensorOptions& options) {
  return FullNamed(shape, value, options, "Full");
}
Tensor Zeros(const Shape& shape, const TensorOptions& options) { return FullNamed(shape, 0.0, options, "Zeros"); }
Tensor Ones(const Shape& shape, const TensorOptions& options) { return FullNamed(shape, 1.0, options, "Ones"); }
Tensor Scalar(double value, const TensorOptions& options) { return FullNamed({}, value, options, "Scalar"); }
Tensor EmptyLike(const Tensor& t) { return Empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ZerosLike(const Tensor& t) { return Zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }

Tensor FromBlob(void* data, const Shape& shape, DType dtype, Device device) {
  const size_t nbytes = StorageBytes(shape, dtype, "FromBlob");
  auto storage = std::make_shared<Storage>(data, nbytes, device, /*owned=*/false);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, ContiguousStrides(shape), 0, dtype));
}

namespace {

template <typename V>
Tensor FromValues(const std::vector<V>& values, const Shape& shape, const TensorOptions& options) {
  internal::CheckNotCapturing("making a tensor from host values (FromVector, Arange)",
                              "the values would be frozen into the graph; make the tensor before Capture");
  StorageBytes(shape, options.dtype, "FromVector");
  OCTET_CHECK(static_cast<int64_t>(values.size()) == Numel(shape), "FromVector: ", values.size(),
              " values do not fill shape ", ShapeStr(shape));
  TensorOptions o = options;
  o.requires_grad = false;
  Tensor src = FromBlob(const_cast<V*>(values.data()), shape, DTypeOf<V>::value);
  CheckIntegerConvertible(src, o.dtype, "FromVector");
  Tensor t = Empty(shape, o);
  t.CopyFrom_(src);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor FromVector(const std::vector<double>& v, const Shape& s, const TensorOptions& o) { return FromValues(v, s, o); }
Tensor FromVector(const std::vector<float>& v, const Shape& s, const TensorOptions& o) { return FromValues(v, s, o); }
Tensor FromVector(const std::vector<int64_t>& v, const Shape& s, const TensorOptions& o) { return FromValues(v, s, o); }
Tensor FromVector(const std::vector<int32_t>& v, const Shape& s, const TensorOptions& o) { return FromValues(v, s, o); }

Tensor Arange(int64_t n, const TensorOptions& options) {
  OCTET_CHECK(n >= 0, "Arange: n must be >= 0, got ", n);
  StorageBytes({n}, DType::kInt64, "Arange");  // the host buffer below; options.dtype is checked by FromVector
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return FromVector(v, {n}, options);
}

// ---- scale metadata ----------------------------------------------------------

const char* Name(ScaleGranularity g) {
  switch (g) {
    case ScaleGranularity::kPerTensor: return "per-tensor";
    case ScaleGranularity::kPerRow: return "per-row";
    case ScaleGranularity::kBlock1x128: return "1x128 blocks";
    case ScaleGranularity::kBlock128x128: return "128x128 blocks";
  }
  return "?";
}

std::shared_ptr<const ScaleMeta> MakePerTensorScale(float scale, float amax, Device device) {
  auto meta = std::make_shared<ScaleMeta>();
  meta->granularity = ScaleGranularity::kPerTensor;
  meta->scale = Full({1}, scale, {.device = device});
  meta->scale_inv = Full({1}, 1.0 / static_cast<double>(scale), {.device = device});
  meta->amax = Full({1}, amax, {.device = device});
  return meta;
}

namespace {
// A per-tensor scale's value. On the CPU a plain load (what the CPU GEMM
// kernel does with its operands' scales: its own memory, not a round trip,
// NOTE [host reads]); on a device a counted read.
float PerTensorValue(const Tensor& t) {
  if (t.device().is_cpu() && t.numel() == 1 && t.dtype() == DType::kFloat32) return *t.data<float>();
  return static_cast<float>(t.Item());
}
}  // namespace

float ScaleInvValue(const Tensor& fp8) {
  const ScaleMeta* m = fp8.scale_meta();
  if (m == nullptr) return 1.0f;
  OCTET_CHECK(m->granularity == ScaleGranularity::kPerTensor, "ScaleInvValue: ", Name(m->granularity),
              " scaling has no single scale_inv");
  return PerTensorValue(m->scale_inv);
}

float ScaleValue(const Tensor& fp8) {
  const ScaleMeta* m = fp8.scale_meta();
  if (m == nullptr) return 1.0f;
  OCTET_CHECK(m->granularity == ScaleGranularity::kPerTensor, "ScaleValue: ", Name(m->granularity),
              " scaling has no single scale");
  return PerTensorValue(m->scale);
}

}  // namespace octet
