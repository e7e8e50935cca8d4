#include <octet/autograd/node.h>

#include <atomic>

#include <octet/autograd/engine.h>
#include <octet/autograd/function.h>
#include <octet/autograd/grad_mode.h>
#include <octet/autograd/grad_sum_internal.h>

namespace octet::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
std::atomic<internal::GradSumFn> g_grad_sum{nullptr};  // NOTE [autograd below ops]
thread_local bool t_grad_enabled = true;
}  // namespace

bool GradMode::IsEnabled() { return t_grad_enabled; }
void GradMode::SetEnabled(bool enabled) { t_grad_enabled = enabled; }

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {
  Tensor t(leaf);
  input_meta.clear();
  output_meta.push_back({t.shape(), t.dtype(), t.device()});
  output_hooks.resize(1);
}

TensorList AccumulateGrad::Apply(TensorList&& grads) {
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  if (!impl) return {};
  Tensor leaf(impl);
  AutogradMeta& meta = impl->mutable_autograd_meta();
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  NoGradGuard no_grad;
  if (!meta.grad.defined()) {
    // Own the gradient: it may alias a buffer of another node or an expanded view.
    meta.grad = (g.is_contiguous() && g.offset() == 0 && g.storage().use_count() == 1) ? g.detach() : g.Clone();
  } else {
    meta.grad.CopyFrom_(internal::SumGrads(meta.grad, g));
  }
  for (const auto& hook : post_hooks) hook(leaf);
  return {};
}

Edge GradientEdge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.impl()->mutable_autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<AccumulateGrad> acc = meta.grad_accumulator;
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

// ---- Ctx ---------------------------------------------------------------------

void Ctx::Save(const Tensor& t) {
  if (!recording_) return;
  if (!t.defined()) {
    saved_.push_back({Tensor(), 0});
    return;
  }
  saved_.push_back({t.detach(), t.storage()->version()});
}

Tensor Ctx::Saved(size_t i) const {
  OCTET_CHECK(!released_, op_name_,
              ": trying to run backward through the graph a second time, but its saved tensors were already "
              "freed; pass retain_graph=true to the first backward");
  OCTET_CHECK(i < saved_.size(), op_name_, ": saved tensor ", i, " requested but only ", saved_.size(),
              " were saved");
  const SavedTensor& s = saved_[i];
  if (s.data.defined()) {
    const uint64_t now = s.data.storage()->version();
    OCTET_CHECK(now == s.version, op_name_, ": a tensor saved for backward (", Describe(s.data),
                ") was modified in place after it was saved (version ", now, ", expected ", s.version,
                "); compute on a copy or avoid the in-place op");
  }
  return s.data;
}

void Ctx::Release() {
  saved_.clear();
  saved_.shrink_to_fit();
  released_ = true;
}

// ---- wiring --------------------------------------------------------------------

namespace internal {

void SetGradSum(GradSumFn fn) { g_grad_sum.store(fn); }

Tensor SumGrads(const Tensor& a, const Tensor& b) {
  const GradSumFn sum = g_grad_sum.load();
  OCTET_CHECK(sum != nullptr, "autograd: no gradient sum is registered (ops/pointwise.cc registers Add; is it linked?)");
  return sum(a, b);
}

bool AnyRequiresGrad(const std::vector<const Tensor*>& inputs) {
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

void ConnectNode(Node& node, const std::shared_ptr<Node>&, const std::vector<const Tensor*>& inputs) {
  node.next_edges.reserve(inputs.size());
  node.input_meta.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    node.next_edges.push_back(GradientEdge(*t));
    if (t->defined())
      node.input_meta.push_back({t->shape(), t->dtype(), t->device()});
    else
      node.input_meta.push_back({});
  }
}

void SetHistory(const std::shared_ptr<Node>& node, TensorList& outputs) {
  node->output_meta.reserve(outputs.size());
  node->output_hooks.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    if (!out.defined()) {
      node->output_meta.push_back({});
      continue;
    }
    // An output may alias an input's TensorImpl (an op returning its input):
    // give it a fresh impl so the input's history is not overwritten.
    if (out.impl()->autograd_meta() != nullptr) out = out.detach();
    node->output_meta.push_back({out.shape(), out.dtype(), out.device()});
    AutogradMeta& meta = out.impl()->mutable_autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

}  // namespace internal
}  // namespace octet::autograd

// ---- Tensor's autograd methods ---------------------------------------------------

namespace octet {

using autograd::AutogradMeta;

// TensorImpl's autograd half (core/tensor.h declares it; core does not know
// AutogradMeta's layout).
void autograd::AutogradMetaDeleter::operator()(AutogradMeta* meta) const { delete meta; }

AutogradMeta& TensorImpl::mutable_autograd_meta() {
  if (!autograd_) autograd_.reset(new AutogradMeta());
  return *autograd_;
}

bool Tensor::requires_grad() const {
  const AutogradMeta* m = Checked().autograd_meta();
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool enabled) {
  AutogradMeta* m = impl_ ? impl_->autograd_meta() : nullptr;
  OCTET_CHECK(m == nullptr || m->grad_fn == nullptr,
              "requires_grad_: only leaf tensors can change requires_grad (this one was produced by ",
              m->grad_fn->name(), ")");
  OCTET_CHECK(!enabled || IsUnscaledFloat(dtype()), "requires_grad_: only float32/float64/bfloat16/float16 "
              "tensors can require grad, got ", Describe(*this));
  impl_->mutable_autograd_meta().requires_grad = enabled;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = Checked().autograd_meta();
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    OCTET_CHECK(grad.shape() == shape() && grad.dtype() == dtype(), "set_grad: gradient ", Describe(grad),
                " does not match tensor ", Describe(*this));
  }
  impl_->mutable_autograd_meta().grad = grad;
}

void Tensor::zero_grad() const {
  if (AutogradMeta* m = Checked().autograd_meta()) m->grad = Tensor();
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  const AutogradMeta* m = Checked().autograd_meta();
  return m ? m->grad_fn : kNone;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

Tensor Tensor::detach() const {
  const TensorImpl& t = Checked();
  auto impl = std::make_shared<TensorImpl>(t.storage(), t.shape(), t.strides(), t.offset(), t.dtype());
  impl->set_scale_meta(t.scale_meta());
  return Tensor(std::move(impl));
}

void Tensor::Backward(const Tensor& grad, bool retain_graph) const {
  autograd::Backward({*this}, grad.defined() ? TensorList{grad} : TensorList{}, retain_graph);
}

void Tensor::RegisterHook(std::function<Tensor(const Tensor&)> hook) const {
  OCTET_CHECK(requires_grad(), "RegisterHook: the tensor does not require grad");
  autograd::Edge e = autograd::GradientEdge(*this);
  e.node->output_hooks[e.input_nr].push_back(std::move(hook));
}

void Tensor::RegisterPostAccumulateHook(std::function<void(const Tensor&)> hook) const {
  OCTET_CHECK(requires_grad() && is_leaf(), "RegisterPostAccumulateHook: only leaf tensors that require grad");
  autograd::Edge e = autograd::GradientEdge(*this);
  static_cast<autograd::AccumulateGrad&>(*e.node).post_hooks.push_back(std::move(hook));
}

}  // namespace octet
