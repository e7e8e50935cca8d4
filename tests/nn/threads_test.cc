// octet used from several threads of one program at once, each with its own
// model, optimizer and FP8 state (a server answering requests in parallel, a
// hyperparameter search in threads): each run must give exactly the bits it
// gives alone. What they share is process-wide: the CPU caching allocator,
// the oneDNN primitive cache, the kernel tables, the CPU path decisions made
// once, the log. Each thread's kernels run in an OpenMP team of its own.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <octet/nn/amp.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/gpt.h>
#include <octet/ops/cpu/loops.h>
#include <octet/ops/matmul_kernels.h>
#include <octet/optim/adamw.h>

namespace octet::nn {
namespace {

// (4, 16) token ids over a vocabulary of 29, different for each run.
Tensor Tokens(int run, int step, int offset) {
  std::vector<int64_t> ids(4 * 16);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>((i * 7 + i / 5 + step * 3 + offset + run * 11) % 29);
  return FromVector(ids, {4, 16});
}

struct RunSpec {
  amp::Level level;
  uint64_t seed;
};

// The losses of `steps` training steps and the validation loss after them.
std::vector<double> Train(const RunSpec& r, int steps) {
  GPT model({.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 29, .seed = r.seed});
  model.SetAmp(r.level);
  amp::Fp8State fp8(model);
  optim::AdamW opt(model.NamedParameters(), {.lr = 3e-3});
  model.Train();
  std::vector<double> out;
  const int run = static_cast<int>(r.seed);
  for (int s = 0; s < steps; ++s) {
    model.ZeroGrad();
    Tensor loss = model.Loss(Tokens(run, s, 0), Tokens(run, s, 1));
    out.push_back(loss.Item());
    loss.Backward();
    opt.Step();
    fp8.Update();
  }
  model.Eval();
  out.push_back(model.Loss(Tokens(run, 99, 0), Tokens(run, 99, 1)).Item());
  return out;
}

TEST(Threads, IndependentModelsTrainedInSeveralThreadsAtOnceGiveTheBitsOfOneAtATime) {
  constexpr int kSteps = 6;
  const std::vector<RunSpec> runs = {{amp::Level::kO0, 1}, {amp::Level::kO1, 2}, {amp::Level::kO2, 3},
                                 {amp::Level::kO1, 4}, {amp::Level::kO0, 5}, {amp::Level::kO2, 6}};
  // Together first: the process's one-time decisions (the CPU GEMM and GELU
  // paths, measured; the kernel tables' first use) are then made under
  // concurrent calls too (ctest runs each test in a fresh process).
  std::vector<std::vector<std::vector<double>>> rounds;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<double>> together(runs.size());
    std::vector<std::string> errors(runs.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < runs.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          together[i] = Train(runs[i], kSteps);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(errors[i], "") << "run " << i << ", round " << round;
    rounds.push_back(std::move(together));
  }
  std::vector<std::vector<double>> alone;
  for (const RunSpec& r : runs) alone.push_back(Train(r, kSteps));
  for (size_t round = 0; round < rounds.size(); ++round)
    for (size_t i = 0; i < runs.size(); ++i)
      EXPECT_EQ(rounds[round][i], alone[i]) << "run " << i << " (" << amp::Name(runs[i].level) << "), round " << round;
  // The runs differ from each other: a mix-up between threads would show.
  EXPECT_NE(alone[1], alone[3]);
}

// The weight gradients of one O2 step of a width-128 GPT (B·T = 2048: the
// bf16 weight-gradient GEMMs whose oneDNN blocking depends on the thread
// count, where oneDNN runs them).
std::vector<std::vector<double>> O2WeightGrads() {
  GPT model({.n_layer = 2, .n_head = 4, .n_embd = 128, .block_size = 128, .vocab_size = 97, .seed = 3});
  model.SetAmp(amp::Level::kO2);
  model.Train();
  std::vector<int64_t> ids(16 * 128), next(16 * 128);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>((i * 2654435761u >> 7) % 97);
    next[i] = static_cast<int64_t>((i * 40503u + 5) % 97);
  }
  model.Loss(FromVector(ids, {16, 128}), FromVector(next, {16, 128})).Backward();
  std::vector<std::vector<double>> grads;
  for (auto& [name, p] : model.NamedParameters()) grads.push_back(p.grad().To(DType::kFloat64).ToDoubles());
  return grads;
}

// A program that calls octet from inside an OpenMP parallel region of its
// own: octet's loops and oneDNN's then run on the calling thread alone, and
// each call gives the bits of a one-thread run (NOTE [oneDNN primitive
// cache] in ops/cpu/dnnl_primitive.cc). Where the bits depend on the count (the
// O2 weight gradients of a width-128 GPT with oneDNN's AMX GEMMs; a small
// GPT's O0 GEMMs on oneDNN's AVX2 gemm:jit, which splits at run time),
// neither a primitive planned for the thread's nthreads-var nor the bits of
// a run outside the region would do.
TEST(Threads, CallsFromInsideTheProgramsOwnParallelRegionGiveTheBitsOfAOneThreadRun) {
  const std::vector<RunSpec> runs = {{amp::Level::kO0, 1}, {amp::Level::kO1, 2}, {amp::Level::kO2, 3}};
  std::vector<std::vector<double>> one_thread;
  std::vector<std::vector<double>> one_thread_grads;
  {
    const cpu::ScopedOmpThreads one(1);
    cpu::ClearMatmulCacheForTesting();
    for (const RunSpec& r : runs) one_thread.push_back(Train(r, 4));
    one_thread_grads = O2WeightGrads();
  }
  const cpu::ScopedOmpThreads two(2);
  cpu::ClearMatmulCacheForTesting();
  std::vector<std::vector<double>> inside(runs.size());
  std::vector<std::vector<double>> inside_grads;
  std::vector<std::string> errors(runs.size() + 1);
#pragma omp parallel for num_threads(2) schedule(static, 1)
  for (int i = 0; i <= static_cast<int>(runs.size()); ++i) {
    const size_t u = static_cast<size_t>(i);
    try {
      if (u < runs.size()) {
        inside[u] = Train(runs[u], 4);
      } else {
        inside_grads = O2WeightGrads();
      }
    } catch (const std::exception& e) {
      errors[u] = e.what();
    }
  }
  for (size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], "") << "item " << i;
  for (size_t i = 0; i < runs.size(); ++i)
    EXPECT_EQ(inside[i], one_thread[i]) << "run " << i << " (" << amp::Name(runs[i].level) << ")";
  EXPECT_EQ(inside_grads, one_thread_grads) << "the O2 weight gradients of the width-128 GPT";
}

// NOTE [oneDNN primitive cache] in ops/cpu/dnnl_primitive.cc: a program that runs
// a shape at one thread count and then at another gets, the second time, what
// a process at that count gets, not the first count's primitive.
TEST(Threads, AGemmFirstRunAtOneThreadCountRunsAsItsOwnAtAnother) {
  const cpu::ScopedOmpThreads two(2);
  cpu::ClearMatmulCacheForTesting();
  const std::vector<std::vector<double>> fresh2 = O2WeightGrads();
  std::vector<std::vector<double>> fresh1;
  {
    const cpu::ScopedOmpThreads one(1);
    cpu::ClearMatmulCacheForTesting();
    fresh1 = O2WeightGrads();
  }
  const std::vector<std::vector<double>> after1 = O2WeightGrads();  // the 1-thread primitives are cached
  EXPECT_EQ(after1, fresh2);
  // Where fresh1 and fresh2 agree (a CPU on which every GEMM of the step is
  // octet's own, or oneDNN's blocking does not depend on the count), the
  // comparison above shows nothing; the cache test
  // (Matmul.EachThreadCountGetsAPrimitiveOfItsOwn) covers the keying there.
  if (fresh1 == fresh2) GTEST_LOG_(INFO) << "the step's gradients do not depend on the thread count here";
}

}  // namespace
}  // namespace octet::nn
