// Kernel signatures of the optimizer updates (internal). optim/ fills the
// arguments and calls the table; the backends register the loops:
//   adamw_kernel        ops/cpu/adamw_cpu.cc, ops/cuda/adamw.cu
//   sgd_kernel          ops/cpu/optim_cpu.cc, ops/cuda/optim_cuda.cc
//   unscale_grad_kernel ops/cpu/optim_cpu.cc, ops/cuda/optim_cuda.cc
// The tables are defined in ops/optim_kernels.cc. Optimizer kernels are
// backend kernels like any other: they know tensors, never optimizers.
#pragma once

#include <vector>

#include <octet/core/tensor.h>
#include <octet/ops/registry.h>

namespace octet {

// ---- AdamW -----------------------------------------------------------------------
// One call updates a list of tensors so a CUDA backend can register a
// multi-tensor-apply kernel; the CPU kernel runs one fused OpenMP loop per
// tensor.

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
  // When defined: float64 [3] on the parameters' device holding lr,
  // bias_correction1, bias_correction2, which the kernel reads in place of
  // the fields above when it runs (a captured step writes them before each
  // replay; NOTE [captured optimizer step] in optim/adamw.cc).
  Tensor device_scalars;
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
  // Optional f32 (1): the kernel writes there max |new param| (NaN when any
  // is NaN), bit for bit what the amax kernel would read (NOTE [amax notes]
  // in core/amax_note.h). Only through adamw_param_amax_kernel, and only for
  // float32 parameters without a master copy.
  Tensor param_amax;
};

using AdamWKernelFn = void(const AdamWHyper& hyper, const std::vector<AdamWTensorArgs>& tensors);
OCTET_DECLARE_KERNEL(adamw_kernel, AdamWKernelFn);
// The same update where it may also be asked for param_amax (NOTE [amax
// notes] in core/amax_note.h): registered by the backends that take it (the
// CPU); elsewhere the optimizer asks for none.
OCTET_DECLARE_KERNEL(adamw_param_amax_kernel, AdamWKernelFn);

// ---- SGD -------------------------------------------------------------------------

struct SgdHyper {
  double lr = 0.0;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// NOTE [sgd update]: one parameter's update, in the compute type C (f64 for
// f64 parameters, f32 otherwise), rounding to the parameter's dtype once:
//   g = grad + weight_decay * p
//   with a buffer: b = momentum * b + g;  g = nesterov ? g + momentum * b : b
//   p = p - lr * g
// param: (n) f64/f32/bf16/f16, contiguous on the CPU (any layout on a
// device), updated in place. grad: (n) param's dtype or f32, contiguous.
// buffer: (n) C, contiguous, updated in place; undefined without momentum.
using SgdKernelFn = void(const SgdHyper& hyper, const Tensor& param, const Tensor& grad, const Tensor& buffer);
OCTET_DECLARE_KERNEL(sgd_kernel, SgdKernelFn);

// ---- loss-scaler unscale ---------------------------------------------------------

// grad = grad * inv_scale in place, computed in C (f64 for f64, f32
// otherwise) with one rounding to grad's dtype. Returns whether any
// unscaled element is inf or NaN. grad: f64/f32/bf16/f16 (contiguous on the
// CPU; the CPU kernel rejects another layout).
using UnscaleGradKernelFn = bool(const Tensor& grad, double inv_scale);
OCTET_DECLARE_KERNEL(unscale_grad_kernel, UnscaleGradKernelFn);

}  // namespace octet
