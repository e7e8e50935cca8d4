// GPT (GPT-2 architecture; FORMATS.md §3):
//   x = wte[idx] + wpe[pos]                      (B,T,C)
//   x = TransformerBlock_l(x), l = 0..n_layer-1  (pre-LN)
//   logits = ln_f(x) · lm_headᵀ                  (B,T,V), no bias
// With tie_weights the lm_head is wte itself (gradients from both uses add
// into one tensor) and there is no lm_head parameter.
//
// Parameter names: wte.weight, wpe.weight, h.<l>.ln_1.{weight,bias},
// h.<l>.attn.qkv.{weight,bias}, h.<l>.attn.proj.{weight,bias},
// h.<l>.ln_2.{weight,bias}, h.<l>.mlp.fc.{weight,bias},
// h.<l>.mlp.proj.{weight,bias}, ln_f.{weight,bias}, [lm_head.weight].
//
// Initialisation (GPT-2 / nanoGPT): Linear and Embedding weights ~ N(0, 0.02),
// biases 0, LayerNorm weight 1 and bias 0, and attn.proj / mlp.proj weights
// ~ N(0, 0.02/sqrt(2·n_layer)); drawn from a Generator seeded with
// config.seed in NamedParameters() order, so a config gives the same weights
// on every machine and thread count.
//
// amp: the embeddings are gathered in float32 and converted to the compute
// dtype; the blocks follow the level; the lm_head runs in BF16 at O1 unless
// the recipe sets fp8_lm_head (then it is an FP8 GEMM with its own scaling
// state, labelled "lm_head" in telemetry); the loss is computed with float32
// statistics from the (bf16 at O1/O2) logits and returned in float32.
#pragma once

#include <cstdint>
#include <memory>

#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/embedding.h>
#include <octet/nn/layer_norm.h>
#include <octet/nn/linear.h>
#include <octet/nn/module.h>
#include <octet/nn/transformer.h>

namespace octet::nn {

struct GPTConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;  // max sequence length
  int64_t vocab_size = 256;
  bool tie_weights = true;
  double dropout = 0.0;
  bool bias = true;
  uint64_t seed = 42;  // initialisation
};

class GPT : public Module {
 public:
  using Options = GPTConfig;
  // Errors: non-positive sizes, n_head not dividing n_embd, dropout outside [0,1).
  explicit GPT(const GPTConfig& config);
  ~GPT() override;

  // idx: (B,T) int64/int32 token ids in [0, vocab_size), T <= block_size.
  // Returns logits (B,T,V) in the compute dtype (float32 at O0, bf16 at O1/O2).
  Tensor Forward(const Tensor& idx);
  Tensor operator()(const Tensor& idx) { return Forward(idx); }
  // Mean cross-entropy of Forward(idx) against targets (B,T) (ignore_index -1),
  // a float32 scalar (float64 if the model was converted to float64).
  Tensor Loss(const Tensor& idx, const Tensor& targets);

  // Appends max_new_tokens sampled tokens to idx (B,T0) and returns
  // (B,T0+max_new_tokens) int64. Each step feeds the last block_size tokens,
  // divides the last logits by temperature (> 0), keeps the top_k largest
  // (top_k <= 0 or >= V: all) and samples from the softmax with `gen` (null:
  // the default generator). Runs without grad and in eval mode (restored
  // afterwards). B = 0 gives the empty (0,T0+max_new_tokens) result without
  // running the model. Errors: idx not (B,T0) with T0 >= 1, temperature not
  // > 0, max_new_tokens < 0, and non-finite logits (naming the step and the
  // batch row: NaN/inf cannot be sampled from).
  Tensor Generate(const Tensor& idx, int64_t max_new_tokens, double temperature = 1.0, int64_t top_k = 0,
                  Generator* gen = nullptr);

  const GPTConfig& config() const { return config_; }
  Embedding& wte() { return wte_; }
  Embedding& wpe() { return wpe_; }
  // The generator used for initialisation and then for dropout (save its
  // state with the training state when dropout > 0).
  Generator& generator() { return gen_; }
  // Block i of n_layer; error: i outside [0, n_layer).
  TransformerBlock& block(int64_t i) {
    OCTET_CHECK(i >= 0 && i < static_cast<int64_t>(h_.size()), "GPT::block: index ", i, " is out of range for ",
                h_.size(), " blocks (n_layer)");
    return h_.at<TransformerBlock>(static_cast<size_t>(i));
  }
  std::vector<amp::Fp8LinearState*> Fp8States() override;

  // Forward FLOPs per token of the matmuls (6x for forward+backward, as in
  // the PaLM/llm.c MFU estimate: 6·N + 6·L·T·C per token for training).
  int64_t TrainingFlopsPerToken(int64_t seq_len) const;

 protected:
  void OnAmpChanged() override;

 private:
  void InitWeights();
  GPTConfig config_;
  Generator gen_;  // initialisation, then dropout
  Embedding& wte_;
  Embedding& wpe_;
  Dropout& drop_;
  ModuleList& h_;
  LayerNorm& ln_f_;
  Linear* lm_head_ = nullptr;  // untied only
  std::shared_ptr<amp::Fp8LinearState> lm_head_fp8_;  // tied head at O1 with fp8_lm_head
  Tensor pos_ids_;  // 0..block_size-1 on the device of the last Forward
};

}  // namespace octet::nn
