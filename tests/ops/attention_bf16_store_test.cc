// NOTE [bf16 row stores] (ops/cpu/attention_bf16_tiles.h): the bf16
// attention's gradient rows, scaled and narrowed in one AVX-512 BF16 pass,
// against FloatToBf16Bits of the f32 product element by element (the
// rounding every bf16 store promises) and against StoreRows, bit for bit:
// head sizes with and without a 32-value tail, ties, subnormals, NaNs,
// infinities, contiguous and strided output rows, and the elements around
// each row left alone; and per-row multipliers (the forward's 1 / l_i) in
// the bf16 and the f32 row stores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/tensor.h>

#if defined(__x86_64__)
#include <octet/ops/cpu/attention_bf16_tiles.h>

namespace octet::cpu::attn {
namespace {

constexpr uint16_t kUntouched = 0xABCD;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values that exercise every branch of the rounding: random magnitudes,
// exact ties (even and odd), subnormals, NaNs with payloads, infinities,
// values that overflow to infinity when rounded, signed zeros.
std::vector<float> Values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  const float specials[] = {FromBits(0x3F808000u),  // tie, even below: rounds down
                            FromBits(0x3F818000u),  // tie, odd below: rounds up
                            FromBits(0x00000001u),  // smallest subnormal
                            FromBits(0x807FFFFFu),  // largest negative subnormal
                            FromBits(0x7FC12345u),  // quiet NaN with a payload
                            FromBits(0xFF800001u),  // signalling NaN
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            FromBits(0x7F7FFFFFu),  // FLT_MAX: rounds to +inf
                            -0.0f,
                            0.0f};
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (i % 7 == 3) ? specials[(i / 7) % std::size(specials)] : u(rng);
  return v;
}

// An output head operand over buf: heads side by side, the given strides.
template <typename T, typename E>
OutOperand<T> StridedOut(std::vector<E>& buf, int64_t sb, int64_t sh, int64_t st, int64_t sd, int64_t heads) {
  OutOperand<T> o(Tensor{});
  o.data = reinterpret_cast<T*>(buf.data());
  o.sb = sb;
  o.sh = sh;
  o.st = st;
  o.sd = sd;
  o.heads = heads;
  return o;
}

TEST(AttentionBf16Store, RowsAreTheF32ProductsRoundedAsFloatToBf16Bits) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  const int64_t rows = 5, sp = 128, heads = 2, bh = 3;  // batch 1, head 1
  for (const int64_t d : {1, 13, 16, 31, 32, 40, 64, 96, 100}) {
    for (const int64_t sd : {int64_t{1}, int64_t{3}}) {
      for (const float mul : {1.0f, 0.125f, 3.0f}) {
        SCOPED_TRACE(::testing::Message() << "d=" << d << " column stride " << sd << " mul " << mul);
        const std::vector<float> src = Values(rows * sp, static_cast<uint32_t>(d * 7 + sd));
        // out: (B=2, H=2, T=8, D) with columns sd apart and rows st apart,
        // every element preset so that writes outside the rows show.
        const int64_t st = d * sd + 5, sh = 8 * st, sb = heads * sh, t0 = 2;
        std::vector<uint16_t> fast(2 * sb, kUntouched), generic(2 * sb, kUntouched);
        const auto fast_out = StridedOut<bfloat16>(fast, sb, sh, st, sd, heads);
        const auto generic_out = StridedOut<bfloat16>(generic, sb, sh, st, sd, heads);
        StoreRowsBf16(src.data(), sp, rows, d, mul, fast_out, bh, t0);
        StoreRows(src.data(), sp, rows, d, mul, generic_out, bh, t0);
        EXPECT_EQ(fast, generic) << "StoreRowsBf16 and StoreRows wrote different bits";
        const int64_t base = (bh / heads) * sb + (bh % heads) * sh + t0 * st;
        int64_t written = 0;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < d; ++c) {
            const uint16_t want = FloatToBf16Bits(src[r * sp + c] * mul);
            ASSERT_EQ(fast[base + r * st + c * sd], want) << "row " << r << " column " << c;
            ++written;
          }
        int64_t untouched = 0;
        for (const uint16_t w : fast) untouched += w == kUntouched;
        EXPECT_EQ(untouched, static_cast<int64_t>(fast.size()) - written) << "a store outside the rows";
      }
    }
  }
}

// Per-row multipliers (the forward's 1 / l_i, NOTE [attention row
// addressing]) in both stores, bf16 and f32: row r is src times row_mul[r],
// rows st apart from the head's first row, nothing written outside them.
TEST(AttentionBf16Store, PerRowMultipliersScaleEachRowInBf16AndF32) {
  const int64_t rows = 6, sp = 112, heads = 3, bh = 4;  // batch 1, head 1
  const float row_mul[rows] = {0.5f, 3.0f, 1.0f / 7.0f, 1.0f, 0.0078125f, 11.0f};
  for (const int64_t d : {1, 17, 32, 48, 100}) {
    for (const int64_t sd : {int64_t{1}, int64_t{2}}) {
      SCOPED_TRACE(::testing::Message() << "d=" << d << " column stride " << sd);
      const std::vector<float> src = Values(rows * sp, static_cast<uint32_t>(d * 11 + sd));
      const int64_t st = d * sd + 3, sh = 9 * st, sb = heads * sh, t0 = 1;
      const int64_t base = (bh / heads) * sb + (bh % heads) * sh + t0 * st;
      std::vector<float> f32(2 * sb, -99.0f);
      const auto f32_out = StridedOut<float>(f32, sb, sh, st, sd, heads);
      StoreRows(src.data(), sp, rows, d, 2.0f, f32_out, bh, t0, row_mul);  // the 2.0 is not used
      int64_t written = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c, ++written) {
          const float want = src[r * sp + c] * row_mul[r];
          const float got = f32[base + r * st + c * sd];
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got)) << "f32 row " << r << " column " << c;
          } else {
            ASSERT_EQ(got, want) << "f32 row " << r << " column " << c;
          }
        }
      EXPECT_EQ(std::count(f32.begin(), f32.end(), -99.0f), static_cast<int64_t>(f32.size()) - written)
          << "an f32 store outside the rows";
      if (!CpuHasAvx512Bf16()) continue;
      std::vector<uint16_t> bf16(2 * sb, kUntouched);
      const auto bf16_out = StridedOut<bfloat16>(bf16, sb, sh, st, sd, heads);
      StoreRowsBf16(src.data(), sp, rows, d, 2.0f, bf16_out, bh, t0, row_mul);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c)
          ASSERT_EQ(bf16[base + r * st + c * sd], FloatToBf16Bits(src[r * sp + c] * row_mul[r]))
              << "bf16 row " << r << " column " << c;
      EXPECT_EQ(std::count(bf16.begin(), bf16.end(), kUntouched), static_cast<int64_t>(bf16.size()) - written)
          << "a bf16 store outside the rows";
    }
  }
}

}  // namespace
}  // namespace octet::cpu::attn

#endif  // defined(__x86_64__)
