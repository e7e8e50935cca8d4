// The autograd context of an FP8 Linear's output (what its backward saved),
// for the amp tests.
#pragma once

#include <octet/core/error.h>
#include <octet/nn/amp.h>

namespace octet::nn {

inline const autograd::Ctx& CtxOf(const Tensor& y) {
  auto* node = dynamic_cast<autograd::OpNode<amp::Fp8LinearOp>*>(y.grad_fn().get());
  OCTET_CHECK(node != nullptr, "not an fp8_linear output: ", y.grad_fn() ? y.grad_fn()->name() : "leaf");
  return node->ctx;
}

}  // namespace octet::nn
