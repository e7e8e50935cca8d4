// Kernel signatures of the norm family (internal: shared by ops/norm.cc and
// the backends).
//
// Letters: N rows (every dim but the last, flattened), C the normalised dim.
// Every tensor argument is contiguous. weight/bias are undefined when the op
// has no scale/shift. Statistics (mean, rstd) have dtype float32, or float64
// when x is float64. Gradient outputs are undefined when not wanted; kernels
// write every element of the ones that are defined (no zero-init needed).
#pragma once

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// With `residual` defined this is the fused AddLayerNorm: h = x + residual is
// rounded to x's dtype, written to `sum` and normalised (x and residual are
// not otherwise used).
using LayerNormFwdFn = void(const Tensor& x,         // (N,C)
                            const Tensor& residual,  // (N,C) or undefined
                            const Tensor& weight,    // (C) or undefined
                            const Tensor& bias,      // (C) or undefined
                            double eps,
                            const Tensor& sum,    // (N,C) out if residual is defined, else undefined
                            const Tensor& y,      // (N,C) out, x's dtype
                            const Tensor& mean,   // (N) out
                            const Tensor& rstd);  // (N) out, 1/sqrt(var + eps)

// dsum (AddLayerNorm's gradient w.r.t. its sum output), when defined, is
// added to dx.
using LayerNormBwdFn = void(const Tensor& dy,      // (N,C)
                            const Tensor& x,       // (N,C)
                            const Tensor& weight,  // (C) or undefined
                            const Tensor& mean,    // (N)
                            const Tensor& rstd,    // (N)
                            const Tensor& dsum,    // (N,C) or undefined
                            const Tensor& dx,       // (N,C) out or undefined
                            const Tensor& dweight,  // (C) out or undefined
                            const Tensor& dbias);   // (C) out or undefined

using RmsNormFwdFn = void(const Tensor& x,       // (N,C)
                          const Tensor& weight,  // (C) or undefined
                          double eps,
                          const Tensor& y,      // (N,C) out
                          const Tensor& rstd);  // (N) out, 1/sqrt(mean(x^2) + eps)

using RmsNormBwdFn = void(const Tensor& dy,      // (N,C)
                          const Tensor& x,       // (N,C)
                          const Tensor& weight,  // (C) or undefined
                          const Tensor& rstd,    // (N)
                          const Tensor& dx,        // (N,C) out or undefined
                          const Tensor& dweight);  // (C) out or undefined

OCTET_DECLARE_KERNEL(layer_norm_fwd, LayerNormFwdFn);
OCTET_DECLARE_KERNEL(layer_norm_bwd, LayerNormBwdFn);
OCTET_DECLARE_KERNEL(rms_norm_fwd, RmsNormFwdFn);
OCTET_DECLARE_KERNEL(rms_norm_bwd, RmsNormBwdFn);

}  // namespace octet
