// NOTE [fp8 f32 lookup] (ops/cpu/attention_bf16_tiles.cc): the f32
// attention tiles' PackRows of FP8 codes, through the VBMI byte tables and
// through the AVX2 gathers / scalar loop, against mul * table[code] for every
// code of both formats: whole 64-code runs and the columns after them,
// row strides wider than a row, the zero padding, and a table of f32 values
// (not bf16 values), which the byte tables must leave to the other path.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>
#include <octet/core/dtype.h>
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
                    const float* lut) {
  const int64_t ldd = cols + 8, rows_pad = rows + 2;
  std::vector<float> dst(rows_pad * ldd, 12345.0f);
  PackRows(reinterpret_cast<const Fp8Code*>(codes.data()), rs, 1, rows, cols, mul, dst.data(), ldd, rows_pad, lut);
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
    for (const octet::internal::ConverterIsa& isa : ConverterPaths()) {
      octet::internal::ScopedConverterIsa scope(isa);
      for (const int64_t cols : {32, 40, 64, 100, 128, 200})
        for (const float mul : {1.0f, 0.125f}) {
          SCOPED_TRACE(::testing::Message() << Name(fp8) << " vbmi " << isa.vbmi << " avx512 " << isa.avx512
                                            << " cols " << cols << " mul " << mul);
          ExpectPackRows(codes, rs, rows, cols, mul, bf16_table.data());
          ExpectPackRows(codes, rs, rows, cols, mul, f32_table.data());
        }
    }
  }
}

// PackTransposed likewise: dst[c*ldd + r] = mul * table[code (r, c)], zeros
// for rows [rows, ldd).
void ExpectPackTransposed(const std::vector<uint8_t>& codes, int64_t rs, int64_t rows, int64_t cols, float mul,
                          const float* lut) {
  const int64_t ldd = rows + 5;
  std::vector<float> dst(cols * ldd, 12345.0f);
  PackTransposed(reinterpret_cast<const Fp8Code*>(codes.data()), rs, 1, rows, cols, mul, dst.data(), ldd, lut);
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
    for (const octet::internal::ConverterIsa& isa : ConverterPaths()) {
      octet::internal::ScopedConverterIsa scope(isa);
      for (const int64_t rows : {5, 64, 1})
        for (const int64_t cols : {32, 64, 128, 100})
          for (const float mul : {1.0f, 0.125f}) {
            SCOPED_TRACE(::testing::Message() << Name(fp8) << " vbmi " << isa.vbmi << " avx512 " << isa.avx512
                                              << " rows " << rows << " cols " << cols << " mul " << mul);
            ExpectPackTransposed(codes, rs, rows, cols, mul, bf16_table.data());
            ExpectPackTransposed(codes, rs, rows, cols, mul, f32_table.data());
          }
    }
  }
}

TEST(AttentionFp8Pack, ByteTablesTakeOnlyBf16Values) {
#if defined(__x86_64__)
  if (!octet::internal::DetectedConverterIsa().vbmi) GTEST_SKIP() << "this CPU has no AVX-512 VBMI";
  octet::internal::ScopedConverterIsa scope(octet::internal::DetectedConverterIsa());
  std::vector<uint8_t> codes(64, 1);
  std::vector<float> dst(64);
  auto table = Fp8CodeTable<bfloat16>(DType::kFloat8E4M3, 1.0f);
  EXPECT_EQ(LookupRowsF32(codes.data(), 64, 1, 64, 1.0f, table.data(), dst.data(), 64), 64);
  table[200] = 1.0f + 1.0f / 1024;  // not a bf16 value
  EXPECT_EQ(LookupRowsF32(codes.data(), 64, 1, 64, 1.0f, table.data(), dst.data(), 64), 0);
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

}  // namespace
}  // namespace octet::cpu::attn
