#include <octet/nn/gpt.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <octet/autograd/grad_mode.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/shape.h>
#include <octet/ops/softmax.h>

namespace octet::nn {
namespace {

const GPTConfig& Checked(const GPTConfig& c) {
  OCTET_CHECK(c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 && c.block_size > 0 && c.vocab_size > 0,
              "nn::GPT: n_layer, n_head, n_embd, block_size and vocab_size must be positive (got n_layer=",
              c.n_layer, " n_head=", c.n_head, " n_embd=", c.n_embd, " block_size=", c.block_size,
              " vocab_size=", c.vocab_size, ")");
  OCTET_CHECK(c.n_embd % c.n_head == 0, "nn::GPT: n_head (", c.n_head, ") must divide n_embd (", c.n_embd, ")");
  OCTET_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "nn::GPT: dropout must be in [0, 1), got ", c.dropout);
  return c;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

GPT::GPT(const GPTConfig& c)
    : config_(Checked(c)),
      gen_(c.seed),
      wte_(RegisterModule<Embedding>("wte", {.num = c.vocab_size, .dim = c.n_embd, .init_std = 0.02, .gen = &gen_})),
      wpe_(RegisterModule<Embedding>("wpe", {.num = c.block_size, .dim = c.n_embd, .init_std = 0.02, .gen = &gen_})),
      drop_(RegisterModule<Dropout>("drop", {.p = c.dropout, .gen = &gen_})),
      h_(RegisterModule<ModuleList>("h")),
      ln_f_(RegisterModule<LayerNorm>("ln_f", {.dim = c.n_embd, .bias = c.bias})) {
  for (int64_t l = 0; l < c.n_layer; ++l)
    h_.Append<TransformerBlock>(
        {.n_embd = c.n_embd, .n_head = c.n_head, .bias = c.bias, .dropout = c.dropout, .gen = &gen_});
  if (!c.tie_weights) {
    lm_head_ = &RegisterModule<Linear>("lm_head", {.in = c.n_embd, .out = c.vocab_size, .bias = false, .gen = &gen_});
    lm_head_->SetFp8OptOut(true);  // BF16 at O1 unless the recipe asks for FP8 (OnAmpChanged)
  }
  InitWeights();
}

GPT::~GPT() {
  if (lm_head_fp8_) lm_head_fp8_->Orphan();
}

void GPT::InitWeights() {
  NoGradGuard no_grad;
  gen_.SetState(config_.seed, 0);
  const double std = 0.02;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (auto& [name, m] : NamedModules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      const bool residual_proj = EndsWith(name, "attn.proj") || EndsWith(name, "mlp.proj");
      NormalFill_(lin->weight(), 0.0, residual_proj ? proj_std : std, &gen_);
      if (lin->bias()) lin->bias()->Fill_(0.0);
    } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
      NormalFill_(emb->weight(), 0.0, std, &gen_);
    } else if (auto* ln = dynamic_cast<LayerNorm*>(m)) {
      if (ln->weight()) ln->weight()->Fill_(1.0);
      if (ln->bias()) ln->bias()->Fill_(0.0);
    }
  }
}

std::vector<amp::Fp8LinearState*> GPT::Fp8States() {
  if (lm_head_fp8_) return {lm_head_fp8_.get()};
  return {};
}

void GPT::OnAmpChanged() {
  const bool fp8_head = amp_recipe().fp8_lm_head && !fp8_opt_out();
  if (lm_head_) lm_head_->SetFp8OptOut(!fp8_head);
  if (config_.tie_weights && fp8_head && amp_level() == amp::Level::kO1) {
    if (lm_head_fp8_)
      lm_head_fp8_->SetRecipe(amp_recipe());
    else
      lm_head_fp8_ = std::make_shared<amp::Fp8LinearState>(*this, "lm_head_", "lm_head", amp_recipe());
  }
}

Tensor GPT::Forward(const Tensor& idx) {
  OCTET_CHECK(idx.dim() == 2, "GPT::Forward: idx must be (B,T), got ", Describe(idx));
  const int64_t T = idx.size(1);
  OCTET_CHECK(T >= 1 && T <= config_.block_size, "GPT::Forward: sequence length ", T,
              " must be in [1, block_size=", config_.block_size, "]");
  // Position ids are made once per device (NOTE [captured steps]: a step made
  // of device work only can be captured in a graph).
  if (!pos_ids_.defined() || pos_ids_.device() != idx.device())
    pos_ids_ = Arange(config_.block_size, {.dtype = DType::kInt64, .device = idx.device()});
  const Tensor pos = pos_ids_.Narrow(0, 0, T);
  Tensor x = drop_(Add(wte_(idx), wpe_(pos)));  // (B,T,C) + (T,C)
  for (size_t l = 0; l < h_.size(); ++l) x = h_.at<TransformerBlock>(l)(x);
  x = ln_f_(x);
  if (lm_head_) return (*lm_head_)(x);
  amp::Level level = amp_level();
  const amp::Recipe& recipe = amp_recipe();
  if (level == amp::Level::kO1 && !recipe.fp8_lm_head) level = amp::Level::kO2;
  const bool record = is_training() && autograd::GradMode::IsEnabled();
  return AmpLinear(x, wte_.weight(), nullptr, level, recipe, &lm_head_fp8_, *this, "lm_head_", "lm_head", record);
}

Tensor GPT::Loss(const Tensor& idx, const Tensor& targets) {
  OCTET_CHECK(targets.shape() == idx.shape(), "GPT::Loss: targets ", Describe(targets), " must have the shape of idx ",
              Describe(idx));
  const Tensor logits = Forward(idx);  // (B,T,V)
  const int64_t n = idx.numel();
  return CrossEntropy(logits.Reshape({n, config_.vocab_size}), targets.Reshape({n}), /*ignore_index=*/-1);
}

Tensor GPT::Generate(const Tensor& idx, int64_t max_new_tokens, double temperature, int64_t top_k, Generator* gen) {
  OCTET_CHECK(idx.dim() == 2 && idx.size(1) >= 1, "GPT::Generate: idx must be (B,T) with T >= 1, got ",
              Describe(idx));
  OCTET_CHECK(temperature > 0.0, "GPT::Generate: temperature must be > 0, got ", temperature);
  OCTET_CHECK(max_new_tokens >= 0, "GPT::Generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  const int64_t B = idx.size(0), T0 = idx.size(1), V = config_.vocab_size;
  // No rows: the documented (B, T0 + max_new_tokens) shape, without running the model.
  if (B == 0) return Empty({0, T0 + max_new_tokens}, {.dtype = DType::kInt64, .device = idx.device()});
  NoGradGuard no_grad;
  const bool was_training = is_training();
  Eval();
  std::vector<std::vector<int64_t>> seqs(B);
  {
    const std::vector<double> v = idx.To(kCPU).ToDoubles();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T0; ++t) seqs[b].push_back(static_cast<int64_t>(v[b * T0 + t]));
  }
  const int64_t k = (top_k <= 0 || top_k > V) ? V : top_k;
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const int64_t T = std::min<int64_t>(T0 + step, config_.block_size);
    // NOTE [generation shapes]: the context is right-padded (with token 0) to
    // a multiple of 32 (at most block_size). Attention is causal, so the
    // logits at position T-1 do not see the padding; the padding keeps the
    // number of distinct shapes small: one per bucket instead of one per
    // length (each new shape gets its own cached GEMM primitives and buffers:
    // measured +42 MB RSS over 200 sampled tokens without buckets, +5 MB with).
    const int64_t T_pad = std::min<int64_t>(config_.block_size, (T + 31) / 32 * 32);
    std::vector<int64_t> ctx(B * T_pad, 0);
    for (int64_t b = 0; b < B; ++b) std::copy(seqs[b].end() - T, seqs[b].end(), ctx.begin() + b * T_pad);
    const Tensor logits = Forward(FromVector(ctx, {B, T_pad}).To(idx.device()));  // (B,T_pad,V)
    const std::vector<double> last = logits.Select(1, T - 1).ToDoubles();    // (B,V)
    const std::vector<double> u = Rand({B}, 0.0, 1.0, {.dtype = DType::kFloat64}, gen).ToDoubles();
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> l(last.begin() + b * V, last.begin() + (b + 1) * V);
      // A NaN/inf logit would make the softmax below NaN and the pick token V-1.
      const auto bad = std::find_if(l.begin(), l.end(), [](double x) { return !std::isfinite(x); });
      if (bad != l.end()) {
        Train(was_training);
        OCTET_FAIL("GPT::Generate: the logits of batch row ", b, " at step ", step, " (new token ", step + 1, " of ",
                   max_new_tokens, ") are not finite: logit ", *bad, " for token ", bad - l.begin(),
                   "; the model or its inputs produce NaN/inf");
      }
      for (double& x : l) x /= temperature;
      if (k < V) {
        std::vector<double> sorted = l;
        std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<double>());
        const double kth = sorted[k - 1];
        for (double& x : l)
          if (x < kth) x = -INFINITY;
      }
      const double mx = *std::max_element(l.begin(), l.end());
      double total = 0.0;
      for (double& x : l) total += (x = std::exp(x - mx));
      double acc = 0.0, target = u[b] * total;
      int64_t pick = V - 1;
      for (int64_t v = 0; v < V; ++v) {
        acc += l[v];
        if (target < acc && l[v] > 0.0) {
          pick = v;
          break;
        }
      }
      while (pick > 0 && l[pick] == 0.0) --pick;  // never pick a masked token at the rounding edge
      seqs[b].push_back(pick);
    }
  }
  Train(was_training);
  std::vector<int64_t> flat;
  for (const auto& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
  return FromVector(flat, {B, T0 + max_new_tokens}).To(idx.device());
}

int64_t GPT::TrainingFlopsPerToken(int64_t seq_len) const {
  // Matmul weights: per block 12·C² (qkv 3C², proj C², fc 4C², proj 4C²) plus
  // the lm_head V·C. Attention scores and values add 2·T·C per layer forward
  // for causal attention on average (half of 4·T·C). Training = 3x forward.
  const int64_t C = config_.n_embd, L = config_.n_layer, V = config_.vocab_size;
  const int64_t matmul_params = L * 12 * C * C + V * C;
  return 6 * matmul_params + 6 * L * seq_len * C;
}

}  // namespace octet::nn
