// Kernel signatures of the norm family (internal: shared by ops/norm.cc and
// the backends).
//
// Letters: N rows (every dim but the last, flattened), C the normalised dim.
// Every tensor argument is contiguous. weight/bias are undefined when the op
// has no scale/shift. Statistics (mean, rstd) have dtype float32, or float64
// when x is float64. Gradient outputs are undefined when not wanted; kernels
// write every element of the ones that are defined (no zero-init needed).
#pragma once

#include <octet/core/float8.h>
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

// LayerNorm with an FP8 output (NOTE [layer norm to fp8] in ops/norm.cc):
// yf = (x - mean) * rstd * weight + bias computed as layer_norm_fwd computes
// it (in AccType of x; f64 rounded to f32 at the end), q = fp8(yf * scale[0])
// (one float32 multiply, core/float8.h rounding with `sat`),
// amax[0] = max |yf| over every element (NaN if any is NaN),
// scale_inv[0] = 1 / scale[0]. scale, scale_inv, amax: float32 [1] on x's
// device (no host read of the scale).
using LayerNormFp8FwdFn = void(const Tensor& x,       // (N,C)
                               const Tensor& weight,  // (C) or undefined
                               const Tensor& bias,    // (C) or undefined
                               double eps,
                               const Tensor& scale,  // [1] f32
                               Fp8Saturation sat,
                               const Tensor& q,          // (N,C) out, FP8
                               const Tensor& scale_inv,  // [1] f32 out
                               const Tensor& amax,       // [1] f32 out
                               const Tensor& mean,       // (N) out
                               const Tensor& rstd);      // (N) out

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
OCTET_DECLARE_KERNEL(layer_norm_fp8_fwd, LayerNormFp8FwdFn);
OCTET_DECLARE_KERNEL(rms_norm_fwd, RmsNormFwdFn);
OCTET_DECLARE_KERNEL(rms_norm_bwd, RmsNormBwdFn);

}  // namespace octet
