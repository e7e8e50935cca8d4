// The dtype table: every element type octet knows, with the facts each backend
// needs about it. One row per DType; a static_assert in dtype.cc ties the table
// to the enum count.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstdint>
#include <ostream>
#include <string>

namespace octet {

enum class DType : uint8_t {
  kFloat64,
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,
  kFloat8E5M2,
  kInt32,
  kInt64,
  kUInt8,
  kBool,
};
inline constexpr int kNumDTypes = 10;

// Backend type ids are stored as plain ints so this header needs no CUDA,
// cuDNN, oneDNN or NCCL header; the backends static_assert that they match
// their libraries' enums. -1 means "no such type in that library".
struct DTypeInfo {
  DType dtype;
  const char* name;              // "float32", "fp8_e4m3", ...
  const char* safetensors_name;  // "F32", "F8_E4M3", ...
  int size;                      // bytes per element
  bool is_float;
  bool is_fp8;
  double max_finite;  // largest finite value (integers: max value)
  bool has_inf;
  bool has_nan;
  int cuda_type;   // cudaDataType_t
  int cudnn_type;  // cudnnDataType_t
  int dnnl_type;   // dnnl_data_type_t
  int nccl_type;   // ncclDataType_t
};

const DTypeInfo& Info(DType dtype);
inline const char* Name(DType dtype) { return Info(dtype).name; }
inline int SizeOf(DType dtype) { return Info(dtype).size; }
inline bool IsFloat(DType dtype) { return Info(dtype).is_float; }
inline bool IsFp8(DType dtype) { return Info(dtype).is_fp8; }
// Float types that kernels compute on directly (f64, f32, f16, bf16).
inline bool IsUnscaledFloat(DType dtype) { return IsFloat(dtype) && !IsFp8(dtype); }

// Parses a name from the table (either spelling: "float32" or "F32").
bool ParseDType(const std::string& text, DType* out);

std::ostream& operator<<(std::ostream& os, DType dtype);

}  // namespace octet
