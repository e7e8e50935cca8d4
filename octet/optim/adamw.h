// AdamW (decoupled weight decay) with FP32 master weights and low-precision
// optimizer state.
//
//   optim::AdamW opt(model.NamedParameters(),
//                    {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
//
// The update is NOTE [adamw update] in ops/optim_kernels.h, with
// t = step_count() + 1 in the bias corrections 1 - beta^t (one global step
// counter, as in llm.c: a parameter without a gradient in some step is
// skipped but the counter still advances).
//
// Weight decay: by default only parameters with dim() >= 2 are decayed
// (matrices and embeddings; biases and norm gains are not), the GPT-2
// convention of nanoGPT/llm.c. `decay_filter` replaces that rule; names listed
// in `no_decay` are never decayed.
//
// Master weights: for bf16/f16 parameters (and master_weights = true) the
// optimizer keeps an f32 copy, initialised from the parameter at
// construction; each step updates the master and writes its rounding (nearest
// even) back into the parameter. Parameters changed behind the optimizer's
// back are overwritten by the next step; call SyncMasterFromParams() after
// loading new weights into the model without loading the optimizer state.
//
// NOTE [adamw state dtype]: state_dtype selects how m and v are stored:
//   kFloat32  f32 m and v (f64 for f64 parameters);
//   kBFloat16 bf16 m and v (half the memory; v loses precision first);
//   kFp8Fp16  MS-AMP style: m in fp8_e4m3 with a per-tensor scale (the m
//             tensor carries ScaleMeta: real value = code * scale_inv), v in
//             float16 with its own per-tensor scale (v ≥ 0, so the scale uses
//             f16's whole range and small squared gradients do not flush to
//             zero). Scales are recomputed every step from the current amax.
//             3 bytes of state per parameter instead of 8. Rounding is to
//             nearest even, so a moment that should shrink by less than
//             half an e4m3 step (~3%) in an update sticks at its old value;
//             on a smooth deterministic problem the momentum then lags
//             (tests/optim/adamw_test.cc measures the deviation on a
//             quadratic); noisy gradients mostly hide it.
// State dict names ("adamw.<slot>.<param>"): m, v, master (bf16/f16
// parameters), and for kFp8Fp16 "adamw.v.<param>.scale_inv" (f32 [1]); m's
// scale travels as its ScaleMeta (safetensors companions m.scale_inv/m.amax).
// Scalars: type, step, lr, state_dtype.
//
// Graph capture (core/graph.h): Step() inside Graph::Capture makes the
// update read lr and its bias corrections from a float64 [3] device tensor
// that each Replay fills from lr() and step_count() + 1 first, and counts the
// step after each replay (NOTE [captured optimizer step] in adamw.cc): set
// the learning rate with set_lr between replays as in eager training.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <octet/core/error.h>
#include <octet/core/scaling.h>
#include <octet/optim/optimizer.h>

namespace octet {
struct AdamWHyper;  // ops/optim_kernels.h (private)
}

namespace octet::optim {

enum class StateDType : uint8_t { kFloat32, kBFloat16, kFp8Fp16 };
const char* Name(StateDType s);

class AdamW : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;
    StateDType state_dtype = StateDType::kFloat32;
    // Keep f32 master weights for bf16/f16 parameters.
    bool master_weights = true;
    // Whether a parameter is decayed; null means dim() >= 2.
    std::function<bool(const std::string& name, const Tensor& param)> decay_filter;
    // Never decayed (exact names), applied after decay_filter.
    std::vector<std::string> no_decay;
    // Headroom of the scaled state (kFp8Fp16): scale = max / amax / 2^margin.
    int m_margin = 0;
    int v_margin = 0;
  };

  // Throws octet::Error for bad parameters (see Optimizer) or options
  // (betas outside [0, 1), eps < 0, lr < 0, names in no_decay that are not
  // parameters).
  AdamW(NamedTensors params, Options options);

  void Step() override;

  const Options& options() const { return options_; }
  // Copies every bf16/f16 parameter into its f32 master.
  void SyncMasterFromParams();

  // Per-parameter state, for inspection (tests, telemetry). index follows params().
  // Error: index >= params().size().
  struct ParamState {
    Tensor master;  // f32, or undefined
    Tensor m, v;
    std::shared_ptr<ScaleMeta> m_meta, v_meta;  // kFp8Fp16 only
    double weight_decay = 0.0;                  // 0 when the parameter is not decayed
  };
  const ParamState& state(size_t index) const {
    OCTET_CHECK(index < states_.size(), "AdamW::state: index ", index, " is out of range for ", states_.size(),
                " parameters");
    return states_[index];
  }
  // Index of a parameter by name; throws if there is none.
  size_t IndexOf(const std::string& name) const;

 protected:
  void SaveScalars(std::map<std::string, std::string>* scalars) const override;
  void CheckScalars(const std::map<std::string, std::string>& scalars) const override;
  void AfterLoad() override;

 private:
  // The update's hyper-parameters for the next step (t = step_count() + 1).
  AdamWHyper Hyper() const;
  void WriteDeviceScalars();

  Options options_;
  std::vector<ParamState> states_;
  Tensor scalars_;  // float64 [3]: lr, bias corrections of a captured step
};

}  // namespace octet::optim
