// Checks core/float8.h against tests/core/data/fp8_golden.txt, a table that
// tools/gen_fp8_golden.cc generated from CUDA's cuda_fp8.h host conversions
// (see that file for the format). This keeps an oracle check on machines
// without the CUDA headers. The build passes the tests/ directory as
// OCTET_TEST_DATA_DIR.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <octet/core/bit_cast.h>
#include <octet/core/float16.h>
#include <octet/core/float8.h>

#ifndef OCTET_TEST_DATA_DIR
#define OCTET_TEST_DATA_DIR "tests"
#endif

namespace octet {
namespace {

constexpr char kGoldenPath[] = OCTET_TEST_DATA_DIR "/core/data/fp8_golden.txt";

TEST(Fp8Golden, EveryLineOfTheCudaGeneratedTableMatches) {
  std::ifstream in(kGoldenPath);
  ASSERT_TRUE(in.good()) << "cannot open " << kGoldenPath;
  std::string line;
  int line_number = 0;
  int decode_lines = 0;
  int encode_lines = 0;
  int failures = 0;
  constexpr int kMaxReported = 20;
  auto report = [&](const std::string& what) {
    if (++failures <= kMaxReported) {
      ADD_FAILURE() << kGoldenPath << ":" << line_number << ": " << what
                    << "\n  line: " << line;
    }
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "decode") {
      std::string fmt;
      uint32_t code, half_bits, float_bits;
      fields >> fmt >> std::hex >> code >> half_bits >> float_bits;
      if (fields.fail() || (fmt != "e4m3" && fmt != "e5m2") || code > 255) {
        report("malformed decode line");
        continue;
      }
      ++decode_lines;
      const uint8_t b = static_cast<uint8_t>(code);
      const float ours = fmt == "e4m3" ? E4M3BitsToFloat(b) : E5M2BitsToFloat(b);
      if (FloatToF16Bits(ours) != half_bits) report("decoded value differs (half bits)");
      const float want = detail::BitsAsFloat(float_bits);
      if (std::isnan(want) ? !std::isnan(ours) : detail::FloatAsBits(ours) != float_bits) {
        report("decoded value differs (float bits)");
      }
    } else if (kind == "encode") {
      uint32_t x_bits, e4_sat, e4_nosat, e5_sat, e5_nosat;
      fields >> std::hex >> x_bits >> e4_sat >> e4_nosat >> e5_sat >> e5_nosat;
      if (fields.fail()) {
        report("malformed encode line");
        continue;
      }
      ++encode_lines;
      const float x = detail::BitsAsFloat(x_bits);
      if (FloatToE4M3Bits(x, Fp8Saturation::kSatFinite) != e4_sat) report("e4m3 satfinite");
      if (FloatToE4M3Bits(x, Fp8Saturation::kNoSat) != e4_nosat) report("e4m3 nosat");
      if (FloatToE5M2Bits(x, Fp8Saturation::kSatFinite) != e5_sat) report("e5m2 satfinite");
      if (FloatToE5M2Bits(x, Fp8Saturation::kNoSat) != e5_nosat) report("e5m2 nosat");
    } else {
      report("unknown record kind");
    }
  }
  EXPECT_EQ(failures, 0) << "mismatching or malformed records (first "
                         << kMaxReported << " shown above)";
  // Guard against a truncated or empty table silently passing.
  EXPECT_EQ(decode_lines, 512);
  EXPECT_GE(encode_lines, 5000);
}

}  // namespace
}  // namespace octet
