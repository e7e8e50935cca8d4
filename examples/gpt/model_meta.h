// The GPT configuration and amp settings as checkpoint metadata (string
// map), shared by train_gpt (writes, and checks on --resume) and sample_gpt
// (rebuilds the model from a checkpoint); and the sampling options both
// programs take.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <octet/nn/gpt.h>

namespace octet::gpt {

inline void ConfigToMetadata(const nn::GPTConfig& c, std::map<std::string, std::string>* m) {
  (*m)["gpt.n_layer"] = absl::StrCat(c.n_layer);
  (*m)["gpt.n_head"] = absl::StrCat(c.n_head);
  (*m)["gpt.n_embd"] = absl::StrCat(c.n_embd);
  (*m)["gpt.block_size"] = absl::StrCat(c.block_size);
  (*m)["gpt.vocab_size"] = absl::StrCat(c.vocab_size);
  // StrCat, not a literal assignment: GCC 12's -Wrestrict misreads that one.
  (*m)["gpt.tie_weights"] = absl::StrCat(c.tie_weights ? 1 : 0);
  (*m)["gpt.bias"] = absl::StrCat(c.bias ? 1 : 0);
}

inline absl::StatusOr<nn::GPTConfig> ConfigFromMetadata(const std::map<std::string, std::string>& m) {
  nn::GPTConfig c;
  auto get = [&](const char* key, int64_t* out) -> absl::Status {
    auto it = m.find(key);
    if (it == m.end() || !absl::SimpleAtoi(it->second, out))
      return absl::InvalidArgumentError(absl::StrCat("checkpoint metadata has no integer '", key, "'"));
    return absl::OkStatus();
  };
  int64_t tie = 1, bias = 1;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"gpt.n_layer", &c.n_layer}, {"gpt.n_head", &c.n_head},
                          {"gpt.n_embd", &c.n_embd}, {"gpt.block_size", &c.block_size},
                          {"gpt.vocab_size", &c.vocab_size}, {"gpt.tie_weights", &tie}, {"gpt.bias", &bias}}) {
    if (absl::Status s = get(key, out); !s.ok()) return s;
  }
  c.tie_weights = tie != 0;
  c.bias = bias != 0;
  return c;
}

// --temperature and --top_k, as both programs name them: an error naming the
// flag and the value, or OK.
inline absl::Status CheckSamplingFlags(double temperature, int64_t top_k) {
  if (!(temperature > 0.0))
    return absl::InvalidArgumentError(absl::StrCat("--temperature must be > 0, got ", temperature));
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("--top_k must be >= 0 (0: all), got ", top_k));
  return absl::OkStatus();
}

}  // namespace octet::gpt
