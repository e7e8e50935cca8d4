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
#include <limits>
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

namespace internal {

// 2^n in F, exactly (n below F's exponent range).
template <typename F>
OCTET_HOST_DEVICE constexpr F Pow2(int n) {
  F r = 1;
  for (int i = 0; i < n; ++i) r *= 2;
  return r;
}

// NOTE [float to integer]: a float converted to an integer type truncates
// toward zero, as static_cast does; where static_cast is undefined, the result
// is defined here: NaN gives 0, a value beyond the type's range (infinities
// included) gives the nearest bound. That is what CUDA's saturating cvt gives,
// so every backend agrees element for element. The ops a user calls reject
// such values up front instead (To, FromVector, Full: CheckIntegerConvertible
// and CheckRepresentable in core/tensor.h); this is the element-level floor
// under every kernel. Integer -> integer stays modular (static_cast).
//
// An integer type To's range as values of a float type F, exactly:
// [IntegerLo, IntegerHiExclusive), both powers of two (or 0). The one
// definition behind SaturatingCast and the host-side checks of core/tensor.cc.
template <typename To, typename F>
OCTET_HOST_DEVICE constexpr F IntegerLo() {
  constexpr int kDigits = static_cast<int>(sizeof(To)) * 8 - 1;
  return std::is_signed_v<To> ? -Pow2<F>(kDigits) : F(0);
}
template <typename To, typename F>
OCTET_HOST_DEVICE constexpr F IntegerHiExclusive() {  // the type's max + 1
  return Pow2<F>(static_cast<int>(sizeof(To)) * 8 - (std::is_signed_v<To> ? 1 : 0));
}

template <typename To, typename F>
OCTET_HOST_DEVICE inline To SaturatingCast(F v) {
  constexpr F kLo = IntegerLo<To, F>();
  constexpr F kHiExclusive = IntegerHiExclusive<To, F>();
  if (!(v == v)) return To(0);
  if (v >= kHiExclusive) return std::numeric_limits<To>::max();
  // kLo - 1 may round to kLo (float vs int64); v == kLo gives the minimum either way.
  if (v <= kLo - F(1)) return std::numeric_limits<To>::min();
  return static_cast<To>(v);
}

}  // namespace internal

// Element conversions through AccType (fp8 types convert via float,
// saturating). Float -> integer: NOTE [float to integer]. -> bool: whether the
// value, in its own type, is nonzero (NaN gives true).
template <typename To, typename From>
OCTET_HOST_DEVICE inline To ConvertElement(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_arithmetic_v<From>) {
      return v != From(0);
    } else {
      return static_cast<float>(v) != 0.0f;  // f16/bf16/fp8: exact in float
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return internal::SaturatingCast<To>(v);
  } else if constexpr (std::is_arithmetic_v<To> && std::is_arithmetic_v<From>) {
    return static_cast<To>(v);
  } else if constexpr (std::is_arithmetic_v<From>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, double>) {
    return static_cast<double>(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To>) {
    return internal::SaturatingCast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(static_cast<float>(v));
  }
}

}  // namespace octet
