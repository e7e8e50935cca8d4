// The autograd graph. Each op application that needs a gradient records a Node
// whose edges point at the nodes that produced its inputs (or at the
// AccumulateGrad node of a leaf). Nodes own their saved tensors; outputs own
// their producing node through AutogradMeta::grad_fn.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <octet/core/tensor.h>

namespace octet::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
  uint32_t input_nr = 0;       // which output of `node` this edge feeds
};

using GradHook = std::function<Tensor(const Tensor&)>;
using PostAccumulateHook = std::function<void(const Tensor&)>;

// What the engine needs to know about a tensor flowing through an edge: to
// check a gradient and to make zeros for a gradient that never arrived.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::kFloat32;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads: one per output of this node (undefined ones are filled with zeros by
  // the engine). Returns one gradient per next edge (undefined = none).
  virtual TensorList Apply(TensorList&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after backward (unless retain_graph).
  virtual void ReleaseSaved() {}

  std::vector<Edge> next_edges;
  std::vector<TensorMeta> input_meta;   // one per next edge: the input's shape/dtype
  std::vector<TensorMeta> output_meta;  // one per output
  std::vector<std::vector<GradHook>> output_hooks;  // per output
  uint64_t sequence_nr() const { return sequence_nr_; }

 private:
  uint64_t sequence_nr_;
};

// Sink node of a leaf that requires grad: adds the incoming gradient to .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  TensorList Apply(TensorList&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

  std::vector<PostAccumulateHook> post_hooks;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  std::shared_ptr<AccumulateGrad> grad_accumulator;  // leaves only (holds the leaf weakly)
};

// The edge along which the gradient of `t` flows: its grad_fn, or its leaf
// accumulator (created on first use). Null edge when t needs no grad.
Edge GradientEdge(const Tensor& t);

}  // namespace octet::autograd
