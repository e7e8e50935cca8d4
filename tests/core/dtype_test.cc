// The dtype table: names, sizes, limits, parsing, dispatch errors.
#include <gtest/gtest.h>

#include <octet/core/dtype.h>
#include <octet/core/dtype_traits.h>
#include "tests/test_util.h"

namespace octet {
namespace {

TEST(DType, TableFacts) {
  EXPECT_STREQ(Name(DType::kFloat8E4M3), "fp8_e4m3");
  EXPECT_STREQ(Info(DType::kFloat8E5M2).safetensors_name, "F8_E5M2");
  EXPECT_EQ(SizeOf(DType::kBFloat16), 2);
  EXPECT_EQ(Info(DType::kFloat8E4M3).max_finite, 448.0);
  EXPECT_EQ(Info(DType::kFloat8E5M2).max_finite, 57344.0);
  EXPECT_FALSE(Info(DType::kFloat8E4M3).has_inf);
  EXPECT_TRUE(Info(DType::kFloat8E5M2).has_inf);
  EXPECT_TRUE(IsFp8(DType::kFloat8E5M2));
  EXPECT_FALSE(IsUnscaledFloat(DType::kFloat8E5M2));
  EXPECT_TRUE(IsUnscaledFloat(DType::kFloat16));
  EXPECT_EQ(Info(DType::kFloat16).max_finite, 65504.0);
  for (int i = 0; i < kNumDTypes; ++i) EXPECT_EQ(static_cast<int>(Info(static_cast<DType>(i)).dtype), i);
}

TEST(DType, ParsesBothSpellings) {
  DType d;
  ASSERT_TRUE(ParseDType("bfloat16", &d));
  EXPECT_EQ(d, DType::kBFloat16);
  ASSERT_TRUE(ParseDType("F8_E4M3", &d));
  EXPECT_EQ(d, DType::kFloat8E4M3);
  EXPECT_FALSE(ParseDType("float128", &d));
}

TEST(DType, DispatchNamesOpAndAcceptedDtypes) {
  const std::string msg = testing::ErrorOf(
      [] { Dispatch<DType::kFloat32, DType::kBFloat16>(DType::kInt64, "my_op", []<typename T>() {}); });
  EXPECT_NE(msg.find("my_op: dtype int64 is not supported (accepts float32, bfloat16)"), std::string::npos) << msg;
  int size = 0;
  DispatchFloat(DType::kFloat16, "x", [&]<typename T>() { size = sizeof(T); });
  EXPECT_EQ(size, 2);
}

}  // namespace
}  // namespace octet
