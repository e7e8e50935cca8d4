// The CPU backend under Matmul, Linear and ScaledMatmul: which B operands it
// packs, the opt-in sgemm path, its primitive cache (hits, eviction,
// concurrent use), the buffers it takes from octet's CPU cache and gives back,
// the converted FP8 operand kept for one reuse, and octet's AMX GEMM against
// oneDNN; every result still held to the float64 references of
// matmul_reference.h.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <octet/core/allocator.h>
#include <octet/core/caching_allocator.h>
#include <octet/ops/cast.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cpu_gemm_path_testing.h>
#include <octet/ops/cpu/amx_gemm.h>
#include <octet/ops/cpu/dnnl_gemm.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/matmul.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/ops/matmul_testing.h>
#include "tests/ops/matmul_reference.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::Matches;
using ::octet::testing::RandomTensor;
using ::octet::testing::Ref;
using ::octet::testing::RefMatmul;
using ::octet::testing::TolFor;

// NOTE [small f32 B stays plain] (ops/cpu/matmul_operands.cc): with 256 rows or
// more, an f32 GEMM packs its B only when B has more than 2^18 elements;
// either way the product is right. A bf16 B is packed at any of these sizes.
// Where oneDNN's f32 matmul reads a plain B (AVX2-only CPUs: NOTE [plain
// weights] in ops/cpu/dnnl_primitive.cc) nothing is packed at any size.
TEST(Matmul, SmallF32WeightsStayPlainLargeOnesArePacked) {
  cpu::SetF32SgemmForTesting(0);  // the default path, whatever OCTET_CPU_F32_GEMM says
  const bool blocked = cpu::DnnlTakesBlockedF32B();
  const int64_t M = 300;
  struct Case {
    int64_t K, N;
    bool packed;
  };
  for (const Case& c : {Case{256, 1024, false}, Case{512, 512, false}, Case{513, 512, true}, Case{600, 700, true}}) {
    const Tensor a = RandomTensor({M, c.K}, 40 + c.K, DType::kFloat32);
    const Tensor b = RandomTensor({c.K, c.N}, 41 + c.N, DType::kFloat32);
    const Tensor w = RandomTensor({c.N, c.K}, 42 + c.N, DType::kFloat32);
    const int64_t before = cpu::GetMatmulCacheStats().packed_b;
    const Tensor y = Matmul(a, b);
    const Tensor yl = Linear(a, w);  // B = wᵀ, column-major
    const int64_t packs = cpu::GetMatmulCacheStats().packed_b - before;
    EXPECT_EQ(packs, c.packed && blocked ? 2 : 0) << "K " << c.K << " N " << c.N;
    EXPECT_TRUE(Matches(y, RefMatmul(a, b), TolFor(DType::kFloat32, c.K))) << "K " << c.K << " N " << c.N;
    EXPECT_TRUE(Matches(yl, RefMatmul(a, w.T().Contiguous()), TolFor(DType::kFloat32, c.K)))
        << "K " << c.K << " N " << c.N;
  }
  cpu::SetF32SgemmForTesting(-1);
}

// NOTE [f32 GEMMs on oneDNN's sgemm]: with the opt-in sgemm path on, the
// GEMMs whose B octet would pack run on dnnl_sgemm instead (nothing packed;
// with it off the same calls pack where oneDNN's matmul takes a blocked B),
// in the orientations a Linear's forward and dX use, with and without a
// bias, and agree with float64 references.
TEST(Matmul, F32SgemmPathMatchesTheReferences) {
  const int64_t M = 256;  // rows enough for B to be worth packing (kPackMinRows)
  const int64_t matmul_packs = cpu::DnnlTakesBlockedF32B() ? 3 : 0;
  for (const auto& [K, N] : {std::pair<int64_t, int64_t>{600, 700}, {768, 512}}) {
    const std::string what = "K " + std::to_string(K) + " N " + std::to_string(N);
    const Tensor x = RandomTensor({M, K}, 50 + K, DType::kFloat32);
    const Tensor w = RandomTensor({N, K}, 51 + N, DType::kFloat32);
    const Tensor bias = RandomTensor({N}, 52, DType::kFloat32);
    const Tensor b = RandomTensor({K, N}, 53 + K, DType::kFloat32);
    const Tensor dy = RandomTensor({M, N}, 54, DType::kFloat32);
    for (const int sgemm : {1, 0}) {
      cpu::SetF32SgemmForTesting(sgemm);
      const int64_t before = cpu::GetMatmulCacheStats().packed_b;
      const Tensor y = Matmul(x, b);           // B row-major
      const Tensor yl = Linear(x, w, bias);    // B = wᵀ, column-major, and a bias
      const Tensor dx = Matmul(dy, w);         // a Linear's dX: B = w, row-major
      const int64_t packs = cpu::GetMatmulCacheStats().packed_b - before;
      EXPECT_EQ(packs, sgemm == 1 ? 0 : matmul_packs) << what << ", sgemm " << sgemm;
      EXPECT_TRUE(Matches(y, RefMatmul(x, b), TolFor(DType::kFloat32, K))) << what << ", sgemm " << sgemm;
      EXPECT_TRUE(Matches(yl, RefMatmul(x, w.T().Contiguous(), bias), TolFor(DType::kFloat32, K)))
          << what << ", sgemm " << sgemm;
      EXPECT_TRUE(Matches(dx, RefMatmul(dy, w), TolFor(DType::kFloat32, N))) << what << ", sgemm " << sgemm;
    }
  }
  cpu::SetF32SgemmForTesting(-1);
}

TEST(Matmul, ConcurrentCallsFromSeveralThreads) {
  // The primitive cache and the per-thread buffers under concurrent use.
  const Tensor a = RandomTensor({40, 30}, 80, DType::kFloat32), b = RandomTensor({30, 20}, 81, DType::kFloat32);
  const Tensor big_a = RandomTensor({300, 30}, 82, DType::kFloat32);
  const Ref small_ref = RefMatmul(a, b), big_ref = RefMatmul(big_a, b);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const bool big = (i + t) % 2 == 0;
        const Tensor y = Matmul(big ? big_a : a, b);
        if (!Matches(y, big ? big_ref : small_ref, TolFor(DType::kFloat32, 30))) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Matmul, PrimitivesAreCached) {
  const Tensor a = RandomTensor({31, 17}, 1, DType::kFloat32), b = RandomTensor({17, 13}, 2, DType::kFloat32);
  Matmul(a, b);
  const cpu::MatmulCacheStats before = cpu::GetMatmulCacheStats();
  for (int i = 0; i < 3; ++i) Matmul(a, b);
  const cpu::MatmulCacheStats after = cpu::GetMatmulCacheStats();
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.hits, before.hits + 3);
}

// NOTE [oneDNN primitive cache] (ops/cpu/dnnl_primitive.cc): a primitive runs with the thread count it
// was made with, so each count gets its own; the same count finds it again.
TEST(Matmul, EachThreadCountGetsAPrimitiveOfItsOwn) {
  const Tensor a = RandomTensor({64, 48}, 3, DType::kFloat32), b = RandomTensor({48, 40}, 4, DType::kFloat32);
  const Ref ref = RefMatmul(a, b);
  cpu::ClearMatmulCacheForTesting();
  {
    const cpu::ScopedOmpThreads one(1);
    EXPECT_TRUE(Matches(Matmul(a, b), ref, TolFor(DType::kFloat32, 48)));
  }
  {
    const cpu::ScopedOmpThreads two(2);
    EXPECT_TRUE(Matches(Matmul(a, b), ref, TolFor(DType::kFloat32, 48)));
  }
  cpu::MatmulCacheStats s = cpu::GetMatmulCacheStats();
  EXPECT_EQ(s.misses, 2) << "a primitive made at 1 thread must not serve 2";
  EXPECT_EQ(s.hits, 0);
  {
    const cpu::ScopedOmpThreads one(1);
    Matmul(a, b);
  }
  s = cpu::GetMatmulCacheStats();
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.hits, 1) << "the 1-thread primitive is found again";
}

// The cache keeps the 256 most recently used primitives (NOTE [oneDNN
// primitive cache] in ops/cpu/dnnl_primitive.cc): a program that runs more shapes
// than that evicts the least recently used, and a shape evicted is made again,
// with the same results.
TEST(Matmul, PrimitiveCacheEvictsTheLeastRecentlyUsedBeyondItsCapacity) {
  constexpr int64_t kCapacity = 256, kShapes = 300;
  cpu::ClearMatmulCacheForTesting();
  const Tensor b = RandomTensor({8, 5}, 3, DType::kFloat32);
  auto a_of = [](int64_t m) { return RandomTensor({m, 8}, 1000 + m, DType::kFloat32); };
  const Tensor first = Matmul(a_of(1), b);
  for (int64_t m = 2; m <= kShapes; ++m) Matmul(a_of(m), b);
  cpu::MatmulCacheStats st = cpu::GetMatmulCacheStats();
  EXPECT_EQ(st.misses, kShapes);  // one primitive per shape
  EXPECT_EQ(st.size, kCapacity);
  // The most recent shape is still held; the first was evicted and is made again.
  Matmul(a_of(kShapes), b);
  EXPECT_EQ(cpu::GetMatmulCacheStats().hits, st.hits + 1);
  const Tensor again = Matmul(a_of(1), b);
  st = cpu::GetMatmulCacheStats();
  EXPECT_EQ(st.misses, kShapes + 1);
  EXPECT_EQ(st.size, kCapacity);
  EXPECT_EQ(::octet::testing::Bytes(again), ::octet::testing::Bytes(first));
  EXPECT_TRUE(Matches(again, RefMatmul(a_of(1), b), TolFor(DType::kFloat32, 8)));
}

// NOTE [transient gemm buffers] (ops/cpu/dnnl_gemm.cc): the packed B of a
// large f32 GEMM comes from octet's CPU cache and goes back to it when the
// call returns, leaving only the output allocated (and where oneDNN reads a
// plain B, nothing is packed and only the output is left either).
TEST(Matmul, CpuGemmBuffersAreTakenFromTheCacheAndGivenBack) {
  if (!GetCpuMemoryStats().caching_enabled) GTEST_SKIP() << "OCTET_CPU_CACHING=0: nothing is cached";
  cpu::SetF32SgemmForTesting(0);  // the default path, whatever OCTET_CPU_F32_GEMM says
  // 512 rows: B (640, 512) is packed first (WorthPacking; NOTE [small f32 B
  // stays plain]); 1.25 MiB of it.
  const Tensor a = RandomTensor({512, 640}, 1, DType::kFloat32), b = RandomTensor({640, 512}, 2, DType::kFloat32);
  Matmul(a, b);  // creates the primitive
  ResetCpuPeakMemoryStats();
  const CpuMemoryStats before = GetCpuMemoryStats();
  const Tensor c = Matmul(a, b);
  const CpuMemoryStats after = GetCpuMemoryStats();
  const size_t out_bytes = CachingAllocator::RoundSize(512 * 512 * sizeof(float));
  EXPECT_EQ(after.cached_allocated_bytes, before.cached_allocated_bytes + out_bytes);
  if (cpu::DnnlTakesBlockedF32B())
    EXPECT_GE(after.peak_cached_allocated_bytes,
              before.cached_allocated_bytes + out_bytes + 640 * 512 * sizeof(float));
  cpu::SetF32SgemmForTesting(-1);
}

// NOTE [converted A reuse] in ops/cpu/matmul_operands.h: an FP8 A is converted
// once for two GEMMs in a row (a Linear's dX and dW); the converted copy
// stays in the CPU cache after the first and goes back after the second.
TEST(Matmul, ConvertedFp8OperandIsKeptForOneReuseThenGivenBack) {
  if (!GetCpuMemoryStats().caching_enabled) GTEST_SKIP() << "OCTET_CPU_CACHING=0: nothing is cached";
  const Tensor a = Quantize(RandomTensor({512, 256}, 1, DType::kFloat32), DType::kFloat8E4M3, 8.0f);
  const Tensor b = Quantize(RandomTensor({256, 512}, 2, DType::kFloat32), DType::kFloat8E4M3, 8.0f);
  const Tensor c = Quantize(RandomTensor({256, 512}, 3, DType::kFloat32), DType::kFloat8E4M3, 8.0f);
  ScaledMatmul(a, b, DType::kFloat32);  // primitives created
  ScaledMatmul(a, c, DType::kFloat32);  // the pair completes: nothing kept
  // Widened to f32 on the FP32-FMA path, to bf16 on the BF16-dot one.
  const size_t converted = 512 * 256 * (ActiveCpuGemmPath() == CpuGemmPath::kFp32Fma ? 4 : 2);
  const size_t out_bytes = CachingAllocator::RoundSize(512 * 512 * sizeof(float));
  const size_t before = GetCpuMemoryStats().cached_allocated_bytes;
  const Tensor first = ScaledMatmul(a, b, DType::kFloat32);
  EXPECT_EQ(GetCpuMemoryStats().cached_allocated_bytes, before + out_bytes + converted);
  const Tensor second = ScaledMatmul(a, c, DType::kFloat32);  // the same A: no new conversion
  EXPECT_EQ(GetCpuMemoryStats().cached_allocated_bytes, before + 2 * out_bytes);
  // Read from the kept copy, the result is what a fresh conversion gives.
  EXPECT_EQ(second.ToDoubles(), ScaledMatmul(a.Clone(), c, DType::kFloat32).ToDoubles());
}

// NOTE [amx gemm]: with octet's AMX GEMM on (where the CPU has it) the
// public ops give oneDNN's results up to the order of the f32 sums, for
// bf16 Linears (bias as the matmul's argument) and FP8 GEMMs (scale and
// bias post-ops), batched inputs, bf16 and f32 outputs, and shapes on both
// sides of its limits (K not a multiple of 32, N > 3K, and fewer than the
// 256 rows for which B is packed at all, WorthPacking).
TEST(Matmul, AmxGemmAgreesWithOneDnnThroughTheOps) {
  if (!cpu::AmxGemmEnabled()) GTEST_SKIP() << "no AMX GEMM on this CPU";
  // The BF16 path, whatever OCTET_CPU_GEMM says (the FP32-FMA one widens
  // into oneDNN's f32 GEMMs and never reaches the AMX GEMM).
  internal::SetCpuGemmPathForTesting(CpuGemmPath::kBf16Dot);
  struct Shape3 {
    Shape x;
    int64_t out;
    bool amx;  // whether octet's AMX GEMM takes it
  };
  const std::vector<Shape3> shapes = {{{300, 64}, 96, true},  {{2, 150, 128}, 64, true}, {{129, 96}, 40, false},
                                      {{300, 48}, 64, false}, {{260, 32}, 128, false},  {{520, 256}, 256, true}};
  uint64_t seed = 70;
  for (const Shape3& sh : shapes) {
    const int64_t k = sh.x.back();
    const Tensor x = RandomTensor(sh.x, seed++, DType::kBFloat16);
    const Tensor w = RandomTensor({sh.out, k}, seed++, DType::kBFloat16);
    const Tensor bias = RandomTensor({sh.out}, seed++, DType::kBFloat16);
    const Tensor xq = Quantize(RandomTensor(sh.x, seed++, DType::kFloat32), DType::kFloat8E4M3, 8.0f);
    const Tensor wq = Quantize(RandomTensor({k, sh.out}, seed++, DType::kFloat32), DType::kFloat8E4M3, 8.0f);
    const Tensor fbias = RandomTensor({sh.out}, seed++, DType::kFloat32);
    auto both = [&](const std::function<Tensor()>& op) {
      cpu::SetAmxGemmForTesting(1);
      const int64_t before = cpu::GetMatmulCacheStats().amx_gemms;
      const std::vector<double> amx = op().ToDoubles();
      const int64_t ran = cpu::GetMatmulCacheStats().amx_gemms - before;
      cpu::SetAmxGemmForTesting(0);
      const std::vector<double> dnnl = op().ToDoubles();
      cpu::SetAmxGemmForTesting(-1);
      EXPECT_EQ(ran > 0, sh.amx) << ShapeStr(sh.x) << " x " << sh.out;
      ASSERT_EQ(amx.size(), dnnl.size());
      for (size_t i = 0; i < amx.size(); ++i)
        ASSERT_NEAR(amx[i], dnnl[i], std::fabs(dnnl[i]) / 64 + 0.05)
            << ShapeStr(sh.x) << " x " << sh.out << " at " << i;
    };
    SCOPED_TRACE(ShapeStr(sh.x) + " x " + std::to_string(sh.out));
    both([&] { return Linear(x, w, bias); });
    both([&] { return ScaledMatmul(xq, wq, DType::kBFloat16, fbias); });
    both([&] { return ScaledMatmul(xq, wq, DType::kFloat32); });
  }
  internal::SetCpuGemmPathForTesting(std::nullopt);
}

}  // namespace
}  // namespace octet
