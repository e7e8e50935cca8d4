// Argument checks shared by every op family; each error names the op and the
// offending tensors (dtype, shape, device).
#pragma once

#include <initializer_list>
#include <memory>

#include <octet/core/scaling.h>
#include <octet/core/tensor.h>

namespace octet {

void CheckDefined(const char* op, const Tensor& t, const char* arg);
// t must be float32/float64/bfloat16/float16. An FP8 tensor gets an error that
// says the op ignores scales and points at Dequantize.
void CheckUnscaledFloat(const char* op, const Tensor& t, const char* arg);
void CheckSameDtype(const char* op, const Tensor& a, const Tensor& b);
void CheckSameDevice(const char* op, const Tensor& a, const Tensor& b);
void CheckDtypeIn(const char* op, const Tensor& t, const char* arg, std::initializer_list<DType> allowed);
void CheckRank(const char* op, const Tensor& t, const char* arg, int64_t rank);
// In-place ops on tensors that take part in autograd would corrupt gradients.
void CheckInPlaceAllowed(const char* op, const Tensor& t);

// NOTE [overlapping operands]: an op that writes `dst` while it reads another
// operand element by element must read that operand's values from before the
// op, as if through a temporary. The identical view (x += x, a.CopyFrom_(a))
// is safe as it is: each element is read before it is written. Any other
// overlap of the two byte ranges on one device (same storage or two storages
// over the same memory) makes the op read a copy of the operand first; the
// test is conservative: interleaved views that share no element count too.
// Host-side, once per op call, from shapes and strides (no data is read).
//
// True when `src` reads bytes that writing `dst` changes, other than as the
// identical view (same address, dtype, shape and strides).
bool PartiallyOverlaps(const Tensor& dst, const Tensor& src);
// Whether a and b name the same elements in the same order: one address,
// dtype and shape, and the same stride wherever a dim has more than one
// element.
bool SameElements(const Tensor& a, const Tensor& b);
// `src` itself, or a contiguous detached copy of it when it partially
// overlaps `dst` (for in-place ops; not recorded by autograd).
Tensor UnaliasedOperand(const Tensor& dst, const Tensor& src);

// An FP8 t's scale metadata, when it has any, must be per-tensor (the only
// granularity the FP8 ops read yet).
void CheckPerTensorScale(const char* op, const Tensor& t);

// Ops that write FP8 with a caller's per-tensor scale (LayerNormFp8,
// GeluFp8): fp8 must be an FP8 dtype and scale a float32 tensor with one
// element on x's device.
void CheckFp8Target(const char* op, const Tensor& x, DType fp8, const Tensor& scale);
// The per-tensor ScaleMeta such an op's kernel fills, as Quantize's: a copy of
// scale (a later in-place update of the caller's scale, as delayed scaling
// does, leaves the bytes' meaning alone) and fresh f32 scale_inv and amax
// on `device`.
std::shared_ptr<ScaleMeta> NewFp8OutputMeta(const Tensor& scale, Device device);

}  // namespace octet
