// The CPU row helpers (ops/cpu/row_helpers.h) whose results callers depend
// on bit for bit: RowMax's choice among NaNs and signed zeros, over f32, f64
// and bf16 rows (a bf16 row is widened in registers: NOTE [max from the
// source row] in ops/cpu/row_helpers.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <octet/ops/cpu/row_helpers.h>

namespace octet {
namespace {

// RowMax's documented order in plain scalar code: lane l takes elements l,
// l + 16, ... with `v > m ? v : m`, every lane starting from p[0]; the lanes
// are combined lane 0 first with the same select, then the tail.
template <typename A>
A ReferenceRowMax(const std::vector<A>& p) {
  const int64_t n = static_cast<int64_t>(p.size()), lanes = cpu::kRowLanes;
  const int64_t full = n - n % lanes;
  std::vector<A> acc(lanes, p[0]);
  for (int64_t i = 0; i < full; ++i) acc[i % lanes] = p[i] > acc[i % lanes] ? p[i] : acc[i % lanes];
  A r = acc[0];
  for (int64_t l = 1; l < lanes; ++l) r = acc[l] > r ? acc[l] : r;
  for (int64_t i = full; i < n; ++i) r = p[i] > r ? p[i] : r;
  return r;
}

template <typename A>
uint64_t Bits(A x) {
  if constexpr (sizeof(A) == 4) {
    return std::bit_cast<uint32_t>(x);
  } else {
    return std::bit_cast<uint64_t>(x);
  }
}

// NOTE [MaxStep]: the select is done by maxss / maxsd on x86; it must keep
// the scalar select's answer where the two operands are unordered or equal.
TEST(RowHelpers, MaxStepIsTheScalarSelect) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cpu::MaxStep(1.0f, 2.0f), 2.0f);
  EXPECT_EQ(cpu::MaxStep(2.0f, 1.0f), 2.0f);
  EXPECT_EQ(cpu::MaxStep(3.0f, nan), 3.0f);  // a NaN candidate is skipped
  EXPECT_TRUE(std::isnan(cpu::MaxStep(nan, 3.0f)));  // a NaN running max stays
  EXPECT_TRUE(std::signbit(cpu::MaxStep(-0.0f, 0.0f)));  // equal: the running max stays
  EXPECT_FALSE(std::signbit(cpu::MaxStep(0.0f, -0.0f)));
  EXPECT_EQ(cpu::MaxStep(-1.0, 5.0), 5.0);
  EXPECT_EQ(cpu::MaxStep(7.0, std::numeric_limits<double>::quiet_NaN()), 7.0);
  EXPECT_TRUE(std::signbit(cpu::MaxStep(-0.0, 0.0)));
}

// RowMax against its documented order, for rows with NaNs and signed zeros
// at every lane, in the vector part and in the tail.
TEST(RowHelpers, RowMaxKeepsTheDocumentedChoiceAmongNanAndZeros) {
  for (int64_t n : {1, 5, 16, 37, 256, 777}) {
    for (int64_t special = 0; special < n; special += std::max<int64_t>(1, n / 23)) {
      for (int kind = 0; kind < 3; ++kind) {
        std::vector<float> f(n), zeros(n);
        std::vector<double> d(n);
        for (int64_t i = 0; i < n; ++i) {
          f[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) - 2.0);
          d[i] = f[i];
          zeros[i] = (i * 7) % 3 == 0 ? -0.0f : 0.0f;
        }
        const float v = kind == 0 ? std::numeric_limits<float>::quiet_NaN() : kind == 1 ? 5.0f : -0.0f;
        f[special] = v;
        d[special] = v;
        zeros[special] = kind == 2 ? 0.0f : -0.0f;
        EXPECT_EQ(Bits(cpu::RowMax(f.data(), n)), Bits(ReferenceRowMax(f))) << n << " " << special << " " << kind;
        EXPECT_EQ(Bits(cpu::RowMax(d.data(), n)), Bits(ReferenceRowMax(d))) << n << " " << special << " " << kind;
        EXPECT_EQ(Bits(cpu::RowMax(zeros.data(), n)), Bits(ReferenceRowMax(zeros))) << n << " " << special;
        // bf16 rows: the max of the widened values, the same choices.
        std::vector<bfloat16> fb(n), zb(n);
        std::vector<float> fw(n), zw(n);
        for (int64_t i = 0; i < n; ++i) {
          fb[i] = bfloat16(f[i]);
          zb[i] = bfloat16(zeros[i]);
          fw[i] = static_cast<float>(fb[i]);
          zw[i] = static_cast<float>(zb[i]);
        }
        EXPECT_EQ(Bits(cpu::RowMax(fb.data(), n)), Bits(ReferenceRowMax(fw))) << n << " " << special << " " << kind;
        EXPECT_EQ(Bits(cpu::RowMax(zb.data(), n)), Bits(ReferenceRowMax(zw))) << n << " " << special;
      }
    }
  }
}

}  // namespace
}  // namespace octet
