#include <octet/autograd/engine.h>

#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <octet/autograd/grad_mode.h>
#include <octet/autograd/node.h>
#include <octet/autograd/grad_sum_internal.h>

namespace octet::autograd {
namespace {

struct NodeTask {
  TensorList grads;  // one per output of the node
  int pending = 0;   // edges into this node not yet delivered
};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

Tensor ZerosFor(const TensorMeta& m) { return Zeros(m.shape, {.dtype = m.dtype, .device = m.device}); }

// The gradient of an FP8 tensor is carried in a float dtype (NOTE
// [straight-through FP8 casts] in ops/cast.h), never in FP8.
void CheckGrad(const Node& node, size_t i, const Tensor& g) {
  const TensorMeta& m = node.input_meta[i];
  const bool dtype_ok = g.dtype() == m.dtype || (IsFp8(m.dtype) && IsUnscaledFloat(g.dtype()));
  OCTET_CHECK(g.shape() == m.shape && dtype_ok, "backward of ", node.name(), " returned gradient ",
              Describe(g), " for input ", i, " which is ", Name(m.dtype), ShapeStr(m.shape));
}

// A gradient hook's replacement must match the gradient it received in
// shape, dtype and device (set_grad's rule, plus the device): anything else
// would reach .grad or the next backward function as a wrong-shaped gradient
// (or be broadcast silently).
void CheckHookResult(const Node& node, size_t i, const Tensor& received, const Tensor& replaced) {
  if (replaced.shape() == received.shape() && replaced.dtype() == received.dtype() &&
      replaced.device() == received.device())
    return;
  const TensorMeta& m = node.output_meta[i];
  std::string target = std::string(Name(m.dtype)) + ShapeStr(m.shape);
  if (!m.device.is_cpu()) target.append(" ").append(ToString(m.device));
  if (dynamic_cast<const AccumulateGrad*>(&node) != nullptr) {
    target = "leaf tensor " + target;
  } else {
    target = "tensor " + target + " (output " + std::to_string(i) + " of " + node.name() + ")";
  }
  OCTET_FAIL("RegisterHook: the hook on ", target, " returned gradient ", Describe(replaced), " but received ",
             Describe(received), "; a hook must return a gradient of the same shape, dtype and device (or an ",
             "undefined tensor to keep the gradient)");
}

// Accumulate-or-capture pass shared by Backward and Grad.
void Run(const TensorList& roots, const TensorList& seeds, bool retain_graph,
         const std::unordered_map<const Node*, std::vector<std::pair<uint32_t, size_t>>>* capture,
         TensorList* captured) {
  OCTET_CHECK(seeds.empty() || seeds.size() == roots.size(), "backward: ", roots.size(), " roots but ", seeds.size(),
              " gradients");
  std::unordered_map<Node*, NodeTask> tasks;
  std::vector<std::pair<Edge, Tensor>> root_edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    OCTET_CHECK(r.defined() && r.requires_grad(), "backward: root ", i, " (", Describe(r),
                ") does not require grad and has no grad_fn");
    Tensor seed;
    if (seeds.empty() || !seeds[i].defined()) {
      OCTET_CHECK(r.numel() == 1, "backward: a gradient must be given for a non-scalar root of shape ",
                  ShapeStr(r.shape()));
      seed = Ones(r.shape(), {.dtype = r.dtype(), .device = r.device()});
    } else {
      seed = seeds[i];
      OCTET_CHECK(seed.shape() == r.shape() && seed.dtype() == r.dtype(), "backward: gradient ", Describe(seed),
                  " does not match root ", Describe(r));
    }
    root_edges.push_back({GradientEdge(r), seed});
  }

  // Count dependencies: how many edges lead into each node.
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& [e, g] : root_edges) {
    if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      tasks[e.node.get()].pending++;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  auto deliver = [&](Node* n, uint32_t input_nr, Tensor g) {
    NodeTask& t = tasks[n];
    if (t.grads.empty()) t.grads.resize(n->output_meta.size());
    Tensor& slot = t.grads[input_nr];
    slot = slot.defined() ? internal::SumGrads(slot, g) : std::move(g);
  };

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (auto& [e, g] : root_edges) deliver(e.node.get(), e.input_nr, g);
  for (auto& [e, g] : root_edges) {
    if (tasks[e.node.get()].pending == 0) {
      tasks[e.node.get()].pending = -1;  // queued
      ready.push(e.node.get());
    }
  }

  NoGradGuard no_grad;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    NodeTask& task = tasks[n];
    TensorList grads = std::move(task.grads);
    grads.resize(n->output_meta.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      for (const GradHook& hook : n->output_hooks[i]) {
        if (!grads[i].defined()) continue;
        Tensor replaced = hook(grads[i]);
        if (!replaced.defined()) continue;  // documented: keeps the gradient
        CheckHookResult(*n, i, grads[i], replaced);
        grads[i] = replaced;
      }
    }
    if (capture) {
      auto it = capture->find(n);
      if (it != capture->end()) {
        for (auto [output_nr, slot] : it->second) (*captured)[slot] = grads[output_nr];
      }
      if (dynamic_cast<AccumulateGrad*>(n) != nullptr) continue;  // Grad() never touches .grad
    }
    const bool is_leaf_sink = dynamic_cast<AccumulateGrad*>(n) != nullptr;
    if (!is_leaf_sink) {
      // Ops see a gradient for every output: one that never arrived is zero.
      for (size_t i = 0; i < grads.size(); ++i)
        if (!grads[i].defined()) grads[i] = ZerosFor(n->output_meta[i]);
    }
    TensorList input_grads = n->Apply(std::move(grads));
    if (!retain_graph) n->ReleaseSaved();
    OCTET_CHECK(input_grads.size() == n->next_edges.size() || is_leaf_sink,
                "backward of ", n->name(), " returned ", input_grads.size(), " gradients for ",
                n->next_edges.size(), " inputs");
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.node) continue;
      if (input_grads[i].defined()) {
        CheckGrad(*n, i, input_grads[i]);
        deliver(e.node.get(), e.input_nr, std::move(input_grads[i]));
      }
      NodeTask& next = tasks[e.node.get()];
      if (--next.pending == 0) {
        next.pending = -1;
        ready.push(e.node.get());
      }
    }
  }
}

}  // namespace

void Backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  Run(roots, grads, retain_graph, nullptr, nullptr);
}

TensorList Grad(const TensorList& roots, const TensorList& inputs, const TensorList& grads, bool retain_graph) {
  std::unordered_map<const Node*, std::vector<std::pair<uint32_t, size_t>>> capture;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OCTET_CHECK(inputs[i].requires_grad(), "Grad: input ", i, " (", Describe(inputs[i]), ") does not require grad");
    Edge e = GradientEdge(inputs[i]);
    capture[e.node.get()].push_back({e.input_nr, i});
  }
  TensorList out(inputs.size());
  Run(roots, grads, retain_graph, &capture, &out);
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].defined()) out[i] = ZerosLike(inputs[i]);
  }
  return out;
}

}  // namespace octet::autograd
