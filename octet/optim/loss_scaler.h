// Dynamic loss scaling for float16 training (torch.cuda.amp.GradScaler's
// algorithm):
//
//   scaler.ScaleLoss(loss).Backward();
//   const bool found_inf = scaler.Unscale(opt.params());  // grads /= scale, checks inf/NaN
//   if (!found_inf) opt.Step();                           // a step with inf/NaN is skipped
//   scaler.Update(found_inf);
//
// Update: on found_inf the scale is multiplied by backoff_factor, the growth
// counter resets and the skipped-step counter increments; otherwise, after
// growth_interval consecutive finite steps, the scale is multiplied by
// growth_factor. The scale never goes below min_scale nor above max_scale.
// With the default power-of-two factors the scaling is exact.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <octet/core/tensor.h>
#include <octet/optim/optimizer.h>

namespace octet::optim {

class DynamicLossScaler {
 public:
  struct Options {
    double init_scale = 65536.0;  // 2^16
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
    double min_scale = 1.0;
    double max_scale = 16777216.0;  // 2^24
  };
  // Throws octet::Error on factors that do not grow/shrink (or an infinite
  // growth factor), a non-positive interval or scale, an infinite max_scale,
  // or min_scale > init_scale > max_scale.
  DynamicLossScaler();
  explicit DynamicLossScaler(const Options& options);

  // loss * scale (differentiable).
  Tensor ScaleLoss(const Tensor& loss) const;
  // Multiplies every defined gradient by 1/scale in place and returns whether
  // any gradient holds inf or NaN (after or before unscaling).
  bool Unscale(const NamedTensors& params);
  void Update(bool found_inf);

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }  // finite steps since the last change
  int64_t skipped_steps() const { return skipped_steps_; }

  // Scalars "loss_scaler.scale", "loss_scaler.growth_tracker", "loss_scaler.skipped_steps".
  std::map<std::string, std::string> StateDict() const;
  // Reads the keys above (other keys are ignored); throws octet::Error naming
  // a missing or malformed key and leaves the scaler unchanged.
  void LoadStateDict(const std::map<std::string, std::string>& scalars);

 private:
  Options options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace octet::optim
