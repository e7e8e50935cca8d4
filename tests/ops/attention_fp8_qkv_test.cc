// The FP8 attention op (CausalAttentionQkvFp8): bit for bit the attention of
// the dequantized input, forward and backward, keeping only the codes, and
// errors that name the op and the dtype at fault.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <octet/core/convert_testing.h>
#include <octet/core/device_control.h>
#include <octet/ops/attention.h>
#include <octet/ops/cast.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;

// NOTE [fp8 attention inputs]: the FP8 op computes on Dequantize(qkv,
// compute) and is that composition bit for bit, forward and backward (the
// gradient reaching x through Quantize's straight-through backward), for
// both FP8 formats, every compute dtype (the CPU kernels read the codes
// through a table: NOTE [fp8 attention operands]), both work splits of
// each pass (many heads: per head; one head: per tile) and a scale that is
// not 1; and it keeps no compute-dtype copy of its input: the memory held
// after the forward grows by the output and the log-sum-exp only, as for
// the op whose saved input is the caller's own tensor.
TEST(Attention, Fp8QkvIsTheDequantizedQkvBitForBitAndKeepsOnlyTheCodes) {
  // The BF16 tiles look FP8 codes up through byte tables where the converters
  // have AVX-512 VBMI (NOTE [fp8 tile lookup]) and word tables otherwise:
  // both, where this CPU has VBMI.
  const internal::ConverterIsa detected = internal::DetectedConverterIsa();
  std::vector<internal::ConverterIsa> isas = {detected};
  if (detected.vbmi) isas.push_back({.avx512 = detected.avx512, .bf16 = detected.bf16, .avx2 = detected.avx2});
  for (const internal::ConverterIsa& isa : isas) {
    const internal::ScopedConverterIsa forced(isa);
    struct Case {
      int64_t b, t, h, d;
    };
    for (const Case c :
         {Case{2, 70, 3, 16}, Case{1, 1, 1, 1}, Case{3, 33, 2, 8}, Case{1, 130, 1, 8}, Case{1, 70, 2, 80},
          Case{1, 130, 2, 64}, Case{2, 69, 2, 32}}) {
      for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
        for (DType compute : {DType::kBFloat16, DType::kFloat32, DType::kFloat16, DType::kFloat64}) {
          const int64_t C = c.h * c.d;
          const std::string what = absl::StrCat(Name(fp8), " -> ", Name(compute), " B=", c.b, " T=", c.t,
                                                " H=", c.h, " D=", c.d, isa.vbmi ? " vbmi" : "");
          const Tensor x = RandomTensor({c.b, c.t, 3 * C}, 80, compute, -3.0, 3.0);
          const Tensor dout = RandomTensor({c.b, c.t, C}, 81, compute);
          constexpr float kScale = 37.0f;

          Tensor fp8_in = x.detach().requires_grad_();
          const Tensor codes = Quantize(fp8_in, fp8, kScale);
          const int64_t before = GetMemoryStats(kCPU).allocated_bytes;
          const Tensor got = CausalAttentionQkvFp8(codes, c.h, compute);
          const int64_t fp8_growth = GetMemoryStats(kCPU).allocated_bytes - before;
          ASSERT_EQ(got.dtype(), compute) << what;
          ASSERT_EQ(got.shape(), (Shape{c.b, c.t, C})) << what;
          got.Backward(dout);

          Tensor ref_in = x.detach().requires_grad_();
          const Tensor dequantized = Dequantize(Quantize(ref_in, fp8, kScale), compute);
          const int64_t ref_before = GetMemoryStats(kCPU).allocated_bytes;
          const Tensor ref = CausalAttentionQkv(dequantized, c.h);
          const int64_t ref_growth = GetMemoryStats(kCPU).allocated_bytes - ref_before;
          ref.Backward(dout);

          EXPECT_EQ(got.ToDoubles(), ref.ToDoubles()) << "out " << what;
          ASSERT_TRUE(fp8_in.grad().defined() && ref_in.grad().defined()) << what;
          EXPECT_EQ(fp8_in.grad().ToDoubles(), ref_in.grad().ToDoubles()) << "dx " << what;
          EXPECT_EQ(fp8_in.grad().dtype(), compute) << what;
          EXPECT_EQ(fp8_growth, ref_growth) << what;
        }
      }
    }
  }
}

TEST(Attention, Fp8QkvErrorsNameOpAndDtypes) {
  std::string e = ErrorOf([&] { CausalAttentionQkvFp8(Zeros({2, 5, 12}), 2, DType::kBFloat16); });
  EXPECT_NE(e.find("causal_attention_qkv_fp8"), std::string::npos) << e;
  EXPECT_NE(e.find("must be FP8"), std::string::npos) << e;
  EXPECT_NE(e.find("float32"), std::string::npos) << e;

  const Tensor codes = Quantize(Zeros({2, 5, 12}), DType::kFloat8E4M3, 1.0f);
  e = ErrorOf([&] { CausalAttentionQkvFp8(codes, 2, DType::kFloat8E5M2); });
  EXPECT_NE(e.find("causal_attention_qkv_fp8"), std::string::npos) << e;
  EXPECT_NE(e.find("compute dtype"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttentionQkvFp8(codes, 3, DType::kBFloat16); });
  EXPECT_NE(e.find("causal_attention_qkv_fp8"), std::string::npos) << e;
  EXPECT_NE(e.find("n_head (3)"), std::string::npos) << e;

  e = ErrorOf([&] { CausalAttentionQkvFp8(Tensor(), 2, DType::kBFloat16); });
  EXPECT_NE(e.find("causal_attention_qkv_fp8"), std::string::npos) << e;
}

}  // namespace
}  // namespace octet
