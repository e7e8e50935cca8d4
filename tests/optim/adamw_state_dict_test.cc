// AdamW's state dict: a round trip continues bit for bit for every state
// format, and loads that do not fit the optimizer name the entry at fault
// and change nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <octet/core/scaling.h>
#include <octet/optim/adamw.h>
#include "tests/optim/param_util.h"
#include "tests/test_util.h"

namespace octet::optim {
namespace {

using ::octet::optim::testing::Param;
using ::octet::optim::testing::SetGrad;
using ::octet::testing::AllClose;
using ::octet::testing::Bytes;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomValues;

// A copy sharing nothing with t (FP8: same codes, fresh ScaleMeta with the same values).
Tensor DeepCopy(const Tensor& t) {
  Tensor c = Empty(t.shape(), {.dtype = t.dtype()});
  std::memcpy(c.raw_data(), t.Contiguous().raw_data(), t.nbytes());
  if (const ScaleMeta* m = t.scale_meta()) {
    auto meta = std::make_shared<ScaleMeta>();
    meta->scale = Full({1}, m->scale.Item());
    meta->scale_inv = Full({1}, m->scale_inv.Item());
    meta->amax = Full({1}, m->amax.Item());
    c = c.WithScaleMeta(meta);
  }
  return c;
}

TEST(AdamW, StateDictRoundTripContinuesBitIdentically) {
  for (StateDType sd : {StateDType::kFloat32, StateDType::kBFloat16, StateDType::kFp8Fp16}) {
    SCOPED_TRACE(Name(sd));
    const std::vector<double> w0 = RandomValues(24, 5);
    Tensor a = Param(w0, {4, 6}, DType::kBFloat16), b = Param(RandomValues(6, 6), {6});
    const AdamW::Options o{.lr = 1e-2, .beta2 = 0.95, .weight_decay = 0.1, .state_dtype = sd};
    AdamW opt({{"a", a}, {"b", b}}, o);
    for (int s = 0; s < 3; ++s) {
      SetGrad(a, RandomValues(24, 40 + s), DType::kBFloat16);
      SetGrad(b, RandomValues(6, 50 + s), DType::kFloat32);
      opt.Step();
    }
    const OptimizerState st = opt.StateDict();
    EXPECT_EQ(st.scalars.at("type"), "adamw");
    EXPECT_EQ(st.scalars.at("step"), "3");
    EXPECT_EQ(st.scalars.at("state_dtype"), Name(sd));
    std::vector<std::string> names;
    for (const auto& [n, t] : st.tensors) names.push_back(n);
    std::vector<std::string> expected = {"adamw.m.a", "adamw.v.a"};
    if (sd == StateDType::kFp8Fp16) expected.push_back("adamw.v.a.scale_inv");
    expected.push_back("adamw.master.a");
    expected.insert(expected.end(), {"adamw.m.b", "adamw.v.b"});
    if (sd == StateDType::kFp8Fp16) expected.push_back("adamw.v.b.scale_inv");
    EXPECT_EQ(names, expected);

    // A second optimizer over copies of the weights, loaded from deep copies of the state.
    Tensor a2 = Param(std::vector<double>(24, 0.0), {4, 6}, DType::kBFloat16), b2 = Param(std::vector<double>(6), {6});
    std::memcpy(a2.raw_data(), a.raw_data(), a.nbytes());
    std::memcpy(b2.raw_data(), b.raw_data(), b.nbytes());
    AdamW opt2({{"a", a2}, {"b", b2}}, o);
    OptimizerState copy = st;
    for (auto& [n, t] : copy.tensors) t = DeepCopy(t);
    ASSERT_NO_THROW(opt2.LoadStateDict(copy));
    EXPECT_EQ(opt2.step_count(), 3);
    for (int s = 0; s < 3; ++s) {
      for (auto* pair : {&a, &a2}) SetGrad(*pair, RandomValues(24, 60 + s), DType::kBFloat16);
      for (auto* pair : {&b, &b2}) SetGrad(*pair, RandomValues(6, 70 + s), DType::kFloat32);
      opt.Step();
      opt2.Step();
    }
    EXPECT_EQ(Bytes(a), Bytes(a2));
    EXPECT_EQ(Bytes(b), Bytes(b2));
    EXPECT_EQ(Bytes(opt.state(0).m), Bytes(opt2.state(0).m));
    EXPECT_EQ(Bytes(opt.state(1).v), Bytes(opt2.state(1).v));
  }
}

TEST(AdamW, LoadStateDictErrorsNameTheEntriesAndChangeNothing) {
  Tensor w = Param(RandomValues(6, 1), {2, 3}), b = Param(RandomValues(3, 2), {3});
  AdamW opt({{"w", w}, {"b", b}}, {.lr = 0.1});
  SetGrad(w, RandomValues(6, 3), DType::kFloat32);
  SetGrad(b, RandomValues(3, 4), DType::kFloat32);
  opt.Step();
  const std::vector<uint8_t> m_before = Bytes(opt.state(0).m);
  const OptimizerState good = opt.StateDict();
  auto deep = [&] {
    OptimizerState s = good;
    for (auto& [n, t] : s.tensors) t = DeepCopy(t);
    for (auto& [n, t] : s.tensors) t.Fill_(7.0);
    return s;
  };

  OptimizerState missing = deep();
  missing.tensors.erase(missing.tensors.begin() + 1);  // adamw.v.w
  std::string st = ErrorOf([&] { opt.LoadStateDict(missing); });
  EXPECT_NE(st.find("missing entries 'adamw.v.w'"), std::string::npos) << st;

  OptimizerState extra = deep();
  extra.tensors.emplace_back("adamw.m.nope", Zeros({1}));
  st = ErrorOf([&] { opt.LoadStateDict(extra); });
  EXPECT_NE(st.find("unexpected entries 'adamw.m.nope'"), std::string::npos) << st;

  OptimizerState shape = deep();
  shape.tensors[0].second = Zeros({3, 2});
  st = ErrorOf([&] { opt.LoadStateDict(shape); });
  EXPECT_NE(st.find("entry 'adamw.m.w' is float32[3, 2] but the optimizer holds float32[2, 3]"),
            std::string::npos)
      << st;

  OptimizerState dtype = deep();
  dtype.tensors[2].second = Zeros({3}, {.dtype = DType::kBFloat16});
  st = ErrorOf([&] { opt.LoadStateDict(dtype); });
  EXPECT_NE(st.find("entry 'adamw.m.b' is bfloat16[3] but the optimizer holds float32[3]"),
            std::string::npos)
      << st;

  OptimizerState type = deep();
  type.scalars["type"] = "sgd";
  st = ErrorOf([&] { opt.LoadStateDict(type); });
  EXPECT_NE(st.find("state is of a 'sgd' optimizer, not 'adamw'"), std::string::npos) << st;

  OptimizerState sdt = deep();
  sdt.scalars["state_dtype"] = "bf16";
  st = ErrorOf([&] { opt.LoadStateDict(sdt); });
  EXPECT_NE(st.find("saved with state_dtype bf16 but this optimizer uses fp32"), std::string::npos) << st;

  OptimizerState lr = deep();  // a learning rate the constructor and set_lr refuse
  lr.scalars["lr"] = "inf";
  st = ErrorOf([&] { opt.LoadStateDict(lr); });
  EXPECT_NE(st.find("scalar 'lr' must be finite and >= 0, got inf"), std::string::npos) << st;

  OptimizerState step = deep();
  step.scalars["step"] = "x";
  st = ErrorOf([&] { opt.LoadStateDict(step); });
  EXPECT_NE(st.find("'step' is missing or not a non-negative integer"), std::string::npos) << st;

  // None of the failed loads changed anything.
  EXPECT_EQ(Bytes(opt.state(0).m), m_before);
  EXPECT_EQ(opt.step_count(), 1);
  // The valid one does.
  ASSERT_NO_THROW(opt.LoadStateDict(deep()));
  EXPECT_TRUE(AllClose(opt.state(0).m, std::vector<double>(6, 7.0), 0, 0));
}

TEST(AdamW, Fp8StateWithoutScaleIsRejected) {
  Tensor w = Param(RandomValues(4, 1), {2, 2});
  AdamW opt({{"w", w}}, {.state_dtype = StateDType::kFp8Fp16});
  OptimizerState s = opt.StateDict();
  s.tensors[0].second = Empty({2, 2}, {.dtype = DType::kFloat8E4M3});  // no ScaleMeta
  const std::string st = ErrorOf([&] { opt.LoadStateDict(s); });
  EXPECT_NE(st.find("'adamw.m.w'"), std::string::npos) << st;
  EXPECT_NE(st.find("has no per-tensor scale metadata"), std::string::npos) << st;
}

}  // namespace
}  // namespace octet::optim
