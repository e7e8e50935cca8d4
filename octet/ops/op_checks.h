// Argument checks shared by every op family; each error names the op and the
// offending tensors (dtype, shape, device).
#pragma once

#include <initializer_list>

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

}  // namespace octet
