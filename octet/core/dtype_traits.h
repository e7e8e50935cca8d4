// Compile-time mapping between DType and C++ element types, and the dispatch
// helper that turns a runtime dtype into a C++ type for a kernel.
//
//   Dispatch<DType::kFloat32, DType::kBFloat16>(x.dtype(), "gelu", [&]<typename T>() {
//     Kernel<T>(...);
//   });
//
// A dtype outside the list throws an error naming the op and the accepted dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include <octet/core/bfloat16.h>
#include <octet/core/dtype.h>
#include <octet/core/error.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>

namespace octet {

template <DType D>
struct CppTypeOf;
template <> struct CppTypeOf<DType::kFloat64> { using type = double; };
template <> struct CppTypeOf<DType::kFloat32> { using type = float; };
template <> struct CppTypeOf<DType::kFloat16> { using type = float16; };
template <> struct CppTypeOf<DType::kBFloat16> { using type = bfloat16; };
template <> struct CppTypeOf<DType::kFloat8E4M3> { using type = float8_e4m3; };
template <> struct CppTypeOf<DType::kFloat8E5M2> { using type = float8_e5m2; };
template <> struct CppTypeOf<DType::kInt32> { using type = int32_t; };
template <> struct CppTypeOf<DType::kInt64> { using type = int64_t; };
template <> struct CppTypeOf<DType::kUInt8> { using type = uint8_t; };
template <> struct CppTypeOf<DType::kBool> { using type = bool; };
template <DType D>
using CppType = typename CppTypeOf<D>::type;

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<float16> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<float8_e4m3> { static constexpr DType value = DType::kFloat8E4M3; };
template <> struct DTypeOf<float8_e5m2> { static constexpr DType value = DType::kFloat8E5M2; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

// The type kernels compute in: double for f64, float for every other float
// type (f16/bf16/fp8 are widened on load), the type itself for integers.
template <typename T>
using AccType = std::conditional_t<std::is_same_v<T, double>, double,
                                   std::conditional_t<std::is_integral_v<T>, T, float>>;

namespace internal {
template <DType... Ds>
std::string DTypeListStr() {
  std::string s;
  ((s += (s.empty() ? "" : ", "), s += Name(Ds)), ...);
  return s;
}
}  // namespace internal

template <DType... Ds, typename F>
void Dispatch(DType dtype, const char* op, F&& f) {
  bool done = ((dtype == Ds ? (f.template operator()<CppType<Ds>>(), true) : false) || ...);
  OCTET_CHECK(done, op, ": dtype ", Name(dtype), " is not supported (accepts ", internal::DTypeListStr<Ds...>(),
              ")");
}

// The float dtypes that kernels compute on directly (FP8 needs its scale and
// goes through the cast family instead).
template <typename F>
void DispatchFloat(DType dtype, const char* op, F&& f) {
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16>(dtype, op, std::forward<F>(f));
}

template <typename F>
void DispatchAll(DType dtype, const char* op, F&& f) {
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3,
           DType::kFloat8E5M2, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBool>(dtype, op,
                                                                                        std::forward<F>(f));
}

// Element conversions through AccType (fp8 types convert via float, saturating).
template <typename To, typename From>
OCTET_HOST_DEVICE inline To ConvertElement(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_arithmetic_v<To> && std::is_arithmetic_v<From>) {
    return static_cast<To>(v);
  } else if constexpr (std::is_arithmetic_v<From>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, double>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<To>(static_cast<float>(v));
  }
}

}  // namespace octet
