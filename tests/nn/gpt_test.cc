// GPT: structure and names, GPT-2 initialisation, weight tying, loss at
// initialisation, gradcheck through a 2-layer model in float64, generation.
#include <octet/nn/gpt.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <octet/autograd/gradcheck.h>
#include <octet/nn/amp.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;
using ::testing::HasSubstr;

GPTConfig Tiny() {
  return {.n_layer = 2, .n_head = 2, .n_embd = 8, .block_size = 6, .vocab_size = 11, .seed = 5};
}

Tensor Tokens(const std::vector<int64_t>& v, int64_t B, int64_t T) { return FromVector(v, {B, T}); }

double Rms(const Tensor& t) {
  double s = 0;
  const std::vector<double> v = t.ToDoubles();
  for (double x : v) s += x * x;
  return std::sqrt(s / v.size());
}

TEST(GPT, ParameterNamesAndCount) {
  GPT tied(Tiny());
  std::vector<std::string> names;
  for (auto& [n, p] : tied.NamedParameters()) names.push_back(n);
  EXPECT_EQ(names.front(), "wte.weight");
  EXPECT_THAT(names, ::testing::Contains("h.1.attn.qkv.weight"));
  EXPECT_THAT(names, ::testing::Contains("h.0.mlp.proj.bias"));
  EXPECT_EQ(names.back(), "ln_f.bias");
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("lm_head.weight")));
  const int64_t C = 8, L = 2, V = 11, Tmax = 6;
  const int64_t per_block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
  EXPECT_EQ(tied.NumParameters(), V * C + Tmax * C + L * per_block + 2 * C);
  GPTConfig c = Tiny();
  c.tie_weights = false;
  GPT untied(c);
  EXPECT_EQ(untied.NumParameters(), tied.NumParameters() + V * C);
  EXPECT_EQ(untied.NamedParameters().back().first, "lm_head.weight");
}

TEST(GPT, Gpt2Initialisation) {
  GPT model({.n_layer = 4, .n_head = 4, .n_embd = 64, .block_size = 32, .vocab_size = 256, .seed = 1});
  for (auto& [n, p] : model.NamedParameters()) {
    if (n.ends_with(".bias")) {
      EXPECT_EQ(Rms(p), 0.0) << n;
    } else if (n.starts_with("ln") || n.find(".ln_") != std::string::npos) {
      for (double v : p.ToDoubles()) ASSERT_EQ(v, 1.0) << n;
    } else if (n.ends_with("attn.proj.weight") || n.ends_with("mlp.proj.weight")) {
      EXPECT_NEAR(Rms(p), 0.02 / std::sqrt(8.0), 0.0006) << n;
    } else {
      EXPECT_NEAR(Rms(p), 0.02, 0.0015) << n;
    }
  }
  // Deterministic from the seed.
  GPT again({.n_layer = 4, .n_head = 4, .n_embd = 64, .block_size = 32, .vocab_size = 256, .seed = 1});
  EXPECT_EQ(model.StateDict()[5].second.ToDoubles(), again.StateDict()[5].second.ToDoubles());
}

TEST(GPT, LossAtInitialisationIsNearLogV) {
  GPT model({.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 64, .seed = 3});
  std::vector<int64_t> idx(4 * 16), tgt(4 * 16);
  for (size_t i = 0; i < idx.size(); ++i) {
    idx[i] = (i * 7) % 64;
    tgt[i] = (i * 13 + 5) % 64;
  }
  const Tensor loss = model.Loss(Tokens(idx, 4, 16), Tokens(tgt, 4, 16));
  EXPECT_EQ(loss.dtype(), DType::kFloat32);
  EXPECT_NEAR(loss.Item(), std::log(64.0), 0.05);
  const Tensor logits = model(Tokens(idx, 4, 16));
  EXPECT_EQ(logits.shape(), (Shape{4, 16, 64}));
}

TEST(GPT, TiedWteGradientIsTheSumOfEmbeddingAndHeadGradients) {
  GPT tied(Tiny());
  GPTConfig c = Tiny();
  c.tie_weights = false;
  GPT untied(c);
  // Same weights; untied lm_head = wte.
  NamedTensors sd = tied.StateDict();
  sd.emplace_back("lm_head.weight", tied.wte().weight());
  ASSERT_NO_THROW(untied.LoadStateDict(sd));
  tied.To(DType::kFloat64);
  untied.To(DType::kFloat64);
  const Tensor idx = Tokens({1, 2, 3, 4, 5, 6, 7, 8}, 2, 4), tgt = Tokens({2, 3, 4, 5, 6, 7, 8, 9}, 2, 4);
  const Tensor l1 = tied.Loss(idx, tgt), l2 = untied.Loss(idx, tgt);
  EXPECT_NEAR(l1.Item(), l2.Item(), 1e-12);
  l1.Backward();
  l2.Backward();
  Tensor* head = untied.FindParameter("lm_head.weight");
  EXPECT_EQ(head, nullptr);  // it is a child's parameter
  Tensor head_grad;
  for (auto& [n, p] : untied.NamedParameters())
    if (n == "lm_head.weight") head_grad = p.grad();
  const std::vector<double> gt = tied.wte().weight().grad().ToDoubles(), ge = untied.wte().weight().grad().ToDoubles(),
                            gh = head_grad.ToDoubles();
  for (size_t i = 0; i < gt.size(); ++i) EXPECT_NEAR(gt[i], ge[i] + gh[i], 1e-12) << i;
}

TEST(GPT, GradcheckTwoLayerModelInFloat64) {
  GPTConfig c{.n_layer = 2, .n_head = 2, .n_embd = 4, .block_size = 3, .vocab_size = 5, .seed = 9};
  GPT model(c);
  model.To(DType::kFloat64);
  {
    // Larger weights than GPT-2's init so every path carries signal.
    NoGradGuard ng;
    uint64_t seed = 100;
    for (auto& [n, p] : model.NamedParameters()) {
      Tensor d = p.detach();
      d.CopyFrom_(octet::testing::RandomTensor(p.shape(), seed++, DType::kFloat64, -0.6, 0.6));
    }
  }
  const Tensor idx = Tokens({0, 3, 1, 4, 2, 2}, 2, 3), tgt = Tokens({3, 1, 4, 2, 2, 0}, 2, 3);
  TensorList params = model.Parameters();
  const auto r = Gradcheck([&](const TensorList&) { return model(idx); }, params, {.atol = 1e-6, .rtol = 1e-4});
  EXPECT_TRUE(r.ok) << r.message;
  const auto rl = Gradcheck([&](const TensorList&) { return model.Loss(idx, tgt); }, params);
  EXPECT_TRUE(rl.ok) << rl.message;
}

TEST(GPT, AmpLevelsGiveCloseLogits) {
  GPT model({.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 32, .seed = 4});
  std::vector<int64_t> v(2 * 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i * 5 + 1) % 32;
  const Tensor idx = Tokens(v, 2, 16);
  const Tensor l0 = model(idx);
  for (amp::Level level : {amp::Level::kO1, amp::Level::kO2}) {
    model.SetAmp(level);
    EXPECT_EQ(model.block(0).attn().qkv().amp_level(), level);
    const Tensor l = model(idx);
    EXPECT_EQ(l.dtype(), DType::kBFloat16);
    EXPECT_TRUE(AllClose(l.To(DType::kFloat32), l0, 0.05, 0.02)) << amp::Name(level);
  }
  model.SetAmp(amp::Level::kO1);
  EXPECT_EQ(model.Fp8States().size(), 0u);  // the tied head stays BF16 by default
  model.SetAmp(amp::Level::kO1, {.fp8_lm_head = true});
  model(idx);
  ASSERT_EQ(model.Fp8States().size(), 1u);
  EXPECT_EQ(model.Fp8States()[0]->label(), "lm_head");
}

TEST(GPT, GenerateIsDeterministicAndTopOneIsGreedy) {
  GPT model(Tiny());
  const Tensor prompt = Tokens({1, 2}, 1, 2);
  Generator g1(7), g2(7);
  const Tensor a = model.Generate(prompt, 9, 1.0, 0, &g1), b = model.Generate(prompt, 9, 1.0, 0, &g2);
  ASSERT_EQ(a.shape(), (Shape{1, 11}));  // longer than block_size: the context is cropped
  EXPECT_EQ(a.ToDoubles(), b.ToDoubles());
  EXPECT_TRUE(model.is_training());  // restored
  // top_k = 1: argmax of the logits at every step.
  Generator g3(1);
  const Tensor greedy = model.Generate(prompt, 3, 0.7, 1, &g3);
  std::vector<int64_t> seq = {1, 2};
  for (int s = 0; s < 3; ++s) {
    NoGradGuard ng;
    model.Eval();
    const Tensor logits = model(FromVector(seq, {1, static_cast<int64_t>(seq.size())}));
    model.Train();
    seq.push_back(static_cast<int64_t>(ArgMax(logits.Select(1, seq.size() - 1), -1).Item()));
  }
  const std::vector<double> gv = greedy.ToDoubles();
  for (size_t i = 0; i < seq.size(); ++i) EXPECT_EQ(static_cast<int64_t>(gv[i]), seq[i]);
}

TEST(GPT, GenerateWithNoRowsGivesTheEmptyDocumentedShape) {
  GPT model(Tiny());
  const Tensor out = model.Generate(FromVector(std::vector<int64_t>{}, {0, 3}), 4);
  EXPECT_EQ(out.shape(), (Shape{0, 7}));
  EXPECT_EQ(out.dtype(), DType::kInt64);
  EXPECT_TRUE(model.is_training());
}

// NaN logits used to sample token V-1 silently.
TEST(GPT, GenerateOnNonFiniteLogitsNamesTheStepAndTheRow) {
  GPTConfig config = Tiny();
  config.tie_weights = false;  // a NaN wte row then poisons only the rows that contain its token
  GPT model(config);
  {
    NoGradGuard ng;
    Tensor row = model.wte().weight().Select(0, 3);
    row.Fill_(NAN);
  }
  Generator g(3);
  const std::string e = ErrorOf([&] { model.Generate(Tokens({1, 2, 3, 4}, 2, 2), 2, 1.0, 0, &g); });
  EXPECT_THAT(e, HasSubstr("GPT::Generate: the logits of batch row 1 at step 0"));
  EXPECT_THAT(e, HasSubstr("are not finite: logit nan for token 0"));
  EXPECT_TRUE(model.is_training());  // restored on the error too
}

TEST(GPT, BlockIndexOutOfRangeIsAnError) {
  GPT model(Tiny());
  EXPECT_THAT(ErrorOf([&] { model.block(99); }), HasSubstr("GPT::block: index 99 is out of range for 2 blocks"));
  EXPECT_THAT(ErrorOf([&] { model.block(-1); }), HasSubstr("GPT::block: index -1 is out of range"));
  EXPECT_NO_THROW(model.block(1));
}

TEST(GPT, BadInputsAreReported) {
  GPT model(Tiny());
  EXPECT_THAT(ErrorOf([&] { model(Tokens(std::vector<int64_t>(7, 1), 1, 7)); }),
              HasSubstr("sequence length 7 must be in [1, block_size=6]"));
  EXPECT_THAT(ErrorOf([&] { model(Tokens({1, 11}, 1, 2)); }), HasSubstr("11"));
  EXPECT_THAT(ErrorOf([] { GPT({.n_layer = 1, .n_head = 3, .n_embd = 8}); }), HasSubstr("must divide n_embd"));
  EXPECT_THAT(ErrorOf([&] { model.Generate(Tokens({1}, 1, 1), 2, 0.0); }), HasSubstr("temperature must be > 0"));
}

}  // namespace
}  // namespace octet::nn
