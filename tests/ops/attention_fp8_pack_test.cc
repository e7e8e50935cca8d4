// NOTE [fp8 f32 lookup] (ops/cpu/attention_bf16_tiles.cc): the f32
// attention tiles' PackRows of FP8 codes, through the VBMI byte tables and
// through the AVX2 gathers / scalar loop, against mul * table[code] for every
// code of both formats: whole 64-code runs and the columns after them,
// row strides wider than a row, the zero padding, and a table of f32 values
// (not bf16 values), which the byte tables must leave to the other path.
#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>
#include <octet/core/dtype.h>
#include <octet/core/float16.h>
#include <octet/ops/cpu/attention_pack.h>

namespace octet::cpu::attn {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// PackRows into a rows_pad x ldd buffer preset to a marker, compared bit for
// bit with the definition: every element of the rows, then zeros.
void ExpectPackRows(const std::vector<uint8_t>& codes, int64_t rs, int64_t rows, int64_t cols, float mul,
                    const Fp8Table<float>& table) {
  const float* lut = table.values.data();
  const int64_t ldd = cols + 8, rows_pad = rows + 2;
  std::vector<float> dst(rows_pad * ldd, 12345.0f);
  PackRows(reinterpret_cast<const Fp8Code*>(codes.data()), rs, 1, rows, cols, mul, dst.data(), ldd, rows_pad, &table);
  for (int64_t r = 0; r < rows_pad; ++r)
    for (int64_t c = 0; c < ldd; ++c) {
      const float want = (r < rows && c < cols) ? mul * lut[codes[r * rs + c]] : 0.0f;
      ASSERT_EQ(Bits(dst[r * ldd + c]), Bits(want)) << "row " << r << " column " << c;
    }
}

// The converter paths this CPU can run: scalar, AVX-512 without VBMI (the
// gathers), and with VBMI (the byte tables).
std::vector<octet::internal::ConverterIsa> ConverterPaths() {
  const octet::internal::ConverterIsa detected = octet::internal::DetectedConverterIsa();
  std::vector<octet::internal::ConverterIsa> isas = {octet::internal::ConverterIsa{}};  // scalar
  if (detected.avx512) isas.push_back(octet::internal::ConverterIsa{.avx512 = true, .avx2 = detected.avx2});
  if (detected.vbmi) isas.push_back(detected);
  return isas;
}

// n codes cycling through all 256 (row starts differ from row to row).
std::vector<uint8_t> Codes(int64_t n, size_t step) {
  std::vector<uint8_t> codes(n);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * step + i / 256) & 0xFF);
  return codes;
}

TEST(AttentionFp8Pack, RowsOfCodesMatchTheTableOnEveryPath) {
  const int64_t rows = 7, rs = 300;
  const std::vector<uint8_t> codes = Codes(rows * rs, 37);
  for (const DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    // bf16 values (the f32 tiles' table at a bf16 compute dtype) and f32 ones.
    const auto bf16_table = Fp8CodeTable<bfloat16>(fp8, 0.37f);
    const auto f32_table = Fp8CodeTable<float>(fp8, 0.37f);
    const auto f16_table = Fp8CodeTable<float16>(fp8, 0.37f);  // looked up (NOTE [fp8 attention decode])
    for (const octet::internal::ConverterIsa& isa : ConverterPaths()) {
      octet::internal::ScopedConverterIsa scope(isa);
      for (const int64_t cols : {32, 40, 64, 100, 128, 200})
        for (const float mul : {1.0f, 0.125f}) {
          SCOPED_TRACE(::testing::Message() << Name(fp8) << " vbmi " << isa.vbmi << " avx512 " << isa.avx512
                                            << " cols " << cols << " mul " << mul);
          ExpectPackRows(codes, rs, rows, cols, mul, bf16_table);
          ExpectPackRows(codes, rs, rows, cols, mul, f32_table);
          ExpectPackRows(codes, rs, rows, cols, mul, f16_table);
        }
    }
  }
}

// PackTransposed likewise: dst[c*ldd + r] = mul * table[code (r, c)], zeros
// for rows [rows, ldd).
void ExpectPackTransposed(const std::vector<uint8_t>& codes, int64_t rs, int64_t rows, int64_t cols, float mul,
                          const Fp8Table<float>& table) {
  const float* lut = table.values.data();
  const int64_t ldd = rows + 5;
  std::vector<float> dst(cols * ldd, 12345.0f);
  PackTransposed(reinterpret_cast<const Fp8Code*>(codes.data()), rs, 1, rows, cols, mul, dst.data(), ldd, &table);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < ldd; ++r) {
      const float want = r < rows ? mul * lut[codes[r * rs + c]] : 0.0f;
      ASSERT_EQ(Bits(dst[c * ldd + r]), Bits(want)) << "row " << r << " column " << c;
    }
}

TEST(AttentionFp8Pack, TransposedCodesMatchTheTableOnEveryPath) {
  const int64_t rs = 300;
  const std::vector<uint8_t> codes = Codes(64 * rs, 53);
  for (const DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    const auto bf16_table = Fp8CodeTable<bfloat16>(fp8, 2.5f);
    const auto f32_table = Fp8CodeTable<float>(fp8, 2.5f);
    const auto f16_table = Fp8CodeTable<float16>(fp8, 2.5f);
    for (const octet::internal::ConverterIsa& isa : ConverterPaths()) {
      octet::internal::ScopedConverterIsa scope(isa);
      for (const int64_t rows : {5, 64, 1})
        for (const int64_t cols : {32, 64, 128, 100})
          for (const float mul : {1.0f, 0.125f}) {
            SCOPED_TRACE(::testing::Message() << Name(fp8) << " vbmi " << isa.vbmi << " avx512 " << isa.avx512
                                              << " rows " << rows << " cols " << cols << " mul " << mul);
            ExpectPackTransposed(codes, rs, rows, cols, mul, bf16_table);
            ExpectPackTransposed(codes, rs, rows, cols, mul, f32_table);
            ExpectPackTransposed(codes, rs, rows, cols, mul, f16_table);
          }
    }
  }
}

// NOTE [fp8 attention decode]: f32 and bf16 tables say the AVX2 packers
// may compute their values, at scales whose products are subnormal,
// overflow or are ordinary, and the decoder makes every entry of them (NaN
// codes NaN); an f16 table, whose rounding the decoder does not do, is
// looked up; a table whose values differ from the decoder's is refused.
TEST(AttentionFp8Pack, TablesAreDecodedOnlyWhereTheDecoderMakesThem) {
#if OCTET_ATTENTION_FP8_DECODE
  for (const DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2})
    for (const float scale_inv : {0.37f, 2.5f, 1.0f, 3e-41f, 1e-30f, 1e30f}) {
      SCOPED_TRACE(::testing::Message() << Name(fp8) << " scale_inv " << scale_inv);
      const auto f32_table = Fp8CodeTable<float>(fp8, scale_inv);
      const auto bf16_table = Fp8CodeTable<bfloat16>(fp8, scale_inv);
      EXPECT_EQ(f32_table.form, Fp8TableForm::kProduct);
      EXPECT_EQ(bf16_table.form, Fp8TableForm::kBf16Product);
      EXPECT_EQ(Fp8CodeTable<float16>(fp8, scale_inv).form, Fp8TableForm::kLookup);
      for (const Fp8Table<float>* table : {&f32_table, &bf16_table}) {
        std::vector<uint8_t> codes(256);
        for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
        ExpectPackRows(codes, 256, 1, 256, 1.0f, *table);
        Fp8Table<float> altered = *table;
        altered.values[77] = std::nextafter(altered.values[77], 1e38f);
        EXPECT_FALSE(DecoderMakesTable(altered));
        EXPECT_TRUE(DecoderMakesTable(*table));
      }
    }
#else
  GTEST_SKIP() << "built without AVX2 and F16C: the tables are looked up";
#endif
}

TEST(AttentionFp8Pack, ByteTablesTakeOnlyBf16Values) {
#if defined(__x86_64__)
  if (!octet::internal::DetectedConverterIsa().vbmi) GTEST_SKIP() << "this CPU has no AVX-512 VBMI";
  octet::internal::ScopedConverterIsa scope(octet::internal::DetectedConverterIsa());
  std::vector<uint8_t> codes(64, 1);
  std::vector<float> dst(64);
  auto table = Fp8CodeTable<bfloat16>(DType::kFloat8E4M3, 1.0f);
  EXPECT_EQ(LookupRowsF32(codes.data(), 64, 1, 64, 1.0f, table.values.data(), dst.data(), 64), 64);
  table.values[200] = 1.0f + 1.0f / 1024;  // not a bf16 value
  EXPECT_EQ(LookupRowsF32(codes.data(), 64, 1, 64, 1.0f, table.values.data(), dst.data(), 64), 0);
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

}  // namespace
}  // namespace octet::cpu::attn
