// A BF16 GEMM of octet's own on AMX tiles (internal to ops/cpu/; NOTE [amx
// gemm] in amx_gemm.cc): the one that runs RunDnnlGemm's bf16 GEMMs with a
// packed B where oneDNN's would run on AMX. x86-64 only.
#pragma once

#include <cstdint>

#include <octet/core/dtype.h>
#include <octet/ops/cpu/gemm_pack.h>

namespace octet::cpu {

// out (m x n, row-major, ldc apart) = a · b, then + bias if bias_first, then
// * scale, then + bias if not bias_first — oneDNN's order for its bias
// argument (bias_first) and for a binary_add post-op. Accumulation in f32;
// a bf16 out is rounded to nearest even.
struct AmxGemmArgs {
  const uint16_t* a = nullptr;  // bf16 (m x k), row-major, lda apart
  int64_t lda = 0;
  const uint16_t* b = nullptr;  // bf16 (k x n), packed by PackVnniB as `layout`
  PackedBLayout layout;
  int64_t m = 0, n = 0, k = 0;
  void* out = nullptr;
  int64_t ldc = 0;
  DType out_dtype = DType::kFloat32;  // float32 or bfloat16
  const float* bias = nullptr;        // n values, or null
  bool bias_first = false;
  const float* scale = nullptr;  // one value, or null
};

// Whether AmxGemm runs on this process: the CPU has AMX-BF16, Linux granted
// the tile state, oneDNN's effective ISA includes AMX (so
// ONEDNN_MAX_CPU_ISA caps both alike), neither OCTET_DISABLE_AVX512 nor
// OCTET_DISABLE_AVX512_BF16 is 1, and OCTET_CPU_AMX_GEMM is not 0.
bool AmxGemmEnabled();

// Whether AmxGemm takes this geometry: k a positive multiple of 32 (a's
// tiles are read in place, 32 values a row at a time), a VNNI layout with
// k_block 32 and n_block a multiple of 16, and an f32 or bf16 out.
bool AmxGemmTakes(const PackedBLayout& layout, int64_t k, DType out_dtype);

// Runs args on the OpenMP pool. Requires AmxGemmEnabled() and
// AmxGemmTakes(); throws octet::Error otherwise.
void AmxGemm(const AmxGemmArgs& args);

// Overrides AmxGemmEnabled() in tests: 0 off, 1 on where the CPU can run
// it, -1 back to the decision above.
void SetAmxGemmForTesting(int forced);

}  // namespace octet::cpu
