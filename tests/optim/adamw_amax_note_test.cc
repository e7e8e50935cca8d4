// NOTE [amax notes] (core/amax_note.h): the CPU AdamW step takes the amax of
// the float32 weights that asked for it and notes it on their storage; Amax()
// of exactly those elements at that version returns it. Checked against a
// float64 maximum of the weights' values and against the amax kernel itself
// (run on a copy, which has no note), and for every way a note must not be
// used: a write after the step, a part of the weight, a weight that did not
// ask, a bf16 weight with its f32 master copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <octet/autograd/grad_mode.h>
#include <octet/core/amax_note.h>
#include <octet/core/float8.h>
#include <octet/core/scaling_math.h>
#include <octet/nn/linear.h>
#include <octet/ops/cast.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/optim/adamw.h>
#include "tests/optim/param_util.h"
#include "tests/test_util.h"

namespace octet::optim {
namespace {

using ::octet::testing::RandomValues;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float AmaxValue(const Tensor& t) { return static_cast<float>(t.ToDoubles()[0]); }

// max |x| in float64 over the tensor's values, rounded once (exact: the
// values are float32).
float ReferenceAmax(const Tensor& t) {
  double m = 0.0;
  for (double v : t.ToDoubles()) {
    if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
    m = std::max(m, std::abs(v));
  }
  return static_cast<float>(m);
}

using ::octet::optim::testing::Param;

// Random values with the largest magnitude at `at` (default: past the middle).
std::vector<double> WithPeak(int64_t n, int seed, double peak, int64_t at = -1) {
  std::vector<double> v = RandomValues(n, seed);
  v[at < 0 ? n / 2 + 3 : at] = peak;
  return v;
}

TEST(AmaxNotes, StepNotesTheNewAmaxOfTheWeightsThatAskedForIt) {
  // Crosses the update's chunks, its grain and the two-thread split.
  // The peak sits in the first chunk, past the middle, or in the last
  // (partial) chunk: a part left out of the maximum shows in one of them.
  const int64_t n = 3 * 16384 + 78;
  Tensor head = Param(WithPeak(n, 1, -7.5, 0), {2, n / 2});
  Tensor middle = Param(WithPeak(n, 2, 7.5), {n});
  Tensor tail = Param(WithPeak(n, 3, -7.5, n - 1), {n});
  Tensor small = Param({0.25, -3.0, 2.0}, {3});
  Tensor quiet = Param(WithPeak(1000, 4, 4.0), {1000});                   // does not ask
  Tensor half = Param(WithPeak(1000, 5, 4.0), {1000}, DType::kBFloat16);  // a master copy: no note
  const TensorList noted = {head, middle, tail, small};
  for (const Tensor& t : noted) t.storage()->WantAmaxNotes();
  half.storage()->WantAmaxNotes();
  AdamW opt({{"head", head}, {"middle", middle}, {"tail", tail}, {"small", small}, {"quiet", quiet}, {"half", half}},
            {.lr = 0.05, .weight_decay = 0.1});
  for (int threads : {1, 2}) {
    const cpu::ScopedOmpThreads scoped(threads);
    for (int step = 0; step < 2; ++step) {
      int seed = 10 + step;
      for (const Tensor& p : {head, middle, tail, small, quiet, half}) {
        p.set_grad(FromVector(RandomValues(p.numel(), seed++), p.shape(), {.dtype = p.dtype()}));
      }
      opt.Step();
    }
    for (const Tensor& p : noted) {
      const Tensor noted = NotedAmax(p);
      ASSERT_TRUE(noted.defined()) << Describe(p) << " on " << threads << " threads";
      const float want = ReferenceAmax(p);
      EXPECT_EQ(Bits(AmaxValue(noted)), Bits(want)) << Describe(p);
      EXPECT_EQ(Bits(AmaxValue(Amax(p))), Bits(want)) << Describe(p);
      EXPECT_EQ(Bits(AmaxValue(Amax(p.Clone()))), Bits(want)) << "the amax kernel disagrees on " << Describe(p);
    }
    EXPECT_FALSE(NotedAmax(quiet).defined());
    EXPECT_EQ(quiet.storage()->amax_note(), nullptr);
    EXPECT_FALSE(NotedAmax(half).defined());
    EXPECT_EQ(Bits(AmaxValue(Amax(half))), Bits(ReferenceAmax(half)));
  }
}

TEST(AmaxNotes, AmaxReturnsACopyOfTheNoteWhileItMatches) {
  // A planted note that no kernel would compute shows the lookup is used.
  Tensor x = FromVector(std::vector<double>{1.0, -2.0, 0.5}, {3});
  NoteAmax(x, Full({1}, 123.0));
  Tensor a = Amax(x);
  EXPECT_EQ(AmaxValue(a), 123.0f);
  a.Fill_(0.0);  // the caller's copy; the note keeps its value
  EXPECT_EQ(AmaxValue(Amax(x)), 123.0f);
  // Only exactly the noted elements match it.
  EXPECT_EQ(AmaxValue(Amax(x.Narrow(0, 0, 2))), 2.0f);
  EXPECT_EQ(AmaxValue(Amax(x.Narrow(0, 1, 2))), 2.0f);
  EXPECT_EQ(AmaxValue(Amax(x.Reshape({3, 1}))), 123.0f);  // the same elements, another shape
  // Any write retires it.
  {
    NoGradGuard ng;
    AddInPlace(x, Full({3}, 1.0), 1.0);
  }
  EXPECT_FALSE(NotedAmax(x).defined());
  EXPECT_EQ(AmaxValue(Amax(x)), 2.0f);
}

TEST(AmaxNotes, BadNotesAreRejected) {
  Tensor x = Zeros({4});
  EXPECT_THROW(NoteAmax(x, Zeros({2})), Error);
  EXPECT_THROW(NoteAmax(x, Zeros({1}, {.dtype = DType::kFloat64})), Error);
  EXPECT_THROW(NoteAmax(Zeros({4, 4}).T(), Zeros({1})), Error);
}

TEST(AmaxNotes, AWriteAfterTheStepRetiresTheNote) {
  Tensor w = Param(WithPeak(5000, 4, 3.0), {50, 100});
  w.storage()->WantAmaxNotes();
  AdamW opt({{"w", w}}, {.lr = 0.01});
  w.set_grad(FromVector(RandomValues(w.numel(), 5), w.shape()));
  opt.Step();
  const float after_step = ReferenceAmax(w);
  ASSERT_TRUE(NotedAmax(w).defined());
  {
    NoGradGuard ng;
    MulScalarInPlace(w, 2.0);
  }
  EXPECT_FALSE(NotedAmax(w).defined());
  EXPECT_EQ(Bits(AmaxValue(Amax(w))), Bits(2.0f * after_step));
  // A part of the weight is read, not taken from a note.
  w.set_grad(FromVector(RandomValues(w.numel(), 6), w.shape()));
  opt.Step();
  ASSERT_TRUE(NotedAmax(w).defined());
  const Tensor rows = w.Narrow(0, 0, 20);
  EXPECT_EQ(Bits(AmaxValue(Amax(rows))), Bits(ReferenceAmax(rows)));
  EXPECT_LT(AmaxValue(Amax(rows)), AmaxValue(Amax(w)));  // the peak sits in row 25
}

TEST(AmaxNotes, ANanWeightIsNotedAsNan) {
  Tensor w = Param(WithPeak(300, 7, 2.0), {300});
  w.storage()->WantAmaxNotes();
  AdamW opt({{"w", w}}, {.lr = 0.01});
  std::vector<double> g = RandomValues(300, 8);
  g[123] = std::numeric_limits<double>::quiet_NaN();
  w.set_grad(FromVector(g, {300}));
  opt.Step();
  ASSERT_TRUE(NotedAmax(w).defined());
  EXPECT_TRUE(std::isnan(AmaxValue(Amax(w))));
  EXPECT_EQ(Bits(AmaxValue(Amax(w))), Bits(AmaxValue(Amax(w.Clone()))));
}

TEST(AmaxNotes, AnFp8LinearsWeightIsQuantizedWithTheNotedAmax) {
  // O1: the weight's FP8 copy uses current scaling from the weight's amax,
  // which after a step comes from the note. The copy must equal a
  // quantization of the same weight read afresh.
  nn::Linear lin({.in = 64, .out = 48});
  lin.SetAmp(nn::amp::Level::kO1);
  AdamW opt(lin.NamedParameters(), {.lr = 0.01});
  const Tensor x = FromVector(RandomValues(32 * 64, 9), {32, 64}, {.dtype = DType::kBFloat16});
  for (int step = 0; step < 2; ++step) {
    Sum(lin(x).To(DType::kFloat32)).Backward();
    opt.Step();
    opt.ZeroGrad();
  }
  const Tensor w = lin.weight();
  ASSERT_TRUE(NotedAmax(w).defined()) << "the FP8 weight cache asked for notes; the step left none";
  lin(x);
  const nn::amp::SlotObservation& seen = lin.fp8_state()->weight().observation();
  const float amax = ReferenceAmax(w);
  EXPECT_EQ(Bits(AmaxValue(NotedAmax(w))), Bits(amax));
  EXPECT_EQ(Bits(seen.amax), Bits(amax));  // measured by the quantization itself
  EXPECT_EQ(Bits(seen.scale), Bits(ComputeScale(amax, float8_e4m3::kMaxFinite, 0, 1.0f, false)));
}

}  // namespace
}  // namespace octet::optim
