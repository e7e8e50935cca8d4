// Gradcheck: compares analytic gradients with central finite differences in
// float64.
//
// fn maps the inputs to one output. A fixed random weighting w of the output
// turns it into the scalar L = sum(w * fn(inputs)); for every element of every
// input that requires grad, dL/dx from backward is compared with
// (L(x+eps) - L(x-eps)) / 2eps. Inputs must be float64.
#pragma once

#include <functional>
#include <string>

#include <octet/core/tensor.h>

namespace octet {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 1234;  // for the output weighting
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // what differed, where
  explicit operator bool() const { return ok; }
};

GradcheckResult Gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& options = {});

}  // namespace octet
