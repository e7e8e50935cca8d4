// Kernel signature of the fused AdamW update (internal: shared by
// optim/adamw.cc and the backends). One call updates a list of tensors so a
// CUDA backend can register a multi-tensor-apply kernel; the CPU kernel
// (optim/adamw_cpu.cc) runs one fused OpenMP loop per tensor.
#pragma once

#include <vector>

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet::optim {

// Host-side scalars of one step (same for every tensor of the call).
struct AdamWHyper {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double bias_correction1 = 1.0;  // 1 - beta1^t
  double bias_correction2 = 1.0;  // 1 - beta2^t
  // Scaled state (kFp8Fp16): the new scale maps the new amax to
  // fp8_e4m3 max (m) / float16 max (v), divided by 2^margin.
  int m_margin = 0;
  int v_margin = 0;
};

// One parameter's update. All tensors are contiguous, on one device, with n
// elements (n = param.numel()).
//
// NOTE [adamw update]: with g = grad, p = master if defined else param,
// all in the compute type (f64 for f64 parameters, f32 otherwise):
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
//   p = p - lr * ((m/bc1) / (sqrt(v/bc2) + eps) + weight_decay * p)
// (decoupled weight decay, llm.c's formula; equal to PyTorch's AdamW). When a
// master is given, the new p is written to master and its rounding to param.
// Scaled state stores m*m_scale (fp8_e4m3) and v*v_scale (float16); a step
// dequantizes with the old scale_inv, computes the new m and v in the compute
// type, takes their amax (first pass), derives new scales with ComputeScale
// (the old scale is kept when the amax is 0 or not finite) and requantizes
// (second pass). The parameter update uses the unquantized new m and v.
struct AdamWTensorArgs {
  Tensor param;   // (n) f64/f32/bf16/f16; updated in place
  Tensor grad;    // (n) param's dtype or f32
  Tensor master;  // (n) f32, or undefined
  Tensor m;       // (n) f64/f32/bf16/fp8_e4m3 (fp8: real value = code * m_scale_inv)
  Tensor v;       // (n) f64/f32/bf16/f16 (scaled f16: real value = v * v_scale_inv)
  // Scaled state only (undefined otherwise); f32 [1] each. The kernel reads
  // *_scale_inv and writes all three with the new values.
  Tensor m_scale, m_scale_inv, m_amax;
  Tensor v_scale, v_scale_inv, v_amax;
  double weight_decay = 0.0;
};

using AdamWKernelFn = void(const AdamWHyper& hyper, const std::vector<AdamWTensorArgs>& tensors);
OCTET_DECLARE_KERNEL(adamw_kernel, AdamWKernelFn);

}  // namespace octet::optim
