// How autograd adds two gradients of one tensor (private: not installed).
//
// NOTE [autograd below ops]: autograd (nodes, the engine, Op<T>) knows only
// core; the op front ends in ops/ record its nodes. The one op the engine
// itself needs, adding the gradients that reach a tensor along several edges,
// is therefore provided from above: ops/pointwise.cc registers Add here at
// static initialisation, so no file in autograd/ includes ops/.
#pragma once

#include <octet/core/tensor.h>

namespace octet::autograd::internal {

using GradSumFn = Tensor (*)(const Tensor& a, const Tensor& b);

// Called once, by ops/pointwise.cc.
void SetGradSum(GradSumFn fn);

// a + b (same shape, dtype and device: gradients of one tensor); an
// octet::Error if no sum was registered.
Tensor SumGrads(const Tensor& a, const Tensor& b);

}  // namespace octet::autograd::internal
