#include <octet/core/dtype.h>

#include <array>
#include <limits>

namespace octet {
namespace {

// cudaDataType_t, cudnnDataType_t, dnnl_data_type_t and ncclDataType_t values;
// checked against the libraries' headers where those are compiled
// (ops/cuda/*.cu static_asserts, ops/cpu/matmul_cpu.cc).
constexpr int kCudaR64F = 1, kCudaR32F = 0, kCudaR16F = 2, kCudaR16BF = 14, kCudaR8F_E4M3 = 28,
              kCudaR8F_E5M2 = 29, kCudaR32I = 10, kCudaR64I = 24, kCudaR8U = 8;
constexpr int kCudnnFloat = 0, kCudnnDouble = 1, kCudnnHalf = 2, kCudnnInt32 = 4, kCudnnInt64 = 10,
              kCudnnBool = 11, kCudnnUInt8 = 6, kCudnnBFloat16 = 9, kCudnnFp8E4M3 = 12, kCudnnFp8E5M2 = 13;
constexpr int kDnnlF16 = 1, kDnnlBF16 = 2, kDnnlF32 = 3, kDnnlS32 = 4, kDnnlU8 = 6, kDnnlF64 = -1;  // oneDNN 2.6 has no f64
constexpr int kNcclInt32 = 2, kNcclUint8 = 1, kNcclInt64 = 4, kNcclFloat16 = 6, kNcclFloat32 = 7,
              kNcclFloat64 = 8, kNcclBfloat16 = 9, kNcclFloat8e4m3 = 10, kNcclFloat8e5m2 = 11;

constexpr std::array<DTypeInfo, kNumDTypes> kTable = {{
    {DType::kFloat64, "float64", "F64", 8, true, false, std::numeric_limits<double>::max(), true, true,
     kCudaR64F, kCudnnDouble, kDnnlF64, kNcclFloat64},
    {DType::kFloat32, "float32", "F32", 4, true, false, std::numeric_limits<float>::max(), true, true,
     kCudaR32F, kCudnnFloat, kDnnlF32, kNcclFloat32},
    {DType::kFloat16, "float16", "F16", 2, true, false, 65504.0, true, true, kCudaR16F, kCudnnHalf,
     kDnnlF16, kNcclFloat16},
    {DType::kBFloat16, "bfloat16", "BF16", 2, true, false, 3.3895313892515355e38, true, true, kCudaR16BF,
     kCudnnBFloat16, kDnnlBF16, kNcclBfloat16},
    {DType::kFloat8E4M3, "fp8_e4m3", "F8_E4M3", 1, true, true, 448.0, false, true, kCudaR8F_E4M3,
     kCudnnFp8E4M3, -1, kNcclFloat8e4m3},
    {DType::kFloat8E5M2, "fp8_e5m2", "F8_E5M2", 1, true, true, 57344.0, true, true, kCudaR8F_E5M2,
     kCudnnFp8E5M2, -1, kNcclFloat8e5m2},
    {DType::kInt32, "int32", "I32", 4, false, false, 2147483647.0, false, false, kCudaR32I, kCudnnInt32,
     kDnnlS32, kNcclInt32},
    {DType::kInt64, "int64", "I64", 8, false, false, 9223372036854775807.0, false, false, kCudaR64I,
     kCudnnInt64, -1, kNcclInt64},
    {DType::kUInt8, "uint8", "U8", 1, false, false, 255.0, false, false, kCudaR8U, kCudnnUInt8, kDnnlU8,
     kNcclUint8},
    {DType::kBool, "bool", "BOOL", 1, false, false, 1.0, false, false, kCudaR8U, kCudnnBool, kDnnlU8,
     kNcclUint8},
}};

constexpr bool TableMatchesEnum() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kTable[i].dtype) != i) return false;
  }
  return true;
}
static_assert(kTable.size() == kNumDTypes && static_cast<int>(DType::kBool) + 1 == kNumDTypes,
              "the dtype table must have one row per DType");
static_assert(TableMatchesEnum(), "dtype table rows must be in enum order");

}  // namespace

const DTypeInfo& Info(DType dtype) { return kTable[static_cast<int>(dtype)]; }

bool ParseDType(const std::string& text, DType* out) {
  for (const DTypeInfo& info : kTable) {
    if (text == info.name || text == info.safetensors_name) {
      *out = info.dtype;
      return true;
    }
  }
  return false;
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << Name(dtype); }

}  // namespace octet
