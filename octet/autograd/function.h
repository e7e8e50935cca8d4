// Op<T>: the one way to write a differentiable op. Forward and Backward live
// side by side in one struct:
//
//   struct GeluOp : autograd::Op<GeluOp> {
//     static constexpr const char* kName = "gelu";
//     static Tensor Forward(autograd::Ctx& ctx, const Tensor& x) { ctx.Save(x); ... }
//     static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) { ... }
//   };
//   Tensor y = GeluOp::Apply(x);
//
// Forward's arguments after ctx may be Tensors, TensorLists and plain values.
// Forward returns a Tensor or a TensorList. Backward takes the output gradient
// (const Tensor&) or gradients (const TensorList&, one per output) and returns
// one gradient per Tensor input (TensorList arguments contribute one input per
// element), undefined where no gradient exists. Forward and Backward run with
// grad mode off.
//
// NOTE [backward owns its gradient]: a single-output op may take its
// gradient by value (`Tensor dy`) instead: the engine hands it over and keeps
// no reference, so the op can drop it once it is used (dy = Tensor()) and its
// bytes go back to the cache before the op's later GEMMs allocate, where the
// engine's copy would keep them until Backward returns. Fp8LinearOp does so
// after quantizing dY: on the wide GPT at O1 the bfloat16 dY of the MLP's
// first Linear (6 MiB) is then free during both GEMMs of its backward
// (docs/cpu-speed.md, 2026-11-28, eighth session). Someone else may still
// hold the gradient (a hook, Grad()'s capture): dropping a reference never
// frees bytes another holder uses.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/autograd/node.h>
#include <octet/core/tensor.h>

namespace octet::autograd {

class Ctx {
 public:
  explicit Ctx(const char* op_name) : op_name_(op_name) {}

  // Keeps t for backward. The saved copy shares t's bytes (no autograd
  // history, so no reference cycle) and remembers t's version: if t is changed
  // in place before backward, Saved() throws.
  void Save(const Tensor& t);
  // The i-th saved tensor; throws if it was modified in place since Save, or
  // if the graph was already freed by a previous backward.
  Tensor Saved(size_t i) const;
  size_t num_saved() const { return saved_.size(); }

  // Whether input i (counting Tensor inputs in order) needs a gradient.
  bool NeedsInputGrad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  bool recording() const { return recording_; }
  const char* op_name() const { return op_name_; }
  // Ops that serve several named functions (e.g. one Op for all unary math)
  // set the name that errors and Node::name() report. Must be a static string.
  void set_op_name(const char* name) { op_name_ = name; }

  // Non-tensor state for backward.
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  // Any other state an op needs in backward (e.g. the FP8 scaling state of an
  // nn::Linear); shared so the graph keeps it alive.
  std::shared_ptr<void> state;

  void Release();

  // Set by Op<T>::Apply.
  void set_recording(bool r) { recording_ = r; }
  void set_needs_input_grad(std::vector<bool> v) { needs_input_grad_ = std::move(v); }

 private:
  struct SavedTensor {
    Tensor data;
    uint64_t version;
  };
  const char* op_name_;
  bool recording_ = false;
  bool released_ = false;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_input_grad_;
};

namespace internal {

inline void CollectInputs(std::vector<const Tensor*>&) {}
template <typename A, typename... Rest>
void CollectInputs(std::vector<const Tensor*>& out, const A& a, const Rest&... rest) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
    out.push_back(&a);
  } else if constexpr (std::is_same_v<std::decay_t<A>, TensorList>) {
    for (const Tensor& t : a) out.push_back(&t);
  }
  CollectInputs(out, rest...);
}

bool AnyRequiresGrad(const std::vector<const Tensor*>& inputs);
// Wires node to its inputs and marks outputs as produced by node.
void ConnectNode(Node& node, const std::shared_ptr<Node>& self, const std::vector<const Tensor*>& inputs);
void SetHistory(const std::shared_ptr<Node>& node, TensorList& outputs);
}  // namespace internal

template <typename Derived>
class OpNode final : public Node {
 public:
  OpNode() : ctx(Derived::kName) {}
  TensorList Apply(TensorList&& grads) override;
  std::string name() const override { return ctx.op_name(); }
  void ReleaseSaved() override { ctx.Release(); }
  Ctx ctx;
};

template <typename Derived>
struct Op {
  template <typename... Args>
  static auto Apply(const Args&... args) {
    std::vector<const Tensor*> inputs;
    internal::CollectInputs(inputs, args...);
    if (!GradMode::IsEnabled() || !internal::AnyRequiresGrad(inputs)) {
      Ctx ctx(Derived::kName);
      NoGradGuard no_grad;
      return Derived::Forward(ctx, args...);
    }
    auto node = std::make_shared<OpNode<Derived>>();
    std::vector<bool> needs(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) needs[i] = inputs[i]->defined() && inputs[i]->requires_grad();
    node->ctx.set_recording(true);
    node->ctx.set_needs_input_grad(std::move(needs));
    internal::ConnectNode(*node, node, inputs);
    using Result = decltype(Derived::Forward(node->ctx, args...));
    Result result = [&] {
      NoGradGuard no_grad;
      return Derived::Forward(node->ctx, args...);
    }();
    if constexpr (std::is_same_v<Result, Tensor>) {
      TensorList outs{result};
      internal::SetHistory(node, outs);
      return outs[0];
    } else {
      static_assert(std::is_same_v<Result, TensorList>, "Forward must return Tensor or TensorList");
      internal::SetHistory(node, result);
      return result;
    }
  }
};

template <typename Derived>
TensorList OpNode<Derived>::Apply(TensorList&& grads) {
  NoGradGuard no_grad;
  TensorList owned = std::move(grads);  // the engine keeps no reference (NOTE [backward owns its gradient])
  if constexpr (requires(Ctx& c, const Tensor& g) { Derived::Backward(c, g); }) {
    return Derived::Backward(ctx, std::move(owned[0]));
  } else {
    return Derived::Backward(ctx, static_cast<const TensorList&>(owned));
  }
}

}  // namespace octet::autograd
