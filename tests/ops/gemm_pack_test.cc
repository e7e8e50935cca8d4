// The CPU GEMM's B packers (ops/cpu/gemm_pack.h) element by element against
// the layout formulas the header states: every element of B lands at its
// offset, exactly converted, and the padding holds zeros, from row-major,
// column-major and arbitrarily strided B, with partial edge blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <octet/core/bfloat16.h>
#include <octet/core/convert.h>
#include <octet/core/convert_testing.h>
#include <octet/core/float8.h>
#include <octet/ops/cpu/gemm_pack.h>
#include "tests/test_util.h"

namespace octet::cpu {
namespace {

using ::octet::testing::MessageOf;

// K x N, padded to whole blocks of kb x nb, blocks k-inner as oneDNN lays
// them out (stride_kb = kb * nb, stride_nb = k_padded * nb).
PackedBLayout LayoutFor(int64_t K, int64_t N, int64_t kb, int64_t nb) {
  const int64_t kp = (K + kb - 1) / kb * kb, np = (N + nb - 1) / nb * nb;
  return {.k_padded = kp, .k_block = kb, .n_padded = np, .n_block = nb, .stride_kb = kb * nb, .stride_nb = kp * nb};
}

int64_t VnniOffset(const PackedBLayout& l, int64_t k, int64_t n) {
  const int64_t kb = l.k_block, nb = l.n_block;
  return (k / kb) * l.stride_kb + (n / nb) * l.stride_nb + ((k % kb) / 2) * 2 * nb + (n % nb) * 2 + (k % 2);
}

int64_t F32Offset(const PackedBLayout& l, int64_t k, int64_t n) {
  const int64_t kb = l.k_block, nb = l.n_block;
  return (k / kb) * l.stride_kb + (n / nb) * l.stride_nb + (k % kb) * nb + n % nb;
}

// B's storage: element (k, n) at k * sk + n * sn of a buffer of `span` elements.
struct Strides {
  const char* name;
  int64_t sk, sn;
};
std::vector<Strides> StridesFor(int64_t K, int64_t N) {
  return {{"row-major", N, 1}, {"col-major", 1, K}, {"strided", 3 * N, 2}};
}
int64_t Span(int64_t K, int64_t N, const Strides& s) { return (K - 1) * s.sk + (N - 1) * s.sn + 1; }

// Element values: distinct, finite, exact in every source dtype.
double Value(int64_t k, int64_t n) { return static_cast<double>((k * 7 + n * 3) % 29 - 14) * 0.25; }

class PackShapes : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(PackShapes, VnniFromBf16AndFp8) {
  const auto [K, N] = GetParam();
  for (const Strides& st : StridesFor(K, N)) {
    for (DType dtype : {DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      const int64_t esz = SizeOf(dtype);
      std::vector<uint8_t> src(static_cast<size_t>(Span(K, N, st) * esz), 0xAB);
      std::vector<uint16_t> expected_bits(static_cast<size_t>(K * N));
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) {
          const float v = static_cast<float>(Value(k, n));
          uint8_t* p = src.data() + (k * st.sk + n * st.sn) * esz;
          float exact;  // the value B holds, as a float
          if (dtype == DType::kBFloat16) {
            const uint16_t b = FloatToBf16Bits(v);
            std::memcpy(p, &b, 2);
            exact = Bf16BitsToFloat(b);
          } else if (dtype == DType::kFloat8E4M3) {
            const float8_e4m3 f(v);
            std::memcpy(p, &f, 1);
            exact = static_cast<float>(f);
          } else {
            const float8_e5m2 f(v);
            std::memcpy(p, &f, 1);
            exact = static_cast<float>(f);
          }
          expected_bits[k * N + n] = FloatToBf16Bits(exact);  // FP8 values are exact in bf16
        }
      }
      for (int64_t nb : {16, 64}) {
        const PackedBLayout l = LayoutFor(K, N, 32, nb);
        std::vector<uint16_t> dst(static_cast<size_t>(PackedElements(l)), 0xFFFF);
        PackVnniB(src.data(), dtype, K, N, st.sk, st.sn, l, dst.data());
        std::vector<bool> seen(dst.size(), false);
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n) {
            const int64_t o = VnniOffset(l, k, n);
            ASSERT_EQ(dst[o], expected_bits[k * N + n]) << st.name << " " << Name(dtype) << " nb " << nb << " (" << k
                                                        << ", " << n << ")";
            seen[o] = true;
          }
        for (int64_t k = 0; k < l.k_padded; ++k)
          for (int64_t n = 0; n < l.n_padded; ++n)
            if (k >= K || n >= N) ASSERT_EQ(dst[VnniOffset(l, k, n)], 0) << "padding (" << k << ", " << n << ")";
      }
    }
  }
}

// PackF32B of src, (K, N) elements of `dtype` with strides st, for 8- and
// 16-row K blocks: element (k, n) lands at its offset with the bits of
// want(k, n) (a NaN want only as some NaN: DequantizeRow leaves FP8 NaN
// payloads unspecified), and the padding is +0.
template <typename Want>
void ExpectF32Packing(const std::vector<uint8_t>& src, DType dtype, int64_t K, int64_t N, const Strides& st,
                      Want want_at) {
  for (int64_t kb : {8, 16}) {
    const PackedBLayout l = LayoutFor(K, N, kb, 64);
    std::vector<float> dst(static_cast<size_t>(PackedElements(l)), -1.0f);
    PackF32B(src.data(), dtype, K, N, st.sk, st.sn, l, dst.data());
    for (int64_t k = 0; k < l.k_padded; ++k)
      for (int64_t n = 0; n < l.n_padded; ++n) {
        const float want = k < K && n < N ? want_at(k, n) : 0.0f;
        const float got = dst[F32Offset(l, k, n)];
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << st.name << " " << Name(dtype) << " (" << k << ", " << n << ")";
          continue;
        }
        uint32_t got_bits, want_bits;
        std::memcpy(&got_bits, &got, 4);
        std::memcpy(&want_bits, &want, 4);
        ASSERT_EQ(got_bits, want_bits) << st.name << " " << Name(dtype) << " kb " << kb << " (" << k << ", " << n
                                       << ")";
      }
  }
}

TEST_P(PackShapes, F32FromF32AndBf16) {
  const auto [K, N] = GetParam();
  for (const Strides& st : StridesFor(K, N)) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      const int64_t esz = SizeOf(dtype);
      std::vector<uint8_t> src(static_cast<size_t>(Span(K, N, st) * esz), 0xAB);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) {
          const float v = static_cast<float>(Value(k, n)) + (dtype == DType::kFloat32 ? 1e-6f : 0.0f);
          uint8_t* p = src.data() + (k * st.sk + n * st.sn) * esz;
          if (dtype == DType::kFloat32) {
            std::memcpy(p, &v, 4);
          } else {
            const uint16_t b = FloatToBf16Bits(v);
            std::memcpy(p, &b, 2);
          }
        }
      ASSERT_NO_FATAL_FAILURE(ExpectF32Packing(src, dtype, K, N, st, [&](int64_t k, int64_t n) {
        const uint8_t* p = src.data() + (k * st.sk + n * st.sn) * esz;
        float want;
        if (dtype == DType::kFloat32) {
          std::memcpy(&want, p, 4);
        } else {
          uint16_t b;
          std::memcpy(&b, p, 2);
          want = Bf16BitsToFloat(b);
        }
        return want;
      }));
    }
  }
}

// FP8 codes widened while packing (the FP32-FMA path's B operands): every one
// of the 256 codes of both formats, NaNs and subnormals included, lands at its
// offset as the exact decoded value.
TEST_P(PackShapes, F32FromFp8Codes) {
  const auto [K, N] = GetParam();
  for (const Strides& st : StridesFor(K, N)) {
    for (DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      std::vector<uint8_t> src(static_cast<size_t>(Span(K, N, st)), 0xAB);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) src[k * st.sk + n * st.sn] = static_cast<uint8_t>((k * 37 + n * 11) % 256);
      ASSERT_NO_FATAL_FAILURE(ExpectF32Packing(src, dtype, K, N, st, [&](int64_t k, int64_t n) {
        const uint8_t code = src[k * st.sk + n * st.sn];
        return dtype == DType::kFloat8E4M3 ? E4M3BitsToFloat(code) : E5M2BitsToFloat(code);
      }));
    }
  }
}

// An f32 value for (k, n) that rounding to bf16 changes: specials (NaN,
// +-inf, a value past the largest bf16, an f32 subnormal), exact ties
// between two bf16 values, and values between ties.
float NarrowingValue(int64_t k, int64_t n) {
  switch ((k * 31 + n * 17) % 10) {
    case 0: return std::nanf("");
    case 1: return INFINITY;
    case 2: return -3.4e38f;                  // rounds to -inf (bf16 max 3.3895e38)
    case 3: return 1e-40f;                    // f32 subnormal
    case 4: return 1.0f + 0x1p-8f;            // tie: to even, 1.0
    case 5: return -(1.0f + 3 * 0x1p-8f);     // tie: to even, -(1 + 2^-6)
    default: return static_cast<float>(Value(k, n)) * (1.0f + 0x1p-10f * static_cast<float>(n % 7 + 1));
  }
}

// The two closed-form ties NarrowingValue relies on, under the reference
// rounding both packers must reproduce.
TEST(GemmPack, ReferenceRoundingTiesToEven) {
  EXPECT_EQ(FloatToBf16Bits(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(FloatToBf16Bits(-(1.0f + 3 * 0x1p-8f)), 0xBF82);
  EXPECT_EQ(FloatToBf16Bits(-3.4e38f), 0xFF80);
}

// The converter ISAs an f32 B is rounded with while it is packed: AVX2
// integer arithmetic, and AVX-512 BF16's conversions where this CPU has them
// (NOTE [native narrowing in packing]). Each is forced in turn with a
// ScopedConverterIsa.
std::vector<std::pair<const char*, internal::ConverterIsa>> NarrowingIsas() {
  const internal::ConverterIsa detected = internal::DetectedConverterIsa();
  std::vector<std::pair<const char*, internal::ConverterIsa>> isas = {{"avx2", {.avx2 = detected.avx2}}};
  if (detected.avx512 && detected.bf16) isas.push_back({"avx512-bf16", detected});
  return isas;
}

// NOTE [narrowed B]: an f32 B packed into the bf16 VNNI layout holds
// FloatToBf16Bits of each element, at its offset, from every layout, on
// every NarrowingIsas path.
TEST_P(PackShapes, VnniFromF32Rounds) {
  const auto [K, N] = GetParam();
  for (const auto& [isa_name, isa] : NarrowingIsas()) {
    const internal::ScopedConverterIsa forced(isa);
    for (const Strides& st : StridesFor(K, N)) {
      std::vector<float> src(static_cast<size_t>(Span(K, N, st)), 7.0f);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) src[k * st.sk + n * st.sn] = NarrowingValue(k, n);
      for (int64_t nb : {16, 64}) {
        const PackedBLayout l = LayoutFor(K, N, 32, nb);
        std::vector<uint16_t> dst(static_cast<size_t>(PackedElements(l)), 0xFFFF);
        PackVnniB(src.data(), DType::kFloat32, K, N, st.sk, st.sn, l, dst.data());
        for (int64_t k = 0; k < l.k_padded; ++k)
          for (int64_t n = 0; n < l.n_padded; ++n) {
            const uint16_t want = k < K && n < N ? FloatToBf16Bits(NarrowingValue(k, n)) : 0;
            ASSERT_EQ(dst[VnniOffset(l, k, n)], want)
                << isa_name << ", " << st.name << " nb " << nb << " (" << k << ", " << n << ")";
          }
      }
    }
  }
}

// NOTE [fp8 vnni pairs]: whole 32 x 64 blocks of a row-major FP8 B are
// converted and interleaved in one pass where the converters have AVX-512
// VBMI. Every one of the 256 codes (NaN, -0 and subnormals among them) lands
// at its VNNI offset as the bf16 bits of its value (NaN: the canonical
// 0x7FFF), for both formats, with VBMI and without.
TEST(GemmPack, VnniFromEveryFp8CodeInWholeBlocks) {
  const int64_t K = 64, N = 128;  // 2 x 2 whole blocks
  const internal::ConverterIsa detected = internal::DetectedConverterIsa();
  std::vector<std::pair<const char*, internal::ConverterIsa>> isas = {
      {"without vbmi", {.avx512 = detected.avx512, .bf16 = detected.bf16, .avx2 = detected.avx2}}};
  if (detected.avx512 && detected.vbmi) isas.push_back({"vbmi", detected});
  std::vector<uint8_t> src(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) src[k * N + n] = static_cast<uint8_t>((37 * k + 11 * n) & 0xFF);
  const PackedBLayout l = LayoutFor(K, N, 32, 64);
  for (const auto& [isa_name, isa] : isas) {
    const internal::ScopedConverterIsa forced(isa);
    for (DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      std::vector<uint16_t> dst(static_cast<size_t>(PackedElements(l)), 0xFFFF);
      PackVnniB(src.data(), dtype, K, N, N, 1, l, dst.data());
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) {
          const uint8_t code = src[k * N + n];
          const float v = dtype == DType::kFloat8E4M3 ? static_cast<float>(float8_e4m3::FromBits(code))
                                                      : static_cast<float>(float8_e5m2::FromBits(code));
          ASSERT_EQ(dst[VnniOffset(l, k, n)], FloatToBf16Bits(v))
              << isa_name << " " << Name(dtype) << " code 0x" << std::hex << int{code} << std::dec << " (" << k
              << ", " << n << ")";
        }
    }
  }
}

// The FP32-FMA path's form: PackF32B with round_to_bf16 holds the widened
// bf16 value of each f32 element, on every NarrowingIsas path; bf16 sources
// are unchanged by the flag.
TEST_P(PackShapes, F32RoundedFromF32) {
  const auto [K, N] = GetParam();
  for (const auto& [isa_name, isa] : NarrowingIsas()) {
    const internal::ScopedConverterIsa forced(isa);
    for (const Strides& st : StridesFor(K, N)) {
      std::vector<uint8_t> src(static_cast<size_t>(Span(K, N, st) * 4), 0xAB);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) {
          const float v = NarrowingValue(k, n);
          std::memcpy(src.data() + (k * st.sk + n * st.sn) * 4, &v, 4);
        }
      for (int64_t kb : {8, 16}) {
        const PackedBLayout l = LayoutFor(K, N, kb, 64);
        std::vector<float> dst(static_cast<size_t>(PackedElements(l)), -1.0f);
        PackF32B(src.data(), DType::kFloat32, K, N, st.sk, st.sn, l, dst.data(), /*round_to_bf16=*/true);
        for (int64_t k = 0; k < l.k_padded; ++k)
          for (int64_t n = 0; n < l.n_padded; ++n) {
            const float want = k < K && n < N ? Bf16BitsToFloat(FloatToBf16Bits(NarrowingValue(k, n))) : 0.0f;
            uint32_t got_bits, want_bits;
            std::memcpy(&got_bits, &dst[F32Offset(l, k, n)], 4);
            std::memcpy(&want_bits, &want, 4);
            ASSERT_EQ(got_bits, want_bits)
                << isa_name << ", " << st.name << " kb " << kb << " (" << k << ", " << n << ")";
          }
      }
    }
  }
}

// Whole blocks only, edge blocks in K, in N and in both, and a B smaller than
// one block.
INSTANTIATE_TEST_SUITE_P(Shapes, PackShapes,
                         ::testing::Values(std::pair<int64_t, int64_t>{64, 128}, std::pair<int64_t, int64_t>{70, 128},
                                           std::pair<int64_t, int64_t>{64, 90}, std::pair<int64_t, int64_t>{45, 77},
                                           std::pair<int64_t, int64_t>{5, 3}),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "x" + std::to_string(info.param.second);
                         });

TEST(GemmPack, RejectsLayoutsItCannotWrite) {
  std::vector<float> src(64 * 64), dst(64 * 64);
  PackedBLayout bad = LayoutFor(64, 64, 16, 64);
  bad.n_block = 128;  // wider than any oneDNN layout it knows
  EXPECT_NE(MessageOf<Error>([&] { PackF32B(src.data(), DType::kFloat32, 64, 64, 64, 1, bad, dst.data()); })
                .find("PackF32B: unsupported layout (blocks 16 x 128"),
            std::string::npos);
  EXPECT_NE(MessageOf<Error>([&] {
              PackF32B(src.data(), DType::kFloat16, 64, 64, 64, 1, LayoutFor(64, 64, 16, 64), dst.data());
            }).find("PackF32B: B must be float32, bfloat16 or FP8, got float16"),
            std::string::npos);
  PackedBLayout odd = LayoutFor(64, 64, 16, 64);
  odd.k_block = 15;
  odd.k_padded = 75;
  EXPECT_NE(MessageOf<Error>([&] {
              PackVnniB(src.data(), DType::kBFloat16, 64, 64, 64, 1, odd, reinterpret_cast<uint16_t*>(dst.data()));
            }).find("PackVnniB: unsupported layout"),
            std::string::npos);
  EXPECT_NE(MessageOf<Error>([&] {
              PackVnniB(src.data(), DType::kFloat16, 64, 64, 64, 1, LayoutFor(64, 64, 32, 64),
                        reinterpret_cast<uint16_t*>(dst.data()));
            }).find("PackVnniB: B must be bfloat16, float32 or FP8, got float16"),
            std::string::npos);
}

}  // namespace
}  // namespace octet::cpu
