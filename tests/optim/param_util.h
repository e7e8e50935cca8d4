// Parameters and gradients for the optimizer tests.
#pragma once

#include <vector>

#include <octet/core/tensor.h>

namespace octet::optim::testing {

// A parameter (requires_grad) holding `values`.
inline Tensor Param(const std::vector<double>& values, const Shape& shape, DType dtype = DType::kFloat32) {
  return FromVector(values, shape, {.dtype = dtype, .requires_grad = true});
}

// Sets p's gradient to `g`, stored as `dtype`.
inline void SetGrad(const Tensor& p, const std::vector<double>& g, DType dtype) {
  p.set_grad(FromVector(g, p.shape(), {.dtype = dtype}));
}

}  // namespace octet::optim::testing
