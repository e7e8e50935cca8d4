// The block algorithm of the CUDA flash-attention kernels (ops/attention_flash.h,
// NOTE [flash attention on CUDA]) run on the CPU: the same host-device code
// the kernels run, with an execution policy that plays the block's 256
// threads one after another between barriers and does the half-warp row
// reductions explicitly. Forward (out, lse) and backward (every subset of
// dq/dk/dv) over whole problems against a float64 reference written with
// plain loops, itself checked against central finite differences.
//
// The emulation is made to fail loudly on the mistakes a GPU would hide:
// shared memory and every thread's registers start as NaN (a read of
// anything not written first poisons the result), input buffers hold NaN
// everywhere outside the viewed elements (an out-of-bounds or wrong-stride
// read poisons the result), outputs sit between guard values that must stay
// untouched, shared memory has a NaN guard past its end that must stay NaN,
// and every problem runs twice, threads in forward and in reverse order
// within each phase: a missing barrier (a thread reading what another writes
// in the same phase) changes the bits.
#include <octet/ops/attention_flash.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <limits>
#include <string>
#include <vector>

#include "tests/ops/attention_reference.h"
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AttentionRef;
using ::octet::testing::AttentionReference;
using flash::BwdParams;
using flash::FwdParams;
using flash::Geom;
using flash::kThreads;

// ---------------------------------------------------------------------------
// The host execution policy: the steps of a phase (Each bodies and row
// reductions) are recorded and run at the next Sync/Finish warp after warp,
// each warp running every step for its 32 threads before the next warp
// starts. That is a schedule a GPU may take, and in it a thread reading what
// another warp writes in the same phase sees a stale value; `reverse` runs
// warps and lanes in the opposite order, which then gives different bits.

template <class State>
class HostExec {
 public:
  static constexpr int kWarps = kThreads / 32;

  explicit HostExec(bool reverse) : reverse_(reverse), states_(kThreads) {
    std::memset(static_cast<void*>(states_.data()), 0xFF, sizeof(State) * states_.size());  // NaN registers
  }
  template <class F>
  void Each(F&& f) {
    steps_.push_back([this, f](int w) {
      for (int n = 0; n < 32; ++n) {
        const int tid = w * 32 + (reverse_ ? 31 - n : n);
        f(tid, states_[tid]);
      }
    });
  }
  // The rows of warp w: ty = 2w and 2w + 1.
  template <class Op>
  void RowReduce(Op op) {
    steps_.push_back([this, op](int w) {
      constexpr int kM = static_cast<int>(std::extent_v<decltype(State::red)>);
      for (int ty = 2 * w; ty < 2 * w + 2; ++ty) {
        for (int i = 0; i < kM; ++i) {
          auto r = states_[ty * flash::kLanes].red[i];
          for (int tx = 1; tx < flash::kLanes; ++tx) r = op(r, states_[ty * flash::kLanes + tx].red[i]);
          for (int tx = 0; tx < flash::kLanes; ++tx) states_[ty * flash::kLanes + tx].red[i] = r;
        }
      }
    });
  }
  void Sync() {
    for (int n = 0; n < kWarps; ++n) {
      const int w = reverse_ ? kWarps - 1 - n : n;
      for (auto& step : steps_) step(w);
    }
    steps_.clear();
  }
  void Finish() { Sync(); }

 private:
  bool reverse_;
  std::vector<State> states_;
  std::vector<std::function<void(int)>> steps_;
};

constexpr int kSmemGuard = 64;

// Fresh NaN shared memory for every block; the guard past the end must stay NaN.
template <typename A>
class Smem {
 public:
  explicit Smem(int elems) : elems_(elems), buf_(elems + kSmemGuard) {}
  A* Fresh() {
    std::fill(buf_.begin(), buf_.end(), std::numeric_limits<A>::quiet_NaN());
    return buf_.data();
  }
  bool GuardIntact() const {
    for (int i = elems_; i < elems_ + kSmemGuard; ++i)
      if (!std::isnan(buf_[i])) return false;
    return true;
  }

 private:
  int elems_;
  std::vector<A> buf_;
};

// ---------------------------------------------------------------------------
// Problems.

enum class Layout {
  kContiguous,  // (B,H,T,D)
  kFusedQkv,    // one slot of a (B,T,3,H,D) projection
  kTransposed,  // (B,H,D,T+3) storage viewed as (B,H,T,D): head dim not unit stride
};
const char* Name(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kFusedQkv: return "fused-qkv";
    case Layout::kTransposed: return "transposed";
  }
  return "?";
}

// One input: a buffer of NaN with the viewed elements set.
template <typename T>
struct Input {
  std::vector<T> buf;
  int64_t sb, sh, st, sd, offset;
  flash::Strided<const T> View(int64_t heads) const {
    return {buf.data() + offset, sb, sh, st, sd, heads};
  }
};

template <typename T>
Input<T> MakeInput(const std::vector<double>& vals, int64_t b, int64_t h, int64_t t, int64_t d, Layout layout,
                   int slot) {
  Input<T> in;
  switch (layout) {
    case Layout::kContiguous:
      in = {{}, h * t * d, t * d, d, 1, 0};
      in.buf.resize(b * h * t * d);
      break;
    case Layout::kFusedQkv:
      in = {{}, t * 3 * h * d, d, 3 * h * d, 1, slot * h * d};
      in.buf.resize(b * t * 3 * h * d);
      break;
    case Layout::kTransposed:
      in = {{}, h * d * (t + 3), d * (t + 3), 1, t + 3, 0};
      in.buf.resize(b * h * d * (t + 3));
      break;
  }
  std::fill(in.buf.begin(), in.buf.end(), static_cast<T>(std::numeric_limits<double>::quiet_NaN()));
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t ih = 0; ih < h; ++ih)
      for (int64_t it = 0; it < t; ++it)
        for (int64_t id = 0; id < d; ++id)
          in.buf[in.offset + ib * in.sb + ih * in.sh + it * in.st + id * in.sd] =
              static_cast<T>(vals[((ib * h + ih) * t + it) * d + id]);
  return in;
}

// A contiguous (B,H,T,D) output between guards.
constexpr int64_t kOutGuard = 97;
constexpr double kSentinel = -7777.0;

template <typename T>
struct Output {
  explicit Output(int64_t n) : n(n), buf(n + 2 * kOutGuard, static_cast<T>(kSentinel)) {}
  T* data() { return buf.data() + kOutGuard; }
  bool GuardsIntact() const {
    for (int64_t i = 0; i < kOutGuard; ++i)
      if (buf[i] != static_cast<T>(kSentinel) || buf[kOutGuard + n + i] != static_cast<T>(kSentinel)) return false;
    return true;
  }
  std::vector<double> Values() const { return {buf.begin() + kOutGuard, buf.begin() + kOutGuard + n}; }
  int64_t n;
  std::vector<T> buf;
};

template <typename P>
flash::Strided<P> ContiguousView(P* data, int64_t h, int64_t t, int64_t d) {
  return {data, h * t * d, t * d, d, 1, h};
}

// The float64 reference: tests/ops/attention_reference.h (AttentionReference;
// its gradients are checked by finite differences below).

// ---------------------------------------------------------------------------
// Running the blocks.

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

struct Problem {
  int64_t b, h, t, d;
  Layout layout;
  double scale;
  bool want_dq = true, want_dk = true, want_dv = true;
};

std::string Describe(const Problem& pr, const char* dtype) {
  return std::string(dtype) + " B=" + std::to_string(pr.b) + " H=" + std::to_string(pr.h) +
         " T=" + std::to_string(pr.t) + " D=" + std::to_string(pr.d) + " " + Name(pr.layout) + " grads " +
         (pr.want_dq ? "q" : "") + (pr.want_dk ? "k" : "") + (pr.want_dv ? "v" : "");
}

struct Values {
  std::vector<double> q, k, v, dout;
};

// Inputs rounded to T so that the reference sees exactly what the kernels see.
template <typename T>
Values MakeValues(const Problem& pr, uint64_t seed) {
  const int64_t n = pr.b * pr.h * pr.t * pr.d;
  Values vals{testing::RandomValues(n, seed, -2, 2), testing::RandomValues(n, seed + 1, -2, 2),
              testing::RandomValues(n, seed + 2), testing::RandomValues(n, seed + 3)};
  for (auto* vec : {&vals.q, &vals.k, &vals.v, &vals.dout})
    for (double& x : *vec) x = static_cast<double>(static_cast<T>(x));
  return vals;
}

template <typename T, int kDP>
Result Run(const Problem& pr, const Values& vals, bool reverse, bool* guards_ok) {
  using A = AccType<T>;
  using G = Geom<A, kDP>;
  const int64_t bh = pr.b * pr.h, n = bh * pr.t * pr.d;
  const Input<T> q = MakeInput<T>(vals.q, pr.b, pr.h, pr.t, pr.d, pr.layout, 0);
  const Input<T> k = MakeInput<T>(vals.k, pr.b, pr.h, pr.t, pr.d, pr.layout, 1);
  const Input<T> v = MakeInput<T>(vals.v, pr.b, pr.h, pr.t, pr.d, pr.layout, 2);
  const Input<T> dout = MakeInput<T>(vals.dout, pr.b, pr.h, pr.t, pr.d, pr.layout, 0);
  Output<T> out(n), dq(n), dk(n), dv(n);
  Output<A> lse(bh * pr.t), di(bh * pr.t);
  const int nt = static_cast<int>((pr.t + G::kTile - 1) / G::kTile);
  bool ok = true;

  FwdParams<T, A> f;
  f.q = q.View(pr.h);
  f.k = k.View(pr.h);
  f.v = v.View(pr.h);
  f.out = ContiguousView(out.data(), pr.h, pr.t, pr.d);
  f.lse = lse.data();
  f.bh = bh;
  f.t = pr.t;
  f.d = static_cast<int>(pr.d);
  f.nt = nt;
  f.qmul = static_cast<A>(pr.scale * flash::kLog2e);
  {
    Smem<A> smem(flash::kFwdSmemElems<G>);
    for (int64_t block = 0; block < bh * nt; ++block) {
      HostExec<flash::FwdState<G, A>> ex(reverse);
      flash::FwdBlock<G>(ex, f, block, smem.Fresh());
      ok &= smem.GuardIntact();
    }
  }

  BwdParams<T, A> p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = ContiguousView<const T>(out.data(), pr.h, pr.t, pr.d);
  p.dout = dout.View(pr.h);
  if (pr.want_dq) p.dq = ContiguousView(dq.data(), pr.h, pr.t, pr.d);
  if (pr.want_dk) p.dk = ContiguousView(dk.data(), pr.h, pr.t, pr.d);
  if (pr.want_dv) p.dv = ContiguousView(dv.data(), pr.h, pr.t, pr.d);
  p.lse = lse.data();
  p.di = di.data();
  p.bh = bh;
  p.t = pr.t;
  p.d = f.d;
  p.nt = nt;
  p.c = static_cast<A>(pr.scale * flash::kLog2e);
  p.scale = static_cast<A>(pr.scale);
  // Di as the device computes it: 32 lanes' partial sums, then their total.
  for (int64_t row = 0; row < bh * pr.t; ++row) {
    const int64_t ih = row / pr.t, it = row % pr.t;
    A s = 0;
    for (int lane = 0; lane < 32; ++lane)
      s += flash::DiPart<T, A>(p.dout.Head(ih) + it * p.dout.st, p.dout.sd, p.out.Head(ih) + it * p.out.st,
                               p.out.sd, p.d, lane, 32);
    p.di[row] = s;
  }
  if (pr.want_dk || pr.want_dv) {
    Smem<A> smem(flash::kBwdKvSmemElems<G>);
    for (int64_t block = 0; block < bh * nt; ++block) {
      HostExec<flash::BwdKvState<G, A>> ex(reverse);
      flash::BwdKvBlock<G>(ex, p, block, smem.Fresh());
      ok &= smem.GuardIntact();
    }
  }
  if (pr.want_dq) {
    Smem<A> smem(flash::kBwdQSmemElems<G>);
    for (int64_t block = 0; block < bh * nt; ++block) {
      HostExec<flash::BwdQState<G, A>> ex(reverse);
      flash::BwdQBlock<G>(ex, p, block, smem.Fresh());
      ok &= smem.GuardIntact();
    }
  }
  ok &= out.GuardsIntact() && lse.GuardsIntact() && dq.GuardsIntact() && dk.GuardsIntact() && dv.GuardsIntact();
  *guards_ok = ok;
  return {out.Values(), lse.Values(), dq.Values(), dk.Values(), dv.Values()};
}

template <typename T>
Result RunAny(const Problem& pr, const Values& vals, bool reverse, bool* guards_ok) {
  return flash::PaddedHeadDim(pr.d) == 64 ? Run<T, 64>(pr, vals, reverse, guards_ok)
                                          : Run<T, 128>(pr, vals, reverse, guards_ok);
}

// max |got - want| / (atol + rtol |want|) <= 1, NaN fails.
::testing::AssertionResult Close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                                 const std::string& what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= tol * (1.0 + std::fabs(want[i]))))
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

bool Untouched(const std::vector<double>& v) {
  for (double x : v)
    if (x != kSentinel) return false;
  return true;
}

template <typename T>
void CheckProblem(const Problem& pr, double tol, uint64_t seed) {
  const char* dtype = std::is_same_v<T, float> ? "float32" : "float64";
  const std::string what = Describe(pr, dtype);
  const Values vals = MakeValues<T>(pr, seed);
  const AttentionRef ref =
      AttentionReference(vals.q, vals.k, vals.v, Shape{pr.b, pr.h, pr.t, pr.d}, pr.scale, &vals.dout);
  bool guards = false, guards_rev = false;
  const Result got = RunAny<T>(pr, vals, /*reverse=*/false, &guards);
  const Result rev = RunAny<T>(pr, vals, /*reverse=*/true, &guards_rev);
  EXPECT_TRUE(guards && guards_rev) << what << ": a write outside an output or past shared memory";
  EXPECT_TRUE(Close(got.out, ref.out, tol, what + " out"));
  EXPECT_TRUE(Close(got.lse, ref.lse, tol, what + " lse"));
  // Gradients sum up to T terms: a looser bound for float32.
  const double gtol = 4 * tol;
  if (pr.want_dq) EXPECT_TRUE(Close(got.dq, ref.dq, gtol, what + " dq")); else EXPECT_TRUE(Untouched(got.dq)) << what;
  if (pr.want_dk) EXPECT_TRUE(Close(got.dk, ref.dk, gtol, what + " dk")); else EXPECT_TRUE(Untouched(got.dk)) << what;
  if (pr.want_dv) EXPECT_TRUE(Close(got.dv, ref.dv, gtol, what + " dv")); else EXPECT_TRUE(Untouched(got.dv)) << what;
  // Thread order within a phase must not matter, to the bit.
  for (const auto& [a, b, name] : {std::tuple{&got.out, &rev.out, "out"}, std::tuple{&got.lse, &rev.lse, "lse"},
                                   std::tuple{&got.dq, &rev.dq, "dq"}, std::tuple{&got.dk, &rev.dk, "dk"},
                                   std::tuple{&got.dv, &rev.dv, "dv"}}) {
    EXPECT_TRUE(std::memcmp(a->data(), b->data(), a->size() * sizeof(double)) == 0)
        << what << " " << name << ": depends on the order of threads within a phase (a missing barrier?)";
  }
}

// ---------------------------------------------------------------------------
// Tests.

TEST(FlashAttentionMath, OnlineSoftmaxGuards) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(flash::Rescale(-inf, 3.0), 0.0);  // nothing accumulated yet
  EXPECT_EQ(flash::Rescale(-inf, -inf), 1.0); // all masked: no NaN
  EXPECT_DOUBLE_EQ(flash::Rescale(1.0, 3.0), 0.25);
  EXPECT_EQ(flash::Prob(-inf, -inf), 0.0);
  EXPECT_EQ(flash::Prob(-inf, 2.0), 0.0);
  EXPECT_DOUBLE_EQ(flash::Prob(1.0, 3.0), 0.25);
  // lse from a log2-domain max and sum: m = 3, l = 5 -> ln(2^3 * 5).
  EXPECT_NEAR(flash::NaturalLse(3.0, 5.0), std::log(40.0), 1e-15);
  EXPECT_NEAR(flash::NaturalLse(3.0f, 5.0f), std::log(40.0), 1e-6);
  EXPECT_DOUBLE_EQ(flash::BwdProb(2.0, 0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(flash::BwdDs(0.5, 3.0, 1.0), 1.0);
  EXPECT_TRUE(flash::Visible(5, 5, 6));
  EXPECT_FALSE(flash::Visible(5, 6, 7));
  EXPECT_FALSE(flash::Visible(6, 0, 6));  // padding query row
}

TEST(FlashAttentionMath, PaddedHeadDims) {
  EXPECT_EQ(flash::PaddedHeadDim(1), 64);
  EXPECT_EQ(flash::PaddedHeadDim(64), 64);
  EXPECT_EQ(flash::PaddedHeadDim(65), 128);
  EXPECT_EQ(flash::PaddedHeadDim(128), 128);
}

// The reference's gradients are those of sum(out o dout) by central differences.
TEST(FlashAttentionReference, GradientsMatchFiniteDifferences) {
  const int64_t bh = 2, t = 7, d = 5;
  const double scale = 0.7, eps = 1e-6;
  std::vector<double> q = testing::RandomValues(bh * t * d, 11), k = testing::RandomValues(bh * t * d, 12),
                      v = testing::RandomValues(bh * t * d, 13), g = testing::RandomValues(bh * t * d, 14);
  const AttentionRef ref = AttentionReference(q, k, v, Shape{bh, 1, t, d}, scale, &g);
  auto loss = [&] {
    const AttentionRef r = AttentionReference(q, k, v, Shape{bh, 1, t, d}, scale);
    double s = 0;
    for (size_t i = 0; i < g.size(); ++i) s += r.out[i] * g[i];
    return s;
  };
  for (auto [x, dx, name] : {std::tuple{&q, &ref.dq, "dq"}, std::tuple{&k, &ref.dk, "dk"},
                             std::tuple{&v, &ref.dv, "dv"}}) {
    for (size_t i = 0; i < x->size(); ++i) {
      const double x0 = (*x)[i];
      (*x)[i] = x0 + eps;
      const double lp = loss();
      (*x)[i] = x0 - eps;
      const double lm = loss();
      (*x)[i] = x0;
      EXPECT_NEAR((*dx)[i], (lp - lm) / (2 * eps), 1e-8) << name << "[" << i << "]";
    }
  }
}

// The emulation itself: a phase that reads what another warp writes without a
// barrier in between reads unwritten (NaN) shared memory, in either order.
struct ToyState {
  float red[1];
};
std::vector<float> Toy(bool sync, bool reverse) {
  std::vector<float> smem(kThreads, std::numeric_limits<float>::quiet_NaN()), out(kThreads);
  HostExec<ToyState> ex(reverse);
  ex.Each([&](int tid, ToyState&) { smem[tid] = static_cast<float>(tid + 1); });
  if (sync) ex.Sync();
  ex.Each([&](int tid, ToyState&) { out[tid] = smem[(tid + 32) % kThreads]; });
  ex.Finish();
  return out;
}

TEST(FlashAttentionEmulation, DetectsAMissingBarrier) {
  for (bool reverse : {false, true}) {
    const std::vector<float> good = Toy(true, reverse), bad = Toy(false, reverse);
    for (int tid = 0; tid < kThreads; ++tid) EXPECT_EQ(good[tid], static_cast<float>((tid + 32) % kThreads + 1));
    int stale = 0;
    for (float x : bad) stale += std::isnan(x);
    EXPECT_GE(stale, 32) << "reverse " << reverse;
  }
}

// Sequence lengths around the tile sizes (64 for float, 32 for double), T = 1,
// head dims on both sides of the 64/128 padding, every layout.
TEST(FlashAttentionEmulation, Float32MatchesFloat64Reference) {
  uint64_t seed = 100;
  for (int64_t t : {1, 5, 64, 65, 130})
    for (int64_t d : {1, 16, 33, 64, 80, 128})
      for (Layout layout : {Layout::kContiguous, Layout::kFusedQkv, Layout::kTransposed})
        CheckProblem<float>({.b = 1, .h = 2, .t = t, .d = d, .layout = layout, .scale = 1.0 / std::sqrt(d)}, 2e-5,
                            seed++);
}

TEST(FlashAttentionEmulation, Float64MatchesFloat64Reference) {
  uint64_t seed = 200;
  for (int64_t t : {1, 31, 32, 33, 70})
    for (int64_t d : {1, 16, 64, 80, 128})
      for (Layout layout : {Layout::kContiguous, Layout::kFusedQkv, Layout::kTransposed})
        CheckProblem<double>({.b = 2, .h = 1, .t = t, .d = d, .layout = layout, .scale = 0.3}, 1e-12, seed++);
}

TEST(FlashAttentionEmulation, EverySubsetOfGradients) {
  uint64_t seed = 300;
  for (int mask = 1; mask < 8; ++mask) {
    Problem pr{.b = 2, .h = 3, .t = 77, .d = 24, .layout = Layout::kFusedQkv, .scale = 0.25};
    pr.want_dq = mask & 1;
    pr.want_dk = mask & 2;
    pr.want_dv = mask & 4;
    CheckProblem<float>(pr, 2e-5, seed++);
    CheckProblem<double>(pr, 1e-12, seed++);
  }
}

// Large scores (sharp softmax, running max that keeps growing along the row).
// Scores reach ~10^3, so float32 rounding of a score alone moves a
// probability by ~10^-4 relative: the float32 bound is conditioning, not slack.
TEST(FlashAttentionEmulation, LargeScoresStayFinite) {
  CheckProblem<float>({.b = 1, .h = 1, .t = 150, .d = 64, .layout = Layout::kContiguous, .scale = 8.0}, 1e-3, 400);
  CheckProblem<double>({.b = 1, .h = 1, .t = 70, .d = 64, .layout = Layout::kContiguous, .scale = 8.0}, 1e-11, 401);
}

// The shared-memory budgets the CUDA launcher opts in to (an H100 allows 227 KiB per block).
TEST(FlashAttentionMath, SharedMemoryFitsAnH100) {
  constexpr int64_t kH100 = 227 * 1024;
  auto bytes = [](auto elems, auto a) { return static_cast<int64_t>(elems) * static_cast<int64_t>(sizeof(a)); };
  using F64 = Geom<float, 64>;
  using F128 = Geom<float, 128>;
  using D64 = Geom<double, 64>;
  using D128 = Geom<double, 128>;
  for (int64_t b : {bytes(flash::kFwdSmemElems<F64>, 0.f), bytes(flash::kBwdKvSmemElems<F64>, 0.f),
                    bytes(flash::kBwdQSmemElems<F64>, 0.f), bytes(flash::kFwdSmemElems<F128>, 0.f),
                    bytes(flash::kBwdKvSmemElems<F128>, 0.f), bytes(flash::kBwdQSmemElems<F128>, 0.f),
                    bytes(flash::kFwdSmemElems<D64>, 0.0), bytes(flash::kBwdKvSmemElems<D64>, 0.0),
                    bytes(flash::kBwdQSmemElems<D64>, 0.0), bytes(flash::kFwdSmemElems<D128>, 0.0),
                    bytes(flash::kBwdKvSmemElems<D128>, 0.0), bytes(flash::kBwdQSmemElems<D128>, 0.0)}) {
    EXPECT_LE(b, kH100);
    EXPECT_EQ(b % 16, 0);
  }
  // The GPT-2 forward (float32, D = 64) leaves room for 4 blocks per SM (228 KiB).
  EXPECT_LE(4 * (bytes(flash::kFwdSmemElems<F64>, 0.f) + 1024), 228 * 1024);
}

}  // namespace
}  // namespace octet
