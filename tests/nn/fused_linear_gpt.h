// A small GPT trained a few steps with AdamW and delayed scaling, for the
// tests of the casts fused into FP8 Linears (layer_norm_linear_test,
// gelu_linear_test): the losses of every step and how often the fusion under
// test ran, so a test can compare fused and unfused runs.
#pragma once

#include <cstdint>
#include <vector>

#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/nn/linear.h>
#include <octet/optim/adamw.h>

namespace octet::nn::testing {

struct TrainLog {
  std::vector<double> losses;
  int64_t fusions = 0;
};

// Deterministic (4, 16) token ids over a vocabulary of 29.
inline Tensor Tokens(int step, int offset) {
  std::vector<int64_t> ids(4 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + i / 5 + step * 3 + offset) % 29);
  return FromVector(ids, {4, 16});
}

// `steps` training steps of a 2-layer GPT (width 32) at `level`; fusions sums
// fusion_count over every Linear of the model at the end.
template <typename FusionCount>
TrainLog TrainSmallGpt(amp::Level level, int steps, FusionCount fusion_count) {
  GPT model({.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 29, .seed = 7});
  model.SetAmp(level);
  amp::Fp8State fp8(model);
  optim::AdamW opt(model.NamedParameters(), {.lr = 3e-3});
  model.Train();
  TrainLog run;
  for (int s = 0; s < steps; ++s) {
    model.ZeroGrad();
    Tensor loss = model.Loss(Tokens(s, 0), Tokens(s, 1));
    run.losses.push_back(loss.Item());
    loss.Backward();
    opt.Step();
    fp8.Update();
  }
  for (auto& [name, m] : model.NamedModules())
    if (auto* lin = dynamic_cast<Linear*>(m)) run.fusions += fusion_count(*lin);
  return run;
}

}  // namespace octet::nn::testing
