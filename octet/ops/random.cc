#include <octet/ops/random.h>

#include <octet/autograd/function.h>
#include <octet/core/graph_internal.h>
#include <octet/ops/op_checks.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/random_kernels.h>

namespace octet {

OCTET_DEFINE_KERNEL(random_fill_kernel, RandomFillKernelFn);
OCTET_DEFINE_KERNEL(dropout_kernel, DropoutKernelFn);

Generator& DefaultGenerator() {
  static Generator gen;
  return gen;
}

void ManualSeed(uint64_t seed) { DefaultGenerator().SetState(seed, 0); }

namespace {

void RandomFill(RandomKind kind, Tensor& x, double a, double b, Generator* gen) {
  internal::CheckNotCapturing("drawing random numbers",
                              "their Philox offset is a host counter, so every replay would draw the same numbers");
  CheckInPlaceAllowed("random fill", x);
  Generator& g = gen ? *gen : DefaultGenerator();
  const uint64_t offset = g.Reserve((static_cast<uint64_t>(x.numel()) + 1) / 2);
  if (x.numel() == 0) return;
  if (x.is_contiguous()) {
    random_fill_kernel(x.device())(kind, x, a, b, g.seed(), offset);
  } else {
    Tensor tmp = EmptyLike(x);
    random_fill_kernel(x.device())(kind, tmp, a, b, g.seed(), offset);
    x.CopyFrom_(tmp);
  }
  x.storage()->BumpVersion();
}

Tensor MakeRandom(RandomKind kind, const Shape& shape, double a, double b, const TensorOptions& options,
                  Generator* gen, const char* op) {
  TensorOptions o = options;
  o.requires_grad = false;
  Tensor t = Empty(shape, o);
  if (kind == RandomKind::kInteger) {
    OCTET_CHECK(!IsFloat(o.dtype) && o.dtype != DType::kBool, op, ": needs an integer dtype, got ", Name(o.dtype));
  } else {
    OCTET_CHECK(IsUnscaledFloat(o.dtype), op, ": needs float32/float64/bfloat16/float16, got ", Name(o.dtype));
  }
  RandomFill(kind, t, a, b, gen);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

struct DropoutOp : autograd::Op<DropoutOp> {
  static constexpr const char* kName = "dropout";
  static Tensor Forward(autograd::Ctx& ctx, const Tensor& x, double p, Generator* gen) {
    internal::CheckNotCapturing("dropout",
                                "its Philox offset is a host counter, so every replay would drop the same elements");
    CheckUnscaledFloat(kName, x, "x");
    Generator& g = gen ? *gen : DefaultGenerator();
    const uint64_t offset = g.Reserve((static_cast<uint64_t>(x.numel()) + 3) / 4);
    const Tensor xc = x.Contiguous();
    Tensor out = EmptyLike(xc);
    Tensor mask;
    if (ctx.recording()) mask = Empty(x.shape(), {.dtype = DType::kUInt8, .device = x.device()});
    dropout_kernel(x.device())(xc, out, mask, p, g.seed(), offset);
    ctx.Save(mask);
    ctx.doubles = {p};
    return out;
  }
  static TensorList Backward(autograd::Ctx& ctx, const Tensor& dy) {
    const Tensor mask = ctx.Saved(0);
    const double p = ctx.doubles[0];
    // dx = dy * mask / (1-p)
    return {BinaryRaw(BinaryOp::kMul, UnaryRaw(UnaryOp::kMulScalar, dy, 1.0 / (1.0 - p)), mask.To(dy.dtype()))};
  }
};

}  // namespace

Tensor Rand(const Shape& shape, double lo, double hi, const TensorOptions& options, Generator* gen) {
  return MakeRandom(RandomKind::kUniform, shape, lo, hi, options, gen, "rand");
}

Tensor Randn(const Shape& shape, double mean, double std, const TensorOptions& options, Generator* gen) {
  return MakeRandom(RandomKind::kNormal, shape, mean, std, options, gen, "randn");
}

Tensor RandInt(const Shape& shape, int64_t lo, int64_t hi, const TensorOptions& options, Generator* gen) {
  OCTET_CHECK(hi > lo, "randint: empty range [", lo, ", ", hi, ")");
  // The kernels draw in double: past 2^53 the bounds round and a draw could land outside [lo, hi).
  constexpr int64_t kExact = int64_t{1} << 53;
  OCTET_CHECK(lo >= -kExact && hi <= kExact, "randint: range [", lo, ", ", hi,
              ") reaches past +-2^53, beyond which values are not drawn exactly");
  if (!IsFloat(options.dtype) && options.dtype != DType::kBool) {  // else MakeRandom names the dtype
    CheckRepresentable(static_cast<double>(lo), options.dtype, "randint");
    CheckRepresentable(static_cast<double>(hi - 1), options.dtype, "randint");  // hi > lo: no overflow
  }
  return MakeRandom(RandomKind::kInteger, shape, static_cast<double>(lo), static_cast<double>(hi), options, gen,
                    "randint");
}

void UniformFill_(Tensor& x, double lo, double hi, Generator* gen) {
  CheckUnscaledFloat("uniform_", x, "x");
  RandomFill(RandomKind::kUniform, x, lo, hi, gen);
}

void NormalFill_(Tensor& x, double mean, double std, Generator* gen) {
  CheckUnscaledFloat("normal_", x, "x");
  RandomFill(RandomKind::kNormal, x, mean, std, gen);
}

Tensor Dropout(const Tensor& x, double p, bool training, Generator* gen) {
  OCTET_CHECK(p >= 0.0 && p < 1.0, "dropout: probability must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  return DropoutOp::Apply(x, p, gen);
}

}  // namespace octet
