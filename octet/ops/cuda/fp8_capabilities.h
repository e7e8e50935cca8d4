// Which FP8 GEMM paths a GPU offers, from its compute capability and the
// cuBLASLt version. Plain C++ (no CUDA headers): octet-device-info prints it
// and the GEMM code can branch on it; tests/cuda/fp8_capabilities_test.cc
// checks the table without a GPU.
//
// NOTE [fp8 capabilities]:
//   < 8.9            no FP8 tensor cores.
//   8.9  (Ada)       per-tensor scaled FP8 GEMM, TN layout only (A transposed,
//                    B not; the cast-transpose copy serves dgrad/wgrad).
//   9.0  (Hopper)    as Ada, plus 1x128 / 128x128 block scaling when
//                    cuBLASLt >= 12.9 (cublasLtGetVersion() >= 120900).
//   10.x (Blackwell data centre)  every layout (no TN restriction) and MXFP8
//                    (E8M0 scales per 32 elements).
//   11.x             treated like 10.x for layouts; MXFP8 not claimed.
//   12.x (Blackwell workstation)  TN only, no MXFP8 (Transformer Engine
//                    keeps the TN restriction below 13.0 except 10.x/11.x).
//   >= 13.0          every layout; MXFP8 not claimed.
// Unknown future parts get the conservative answer; the GEMM still checks
// cuBLASLt's heuristic result and falls back to BF16 when it finds nothing.
#pragma once

#include <string>

namespace octet::cuda {

// cublasLtGetVersion() of cuBLASLt 12.9.0, the first with FP8 block scaling.
inline constexpr int kCublasLtBlockScalingVersion = 120900;

struct Fp8GemmCaps {
  bool fp8 = false;            // FP8 tensor-core GEMM with per-tensor scales
  bool tn_only = false;        // FP8 operands must be in the TN layout
  bool block_scaling = false;  // 1x128 / 128x128 FP32 block scales
  bool mxfp8 = false;          // MXFP8 block-32 E8M0 scales
};

inline Fp8GemmCaps Fp8CapsFor(int major, int minor, int cublaslt_version) {
  Fp8GemmCaps c;
  const int sm = major * 10 + minor;
  if (sm < 89) return c;
  c.fp8 = true;
  c.tn_only = !((sm >= 100 && sm < 120) || sm >= 130);
  c.block_scaling = major == 9 && cublaslt_version >= kCublasLtBlockScalingVersion;
  c.mxfp8 = major == 10;
  return c;
}

// "FP8 GEMM (TN only) + block scaling" style one-line summary.
inline std::string Describe(const Fp8GemmCaps& c) {
  if (!c.fp8) return "no FP8 GEMM (needs compute capability 8.9 or newer)";
  std::string s = c.tn_only ? "FP8 GEMM, TN layout only" : "FP8 GEMM, any layout";
  if (c.block_scaling) s += "; 1x128/128x128 block scaling";
  if (c.mxfp8) s += "; MXFP8";
  return s;
}

}  // namespace octet::cuda
