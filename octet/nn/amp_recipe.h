// Mixed-precision levels and the FP8 scaling recipe (plain data; no module
// dependency so nn/module.h can carry them). The machinery lives in nn/amp.h.
//
// Levels (DESIGN.md §5; naming follows ColossalAI, the README gives the
// mapping to MS-AMP):
//   kO0  FP32 everything.
//   kO1  FP8 compute: every Linear GEMM (fprop, dgrad, wgrad) in FP8 with FP32
//        accumulation, HYBRID formats (E4M3 activations and weights, E5M2
//        output gradients), the attention on FP8 q, k, v (computed in BF16);
//        other ops in BF16; FP32 master weights.
//   kO2  BF16 compute: GEMMs and activations in BF16, FP32 master weights,
//        FP32 statistics in norms, softmax and the loss.
#pragma once

#include <cstdint>
#include <string>

#include <octet/core/dtype.h>
#include <octet/core/scaling_math.h>

namespace octet::nn::amp {

enum class Level : uint8_t { kO0 = 0, kO1 = 1, kO2 = 2 };

// "O0", "O1", "O2".
const char* Name(Level level);
// Accepts "O0"/"O1"/"O2" (also lower case "o1"); false for anything else.
bool ParseLevel(const std::string& text, Level* out);

// How the scale of an FP8 slot is chosen.
enum class Scaling : uint8_t {
  // From the max (or most recent) of an amax history of the previous
  // quantizations of this slot: no extra pass over the data.
  kDelayed = 0,
  // From this tensor's own amax (one extra pass to find it first).
  kCurrent = 1,
};
const char* Name(Scaling scaling);
bool ParseScaling(const std::string& text, Scaling* out);  // "delayed" | "current"

struct Recipe {
  Scaling scaling = Scaling::kDelayed;
  // Delayed scaling: amax history length (>= 1) and how it is reduced.
  int amax_history_len = 16;
  AmaxAlgo amax_algo = AmaxAlgo::kMax;
  // scale = (fp8_max / amax) / 2^margin.
  int margin = 0;
  // Round scales down to a power of two (the scaling then changes no mantissa bits).
  bool power_of_two_scales = false;
  // HYBRID: forward tensors (activations, weights) and output gradients.
  DType forward_dtype = DType::kFloat8E4M3;
  DType backward_dtype = DType::kFloat8E5M2;
  // GPT's lm_head (tied to wte) stays BF16 in O1 unless this is set.
  bool fp8_lm_head = false;
  // O1 attention (nn::CausalSelfAttention) on an FP8 (forward_dtype) copy of
  // its q, k, v, the only copy kept for backward (NOTE [fp8 attention
  // inputs] in ops/attention.cc). Its scale is always current (this
  // tensor's amax; no slot, no history, nothing checkpointed). Off: the
  // attention reads and keeps the BF16 projection output.
  bool fp8_attention_inputs = true;
};

// The state of an amp::Autocast scope (nn/amp.h).
struct AutocastState {
  Level level = Level::kO0;
  Recipe recipe;
};
// The innermost active Autocast scope on this thread, or nullptr.
const AutocastState* ActiveAutocast();
namespace internal {
// Used by amp::Autocast (nn/amp.h): scopes nest; Pop restores the previous one.
void PushAutocast(const AutocastState* state);
void PopAutocast(const AutocastState* previous);
}  // namespace internal

// The dtype activations flow in at a level: float32 for O0, bfloat16 otherwise.
inline DType ComputeDType(Level level) { return level == Level::kO0 ? DType::kFloat32 : DType::kBFloat16; }

}  // namespace octet::nn::amp
