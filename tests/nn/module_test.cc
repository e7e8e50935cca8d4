// nn::Module: registration, naming, state dict round trip and errors, modes,
// dtype conversion (persistent float buffers too), lookups by name, amp level
// propagation.
#include <octet/nn/module.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <octet/nn/amp.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// y = x * scale + shift, elementwise over the last dim.
class Affine : public Module {
 public:
  struct Options {
    int64_t dim = 3;
  };
  explicit Affine(const Options& o)
      : scale_(RegisterParameter("scale", Ones({o.dim}))),
        shift_(RegisterParameter("shift", Zeros({o.dim}))),
        count_(RegisterBuffer("count", Zeros({1}, {.dtype = DType::kInt64}))),
        scratch_(RegisterBuffer("scratch", Zeros({2}), /*persistent=*/false)) {}
  Tensor Forward(const Tensor& x) { return Add(Mul(x, scale_), shift_); }
  Tensor operator()(const Tensor& x) { return Forward(x); }
  Tensor& scale() { return scale_; }

 private:
  Tensor& scale_;
  Tensor& shift_;
  Tensor& count_;
  Tensor& scratch_;
};

class Net : public Module {
 public:
  struct Options {
    int64_t dim = 3;
  };
  explicit Net(const Options& o)
      : a_(RegisterModule<Affine>("a", {.dim = o.dim})),
        bias_(RegisterParameter("bias", Full({o.dim}, 0.5))),
        b_(RegisterModule<Affine>("b", {.dim = o.dim})) {}
  Tensor Forward(const Tensor& x) { return b_(Add(a_(x), bias_)); }
  Tensor operator()(const Tensor& x) { return Forward(x); }
  Affine& a() { return a_; }

 private:
  Affine& a_;
  Tensor& bias_;
  Affine& b_;
};

std::vector<std::string> Names(const NamedTensors& nt) {
  std::vector<std::string> out;
  for (const auto& [n, t] : nt) out.push_back(n);
  return out;
}

TEST(Module, NamesAreDottedAndOrderedOwnFirstThenChildren) {
  Net net({});
  EXPECT_THAT(Names(net.NamedParameters()), ElementsAre("bias", "a.scale", "a.shift", "b.scale", "b.shift"));
  EXPECT_THAT(Names(net.NamedBuffers()), ElementsAre("a.count", "a.scratch", "b.count", "b.scratch"));
  EXPECT_THAT(Names(net.StateDict()),
              ElementsAre("bias", "a.scale", "a.shift", "a.count", "b.scale", "b.shift", "b.count"));
  EXPECT_THAT(Names(net.NamedParameters(/*recurse=*/false)), ElementsAre("bias"));
  std::vector<std::string> modules;
  for (auto& [n, m] : net.NamedModules()) modules.push_back(n);
  EXPECT_THAT(modules, ElementsAre("", "a", "b"));
  const Net& cnet = net;
  std::vector<std::string> const_modules;
  for (auto& [n, m] : cnet.NamedModules()) const_modules.push_back(n);
  EXPECT_EQ(const_modules, modules);
  std::vector<std::string> children;
  for (auto& [n, m] : net.NamedChildren()) children.push_back(n);
  EXPECT_THAT(children, ElementsAre("a", "b"));  // direct children only
  EXPECT_EQ(net.NamedChildren()[0].second, &net.a());
  // Slots by name, this module only.
  ASSERT_NE(net.FindParameter("bias"), nullptr);
  EXPECT_EQ(net.FindParameter("bias")->ToDoubles(), std::vector<double>(3, 0.5));
  EXPECT_EQ(net.FindParameter("a.scale"), nullptr);
  EXPECT_EQ(net.FindParameter("count"), nullptr);
  EXPECT_EQ(net.a().FindParameter("scale"), &net.a().scale());
  EXPECT_NE(net.a().FindBuffer("scratch"), nullptr);
  EXPECT_EQ(net.a().FindBuffer("scale"), nullptr);
  EXPECT_EQ(net.NumParameters(), 3 * 5);
  for (const Tensor& p : net.Parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
}

TEST(Module, RegistrationErrorsNameTheProblem) {
  Affine m({});
  EXPECT_THAT(ErrorOf([&] { m.RegisterParameter("scale", Ones({1})); }), HasSubstr("\"scale\" is already a parameter"));
  EXPECT_THAT(ErrorOf([&] { m.RegisterBuffer("x.y", Ones({1})); }), HasSubstr("contains '.'"));
  EXPECT_THAT(ErrorOf([&] { m.RegisterParameter("", Ones({1})); }), HasSubstr("empty name"));
  EXPECT_THAT(ErrorOf([&] { m.RegisterParameter("i", Zeros({1}, {.dtype = DType::kInt64})); }),
              HasSubstr("parameters must be float"));
  EXPECT_THAT(ErrorOf([&] { m.RegisterModule<Affine>("count", {}); }), HasSubstr("\"count\" is already a buffer"));
}

TEST(Module, ModuleListIndexOutOfRangeIsAnError) {
  ModuleList list;
  list.Append<ModuleList>({});
  EXPECT_THAT(ErrorOf([&] { list[1]; }), HasSubstr("ModuleList: index 1 is out of range for 1 modules"));
  EXPECT_THAT(ErrorOf([&] { list.at<ModuleList>(5); }), HasSubstr("ModuleList: index 5 is out of range"));
}

TEST(Module, ForwardAndBackwardThroughChildren) {
  Net net({});
  const Tensor x = RandomTensor({2, 3}, 1, DType::kFloat32);
  Tensor loss = Sum(net(x));
  loss.Backward();
  // d/d(a.scale) = sum over rows of x (b.scale = 1).
  const std::vector<double> xv = x.ToDoubles();
  const Tensor g = net.a().scale().grad();
  ASSERT_TRUE(g.defined());
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(g.ToDoubles()[j], xv[j] + xv[3 + j], 1e-6);
  net.ZeroGrad();
  for (const Tensor& p : net.Parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, StateDictRoundTripCopiesValuesIntoSlots) {
  Net src({}), dst({});
  {
    NoGradGuard ng;
    int k = 0;
    for (auto& [n, t] : src.StateDict()) {
      Tensor d = t.detach();
      d.CopyFrom_(RandomTensor(t.shape(), 10 + k++, t.dtype(), -5, 5));
    }
  }
  Tensor slot_before = dst.a().scale();  // the handle a member holds
  ASSERT_NO_THROW(dst.LoadStateDict(src.StateDict()));
  const NamedTensors a = src.StateDict(), b = dst.StateDict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.ToDoubles(), b[i].second.ToDoubles()) << a[i].first;
    EXPECT_FALSE(a[i].second.is_same(b[i].second)) << "LoadStateDict must copy, not alias";
  }
  EXPECT_TRUE(slot_before.is_same(dst.a().scale()));  // loaded in place
  EXPECT_TRUE(dst.a().scale().requires_grad());
}

TEST(Module, LoadStateDictReportsMissingUnexpectedAndMismatchedAndLoadsNothing) {
  Net src({}), dst({});
  NamedTensors sd = src.StateDict();
  // Make everything different from dst so a partial load would be visible.
  for (auto& [n, t] : sd) {
    if (IsFloat(t.dtype())) t = Full(t.shape(), 7.0, {.dtype = t.dtype()});
  }
  NamedTensors broken;
  for (auto& [n, t] : sd) {
    if (n == "a.shift") continue;                                            // missing
    if (n == "b.scale") t = Full({4}, 1.0);                                  // wrong shape
    if (n == "bias") t = Full({3}, 1.0, {.dtype = DType::kFloat64});        // wrong dtype
    broken.emplace_back(n, t);
  }
  broken.emplace_back("c.weight", Ones({2}));  // unexpected
  const std::string msg = ErrorOf([&] { dst.LoadStateDict(broken); });
  ASSERT_FALSE(msg.empty());
  EXPECT_THAT(msg, HasSubstr("Missing: a.shift"));
  EXPECT_THAT(msg, HasSubstr("Unexpected: c.weight"));
  EXPECT_THAT(msg, HasSubstr("b.scale (expected float32[3], got float32[4])"));
  EXPECT_THAT(msg, HasSubstr("bias (expected float32[3], got float64[3])"));
  EXPECT_THAT(msg, HasSubstr("nothing was loaded"));
  for (auto& [n, t] : dst.StateDict())
    if (IsFloat(t.dtype()))
      for (double v : t.ToDoubles()) EXPECT_NE(v, 7.0) << n << " was partially loaded";

  // Duplicates are rejected too.
  NamedTensors dup = src.StateDict();
  dup.push_back(dup.front());
  EXPECT_THAT(ErrorOf([&] { dst.LoadStateDict(dup); }), HasSubstr("Duplicated: bias"));
  // Non-strict: missing and unexpected are tolerated, mismatches are not.
  NamedTensors partial = {{"bias", Full({3}, 2.0)}, {"zzz", Ones({1})}};
  ASSERT_NO_THROW(dst.LoadStateDict(partial, /*strict=*/false));
  EXPECT_EQ(dst.StateDict()[0].second.ToDoubles(), std::vector<double>({2, 2, 2}));
}

TEST(Module, TrainEvalIsRecursive) {
  Net net({});
  EXPECT_TRUE(net.is_training());
  net.Eval();
  for (auto& [n, m] : net.NamedModules()) EXPECT_FALSE(m->is_training()) << n;
  net.Train();
  for (auto& [n, m] : net.NamedModules()) EXPECT_TRUE(m->is_training()) << n;
}

TEST(Module, ToDtypeConvertsFloatSlotsInPlace) {
  Net net({});
  net.To(DType::kFloat64);
  for (auto& [n, t] : net.NamedParameters()) {
    EXPECT_EQ(t.dtype(), DType::kFloat64) << n;
    EXPECT_TRUE(t.requires_grad() && t.is_leaf()) << n;
  }
  EXPECT_EQ(net.a().scale().dtype(), DType::kFloat64);  // the member sees the new tensor
  for (auto& [n, t] : net.NamedBuffers()) {
    if (n.find("count") != std::string::npos) EXPECT_EQ(t.dtype(), DType::kInt64);
    if (n.find("scratch") != std::string::npos) EXPECT_EQ(t.dtype(), DType::kFloat32);  // non-persistent
  }
  const Tensor y = net(RandomTensor({2, 3}, 3, DType::kFloat64));
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  EXPECT_THAT(ErrorOf([&] { net.To(DType::kFloat8E4M3); }), HasSubstr("not fp8_e4m3"));
}

// A persistent float buffer (a running statistic) converts with the
// parameters, keeping its values; a non-persistent one and an integer one stay.
class WithStatistic : public Module {
 public:
  WithStatistic()
      : w_(RegisterParameter("w", Full({2}, 1.5))),
        running_(RegisterBuffer("running", FromVector(std::vector<double>{0.25, -3.0, 1e-3}, {3}))),
        steps_(RegisterBuffer("steps", Full({1}, 7.0, {.dtype = DType::kInt32}))),
        scratch_(RegisterBuffer("scratch", Full({1}, 2.0), /*persistent=*/false)) {}
  Tensor& running() { return running_; }

 private:
  Tensor& w_;
  Tensor& running_;
  Tensor& steps_;
  Tensor& scratch_;
};

TEST(Module, ToDtypeConvertsPersistentFloatBuffersWithTheirValues) {
  WithStatistic m;
  m.To(DType::kBFloat16);
  EXPECT_EQ(m.running().dtype(), DType::kBFloat16);  // the member sees it
  // bf16 of 0.25, -3 and 1e-3 (f32 0x3A83126F rounds to 0x3A83: 131 / 128 * 2^-10).
  EXPECT_EQ(m.running().ToDoubles(), (std::vector<double>{0.25, -3.0, 0.00099945068359375}));
  const NamedTensors buffers = m.NamedBuffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[1].second.dtype(), DType::kInt32);
  EXPECT_EQ(buffers[1].second.Item(), 7.0);
  EXPECT_EQ(buffers[2].second.dtype(), DType::kFloat32);  // non-persistent: stays
  EXPECT_EQ(m.NamedParameters()[0].second.dtype(), DType::kBFloat16);
  // Back to float32: the bf16 values, widened exactly.
  m.To(DType::kFloat32);
  EXPECT_EQ(m.running().dtype(), DType::kFloat32);
  EXPECT_EQ(m.running().ToDoubles(), (std::vector<double>{0.25, -3.0, 0.00099945068359375}));
}

TEST(Module, AmpLevelPropagatesWithOptOutAndAutocastOverride) {
  Net net({});
  EXPECT_EQ(net.a().amp_level(), amp::Level::kO0);
  net.SetAmp(amp::Level::kO1, {.amax_history_len = 4});
  EXPECT_EQ(net.amp_level(), amp::Level::kO1);
  EXPECT_EQ(net.a().amp_level(), amp::Level::kO1);
  EXPECT_EQ(net.a().amp_recipe().amax_history_len, 4);
  net.a().SetFp8OptOut();
  EXPECT_EQ(net.a().amp_level(), amp::Level::kO2);
  EXPECT_EQ(net.amp_level(), amp::Level::kO1);
  {
    amp::Autocast scope(amp::Level::kO0);
    EXPECT_EQ(net.amp_level(), amp::Level::kO0);
    {
      amp::Autocast inner(amp::Level::kO1, {.margin = 2});
      EXPECT_EQ(net.amp_level(), amp::Level::kO1);
      EXPECT_EQ(net.a().amp_level(), amp::Level::kO2);  // opted out
      EXPECT_EQ(net.amp_recipe().margin, 2);
    }
    EXPECT_EQ(net.amp_level(), amp::Level::kO0);
  }
  EXPECT_EQ(net.amp_level(), amp::Level::kO1);
  amp::Level l;
  EXPECT_TRUE(amp::ParseLevel("O2", &l));
  EXPECT_EQ(l, amp::Level::kO2);
  EXPECT_FALSE(amp::ParseLevel("O3", &l));
  EXPECT_THAT(ErrorOf([&] { net.SetAmp(amp::Level::kO1, {.amax_history_len = 0}); }),
              HasSubstr("amax_history_len must be >= 1"));
}

}  // namespace
}  // namespace octet::nn
