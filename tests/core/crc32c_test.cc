// CRC-32C against published check values (the CRC catalogue's "123456789"
// and RFC 3720 appendix B.4), the table path against the SSE4.2 path, and
// incremental use.
#include <octet/core/crc32c.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace octet {
namespace {

TEST(Crc32c, MatchesPublishedCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<uint8_t>(i), down[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down.data(), 32), 0x113FDB5Cu);
  for (const auto* v : {&zeros, &ones, &up, &down})
    EXPECT_EQ(internal::Crc32cExtendPortable(0, v->data(), 32), Crc32c(v->data(), 32));
  EXPECT_EQ(internal::Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
}

TEST(Crc32c, PortableAndDispatchedAgreeAndExtendConcatenates) {
  std::mt19937 gen(5);
  std::vector<uint8_t> data(4099);
  for (auto& b : data) b = static_cast<uint8_t>(gen());
  for (size_t offset : {0, 1, 3, 7}) {
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 1000, 4090}) {
      const uint8_t* p = data.data() + offset;
      const uint32_t whole = Crc32c(p, n);
      EXPECT_EQ(internal::Crc32cExtendPortable(0, p, n), whole) << offset << " " << n;
      for (size_t cut : {size_t{0}, n / 3, n}) {
        EXPECT_EQ(Crc32cExtend(Crc32c(p, cut), p + cut, n - cut), whole);
        EXPECT_EQ(internal::Crc32cExtendPortable(internal::Crc32cExtendPortable(0, p, cut), p + cut, n - cut), whole);
      }
    }
  }
  // One flipped bit changes the checksum.
  const uint32_t before = Crc32c(data.data(), data.size());
  data[2048] ^= 0x10;
  EXPECT_NE(Crc32c(data.data(), data.size()), before);
}

TEST(Crc32c, HexRoundTrip) {
  EXPECT_EQ(Crc32cHex(0xE3069283u), "e3069283");
  EXPECT_EQ(Crc32cHex(0x0000000Fu), "0000000f");
  uint32_t v = 0;
  ASSERT_TRUE(ParseCrc32cHex("E3069283", &v));
  EXPECT_EQ(v, 0xE3069283u);
  for (const char* bad : {"", "e306928", "e30692830", "e306928g", " e306928"}) EXPECT_FALSE(ParseCrc32cHex(bad, &v)) << bad;
}

}  // namespace
}  // namespace octet
