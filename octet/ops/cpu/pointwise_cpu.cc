// CPU kernels of the pointwise family: the functors of ops/functors.h run in
// the compute type (AccType) over StridedIter runs, with a contiguous fast path
// that the compiler vectorises.
#include <algorithm>
#include <type_traits>
#include <vector>

#include <octet/core/convert.h>
#include <octet/core/dtype_traits.h>
#include <octet/core/macros.h>
#include <octet/ops/cpu/gelu_tables.h>
#include <octet/ops/cpu/isa.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/cpu/pointwise_runs.h>
#include <octet/ops/cpu/row_helpers.h>
#include <octet/ops/pointwise_kernels.h>

namespace octet::cpu {
namespace {

// NOTE [narrow pointwise in chunks]: element by element, a bf16/f16 loop
// converts with scalar code (rounding, NaN checks) that keeps the compiler
// from vectorising the math: measured, GELU forward and backward on bf16 ran
// 1.2-1.4x slower than on f32 though they move half the bytes. Contiguous
// runs of bf16/f16 are therefore widened kChunk elements at a time by the
// vector row converters (core/convert.h), computed by the same f32 loop as
// f32 tensors, and narrowed back: the same results, element for element.
//
// bf16 inputs are widened inside the compute loop instead (RowIn in
// row_helpers.h: a bf16 value is the top half of its f32, so widening is a
// zero-extend and a shift that vectorises with the math): one pass over the
// chunk, then one narrowing pass by the vector converter. Measured on a Zen 5 (octet_pointwise_bench,
// 2 threads, 4096x3072, medians of 3), bf16 before -> after, against f32:
// add 2.69 -> 1.56 ms (f32 1.91), mul 2.39 -> 1.09 (1.92), mul_scalar
// 1.51 -> 0.81 (1.02), GELU 5.30 -> 5.16 (4.80), GELU backward 7.25 -> 6.25
// (5.95). GELU stays ~5 % behind f32: it is compute-bound and the narrowing
// pass is extra work. Rounding inside the loop instead (FloatToBf16Bits
// without its early return) measured slower: GELU 6.95 ms.
template <typename T>
inline constexpr bool kWidenInChunks = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;
inline constexpr int64_t kChunk = 512;

// NOTE [pointwise isa dispatch]: the library is compiled for a baseline
// (OCTET_CPU_ARCH: x86-64-v3, AVX2, wherever the CPU runs it), so the
// compiler vectorised these loops 8 floats wide even on CPUs whose registers
// hold 16. Compute-bound functors paid for it: GELU (an exp polynomial and a
// division per element) ran at 5 cycles an element, and its bf16 version was
// slower than its f32 one (the narrowing pass added to the same arithmetic),
// against issue 12's rule that bf16 never be slower. The contiguous runs
// (UnaryRun, BinaryRun, GeluFp8Block: the arithmetic, with bf16 widened inside
// it) are therefore compiled twice from always_inline bodies: for the baseline
// and, on x86-64, for AVX-512 with 512-bit vectors, chosen at run time as the
// converters are (ops/cpu/isa.h: OCTET_DISABLE_AVX512 selects the baseline).
// Both compile the same functor, so they compute the same formula; the
// strided loops and the dispatch stay baseline code.
// Pointwise.IsaBuildsGiveIdenticalBits checks that both give the same bits.
// Measured on a Zen 5 (octet_pointwise_bench, 2 threads, 4096x3072, medians
// of 5, baseline -> AVX-512 runs): GELU f32 4.65 -> 2.54 ms, bf16 5.00 ->
// 2.94; GELU backward f32 6.10 -> 3.30, bf16 6.28 -> 3.52; GeluFp8 5.41 ->
// 3.39. bf16 GELU stays 5-15 % behind f32 there (in noisy runs, from ahead to
// behind): f32 is now near the memory bandwidth, bf16 still pays its
// narrowing pass; rounding inside the loop (integer RNE and a pack) measured
// slower again (3.20 ms). A bf16 value has only 65536 codes, so a unary op
// could be a table lookup (exact by construction: the table is the kernel's
// own output); measured on the Zen 5 (4096 x 3072, 2 threads, 2026-11-24) it
// loses for inputs spread like activations (approximately normal: scalar
// lookups 5.3 ms, AVX-512 gathers 3.4 ms, against 3.05 ms computed) and wins
// only when few codes occur (2.1 ms); on a Xeon with AMX it wins by ~1.8x,
// so since 2026-11-29 each process times both (NOTE [bf16 gelu tables] in
// ops/cpu_gelu_path.h). A table restricted to
// the bf16 codes with exponents 2^-16..2^8 (24 KiB of f32, L1-resident;
// other codes computed) lost as well: 0.57 ns an element against 0.41
// computed (one thread, 64 Ki normal inputs, AVX-512 gathers, 2026-11-24).
// Narrowing 32 values per instruction (NOTE [bf16 narrowing width] in
// core/bf16_avx512_internal.h) took bf16 GELU to f32's time on two threads at the
// GPT MLP size and to 3-8 % behind it on one thread. Later sittings put it
// behind again, with warm inputs: 1.12-1.23x f32's time at (1024, 3072) and
// 1.13-1.17x at (2048, 512) (octet_pointwise_bench rows/cols arguments,
// 2026-11-28); inside a training step, whose inputs come cold from the GEMM
// before it, the two took the same time (docs/cpu-speed.md).
// o[0, n) = f(a[i], alpha): a contiguous run (NOTE [narrow pointwise in
// chunks]; NOTE [pointwise isa dispatch]).
template <typename T, typename F>
OCTET_INLINE void UnaryRunBody(const T* a, T* o, int64_t n, F f, AccType<T> alpha) {
  using A = AccType<T>;
  if constexpr (kWidenInChunks<T>) {
    alignas(64) A buf[kChunk], res[kChunk];
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t m = std::min(kChunk, n - c0);
      const RowIn<T> in(a + c0, m, buf);
      for (int64_t i = 0; i < m; ++i) res[i] = f(in[i], alpha);
      StoreRow(res, o + c0, m);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = ConvertElement<T>(f(ConvertElement<A>(a[i]), alpha));
  }
}

// o[0, n) = f(x[i], y[i], alpha) where x (kXRow) and y (kYRow) are each a
// contiguous run or, when false, one value broadcast along the run.
template <typename T, bool kXRow, bool kYRow, typename F>
OCTET_INLINE void BinaryRunBody(const T* x, const T* y, T* o, int64_t n, F f, AccType<T> alpha) {
  using A = AccType<T>;
  // A broadcast operand's one value (a row operand is not read here: its run
  // may be empty).
  const A xv = kXRow ? A(0) : ConvertElement<A>(x[0]), yv = kYRow ? A(0) : ConvertElement<A>(y[0]);
  if constexpr (kWidenInChunks<T>) {
    alignas(64) A buf_x[kChunk], buf_y[kChunk], res[kChunk];
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t m = std::min(kChunk, n - c0);
      if constexpr (kXRow && kYRow) {
        const RowIn<T> in_x(x + c0, m, buf_x), in_y(y + c0, m, buf_y);
        for (int64_t i = 0; i < m; ++i) res[i] = f(in_x[i], in_y[i], alpha);
      } else if constexpr (kXRow) {
        const RowIn<T> in_x(x + c0, m, buf_x);
        for (int64_t i = 0; i < m; ++i) res[i] = f(in_x[i], yv, alpha);
      } else {
        const RowIn<T> in_y(y + c0, m, buf_y);
        for (int64_t i = 0; i < m; ++i) res[i] = f(xv, in_y[i], alpha);
      }
      StoreRow(res, o + c0, m);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const A xi = kXRow ? ConvertElement<A>(x[i]) : xv, yi = kYRow ? ConvertElement<A>(y[i]) : yv;
      o[i] = ConvertElement<T>(f(xi, yi, alpha));
    }
  }
}

// run_override, when set, replaces f on contiguous runs (the same results:
// NOTE [bf16 gelu tables]).
template <typename T, typename F>
void UnaryLoop(const Tensor& x, const Tensor& out, F f, double alpha_d,
               void (*run_override)(const T*, T*, int64_t) = nullptr) {
  using A = AccType<T>;
  const A alpha = static_cast<A>(alpha_d);
  const auto run = IsaBuild<&UnaryRunBody<T, F>>();
  StridedIter<2> it(out.shape(), {&out, &x});
  it.Run([&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      if (run_override != nullptr) return run_override(reinterpret_cast<const T*>(p[1]), reinterpret_cast<T*>(p[0]), n);
      run(reinterpret_cast<const T*>(p[1]), reinterpret_cast<T*>(p[0]), n, f, alpha);
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<T*>(p[0] + i * s[0]) =
          ConvertElement<T>(f(ConvertElement<A>(*reinterpret_cast<const T*>(p[1] + i * s[1])), alpha));
    }
  });
}

// rows_override, when set, replaces f where all three are contiguous runs
// (the same results: NOTE [bf16 gelu tables]).
template <typename T, typename F>
void BinaryLoop(const Tensor& a, const Tensor& b, const Tensor& out, F f, double alpha_d,
                void (*rows_override)(const T*, const T*, T*, int64_t) = nullptr) {
  using A = AccType<T>;
  const A alpha = static_cast<A>(alpha_d);
  const auto rows = IsaBuild<&BinaryRunBody<T, true, true, F>>();
  const auto row_scalar = IsaBuild<&BinaryRunBody<T, true, false, F>>();
  const auto scalar_row = IsaBuild<&BinaryRunBody<T, false, true, F>>();
  StridedIter<3> it(out.shape(), {&out, &a, &b});
  it.Run([&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    constexpr int64_t kS = sizeof(T);
    if (s[0] == kS && s[1] == kS && s[2] == kS) {
      if (rows_override != nullptr) return rows_override(x, y, o, n);
      rows(x, y, o, n, f, alpha);
    } else if (s[0] == kS && s[1] == kS && s[2] == 0) {  // tensor op scalar-like (broadcast row)
      row_scalar(x, y, o, n, f, alpha);
    } else if (s[0] == kS && s[1] == 0 && s[2] == kS) {
      scalar_row(x, y, o, n, f, alpha);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const A xv = ConvertElement<A>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
        const A yv = ConvertElement<A>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
        *reinterpret_cast<T*>(p[0] + i * s[0]) = ConvertElement<T>(f(xv, yv, alpha));
      }
    }
  });
}

template <typename T>
void UnaryTyped(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  using functors::UnaryFn;
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (op == UnaryOp::kGelu && UseGeluTables())
      return UnaryLoop<T>(x, out, UnaryFn<UnaryOp::kGelu>{}, alpha, &GeluTableRun);
  }
  switch (op) {
#define OCTET_UNARY_CASE(OP) \
  case UnaryOp::OP:          \
    return UnaryLoop<T>(x, out, UnaryFn<UnaryOp::OP>{}, alpha);
    OCTET_FOR_EACH_UNARY_OP(OCTET_UNARY_CASE)
#undef OCTET_UNARY_CASE
    default: OCTET_FAIL("unary kernel: unknown op ", static_cast<int>(op));
  }
}

template <typename T>
void BinaryTyped(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  using functors::BinaryFn;
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (op == BinaryOp::kGeluBackward && UseGeluGradTables())
      return BinaryLoop<T>(a, b, out, BinaryFn<BinaryOp::kGeluBackward>{}, alpha, &GeluGradTableRun);
  }
  switch (op) {
#define OCTET_BINARY_CASE(OP) \
  case BinaryOp::OP:          \
    return BinaryLoop<T>(a, b, out, BinaryFn<BinaryOp::OP>{}, alpha);
    OCTET_FOR_EACH_BINARY_OP(OCTET_BINARY_CASE)
#undef OCTET_BINARY_CASE
    default: OCTET_FAIL("binary kernel: unknown op ", static_cast<int>(op));
  }
}

void UnaryCpu(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  DispatchFloat(out.dtype(), Name(op), [&]<typename T>() { UnaryTyped<T>(op, x, out, alpha); });
}

void BinaryCpu(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  DispatchFloat(out.dtype(), Name(op), [&]<typename T>() { BinaryTyped<T>(op, a, b, out, alpha); });
}

void CompareCpu(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  Dispatch<DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64,
           DType::kUInt8, DType::kBool>(a.dtype(), Name(op), [&]<typename T>() {
    using A = AccType<T>;
    StridedIter<3> it(out.shape(), {&out, &a, &b});
    it.Run([&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const A x = ConvertElement<A>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
        const A y = ConvertElement<A>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
        *reinterpret_cast<bool*>(p[0] + i * s[0]) = functors::Compare(op, x, y);
      }
    });
  });
}

void WhereCpu(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  DispatchFloat(out.dtype(), "where", [&]<typename T>() {
    StridedIter<4> it(out.shape(), {&out, &cond, &a, &b});
    it.Run([&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
      }
    });
  });
}

// GeluFp8 (NOTE [gelu to fp8] in ops/pointwise.cc): x is cut into blocks of
// kGeluFp8Block elements (a function of the size only, not of the thread
// count); each block's GELU is computed into an f32 buffer by the functor of
// Gelu's loop (inputs read through RowIn, f64 computed in f64 and rounded to
// f32) and quantized with QuantizeRow, Quantize's row converter,
// which returns the block's amax. The block amaxes are combined in block
// order, NaN winning (NOTE [amax combine order] in ops/cpu/cast_cpu.cc):
// the same bytes and amax for any OMP_NUM_THREADS.
inline constexpr int64_t kGeluFp8Block = 4096;

template <typename T>
OCTET_INLINE float GeluFp8BlockBody(const T* x, int64_t n, float scale, DType fp8, Fp8Saturation sat, uint8_t* q,
                                    const float* table) {
  using A = AccType<T>;
  alignas(64) float g[kGeluFp8Block];
  alignas(64) A buf[std::is_same_v<T, float16> ? kGeluFp8Block : 1];
  const functors::UnaryFn<UnaryOp::kGelu> gelu;
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (table != nullptr) {
      LookupBf16Codes(table, reinterpret_cast<const uint16_t*>(x), g, n);  // NOTE [bf16 gelu tables]
      return QuantizeRow(g, scale, fp8, sat, q, n);
    }
  }
  if constexpr (std::is_same_v<A, float>) {  // f32, bf16 (widened in the loop), f16 (widened into buf)
    const RowIn<T> in(x, n, buf);
    for (int64_t i = 0; i < n; ++i) g[i] = gelu(in[i], A(0));
  } else {  // f64: computed in f64, rounded to f32 before the multiply, as Quantize does
    for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(gelu(x[i], A(0)));
  }
  return QuantizeRow(g, scale, fp8, sat, q, n);
}

void GeluFp8Cpu(const Tensor& x, const Tensor& scale, Fp8Saturation sat, const Tensor& q, const Tensor& scale_inv,
                const Tensor& amax) {
  const float s = *scale.data<float>();
  const int64_t n = x.numel();
  const int64_t blocks = (n + kGeluFp8Block - 1) / kGeluFp8Block;
  std::vector<float> part(std::max<int64_t>(blocks, 1), 0.0f);
  uint8_t* qp = static_cast<uint8_t*>(q.raw_data());
  const DType fp8 = q.dtype();
  DispatchFloat(x.dtype(), "gelu_fp8", [&]<typename T>() {
    const T* xp = x.data<T>();
    const auto block = IsaBuild<&GeluFp8BlockBody<T>>();  // NOTE [pointwise isa dispatch]
    const float* table = std::is_same_v<T, bfloat16> && UseGeluTables() ? GeluTable() : nullptr;
    ParallelFor(blocks, 4, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t i0 = b * kGeluFp8Block, m = std::min(kGeluFp8Block, n - i0);
        part[b] = block(xp + i0, m, s, fp8, sat, qp + i0, table);
      }
    });
  });
  *amax.data<float>() = CombineAmax(part);
  *scale_inv.data<float>() = 1.0f / s;
}

}  // namespace

// pointwise_runs.h: the kernels' contiguous runs, on the calling thread.
void GeluF32Run(const float* x, float* o, int64_t n) {
  using Gelu = functors::UnaryFn<UnaryOp::kGelu>;
  IsaBuild<&UnaryRunBody<float, Gelu>>()(x, o, n, Gelu{}, 0.0f);
}

void GeluGradF32Run(const float* dy, const float* x, float* o, int64_t n) {
  using GeluGrad = functors::BinaryFn<BinaryOp::kGeluBackward>;
  IsaBuild<&BinaryRunBody<float, true, true, GeluGrad>>()(dy, x, o, n, GeluGrad{}, 0.0f);
}

void GeluBf16ComputeRun(const bfloat16* x, bfloat16* o, int64_t n) {
  using Gelu = functors::UnaryFn<UnaryOp::kGelu>;
  IsaBuild<&UnaryRunBody<bfloat16, Gelu>>()(x, o, n, Gelu{}, 0.0f);
}

void GeluGradBf16ComputeRun(const bfloat16* dy, const bfloat16* x, bfloat16* o, int64_t n) {
  using GeluGrad = functors::BinaryFn<BinaryOp::kGeluBackward>;
  IsaBuild<&BinaryRunBody<bfloat16, true, true, GeluGrad>>()(dy, x, o, n, GeluGrad{}, 0.0f);
}

OCTET_REGISTER_KERNEL(unary_kernel, DeviceType::kCPU, &UnaryCpu);
OCTET_REGISTER_KERNEL(binary_kernel, DeviceType::kCPU, &BinaryCpu);
OCTET_REGISTER_KERNEL(compare_kernel, DeviceType::kCPU, &CompareCpu);
OCTET_REGISTER_KERNEL(where_kernel, DeviceType::kCPU, &WhereCpu);
OCTET_REGISTER_KERNEL(gelu_fp8_kernel, DeviceType::kCPU, &GeluFp8Cpu);

}  // namespace octet::cpu
