// Runs backward passes over the graph recorded by ops.
#pragma once

#include <octet/core/tensor.h>

namespace octet::autograd {

// Computes gradients of `roots` (with seed gradients `grads`; an undefined seed
// means ones, allowed only for one-element roots) and accumulates them into the
// .grad of every leaf that requires grad. Nodes run in reverse topological
// order; a gradient reaching a tensor along several edges is summed first.
// Saved tensors are freed after use unless retain_graph.
void Backward(const TensorList& roots, const TensorList& grads = {}, bool retain_graph = false);

// Returns d(sum of roots*grads)/d(inputs) without touching any .grad.
TensorList Grad(const TensorList& roots, const TensorList& inputs, const TensorList& grads = {},
                bool retain_graph = false);

}  // namespace octet::autograd
