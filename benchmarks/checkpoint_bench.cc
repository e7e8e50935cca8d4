// The cost of checkpoint checksums (NOTE [safetensors checksums]): saving and
// loading the checkpoint of train_gpt's default model (GPT 4x128, vocab 256,
// AdamW fp32 state: model, m, v), next to CRC-32C over the same bytes, which
// is what checksums add to a save and again to a load. Save includes two
// fsyncs (file system dependent); Load verifies every checksum and value.
//   octet_checkpoint_bench
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <octet/core/crc32c.h>
#include <octet/nn/checkpoint.h>
#include <octet/nn/gpt.h>
#include <octet/optim/adamw.h>

namespace octet {
namespace {

namespace fs = std::filesystem;

struct DefaultRun {
  nn::GPT model{nn::GPTConfig{}};
  optim::AdamW opt{model.NamedParameters(), optim::AdamW::Options{}};
  nn::TrainingState State() {
    nn::TrainingState s;
    s.step = 1;
    s.model = model.StateDict();
    s.optimizer = opt.StateDict();
    return s;
  }
  int64_t Bytes() {
    const nn::TrainingState s = State();
    int64_t n = 0;
    for (const auto& [name, t] : s.model) n += t.nbytes();
    for (const auto& [name, t] : s.optimizer.tensors) n += t.nbytes();
    return n;
  }
};

std::string BenchDir() { return (fs::temp_directory_path() / ("octet_checkpoint_bench_" + std::to_string(::getpid()))).string(); }

void BM_SaveDefaultCheckpoint(benchmark::State& state) {
  DefaultRun run;
  const nn::TrainingState s = run.State();
  const std::string dir = BenchDir();
  for (auto _ : state) {
    nn::SaveTrainingState(dir, s);  // throws on failure
  }
  state.SetBytesProcessed(state.iterations() * run.Bytes());
  fs::remove_all(dir);
}
BENCHMARK(BM_SaveDefaultCheckpoint)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LoadDefaultCheckpoint(benchmark::State& state) {
  DefaultRun run;
  const std::string dir = BenchDir();
  nn::SaveTrainingState(dir, run.State());
  for (auto _ : state) {
    nn::TrainingState l = nn::LoadTrainingState(dir);
    benchmark::DoNotOptimize(l);
  }
  state.SetBytesProcessed(state.iterations() * run.Bytes());
  fs::remove_all(dir);
}
BENCHMARK(BM_LoadDefaultCheckpoint)->Unit(benchmark::kMillisecond)->UseRealTime();

// CRC-32C over the checkpoint's tensor bytes: the checksum share of one save
// or one load. Arg 0: the dispatched path (SSE4.2 where present); 1: the
// portable table.
void BM_Crc32cOfDefaultCheckpoint(benchmark::State& state) {
  DefaultRun run;
  const nn::TrainingState s = run.State();
  std::vector<Tensor> all;
  for (const auto& [name, t] : s.model) all.push_back(t);
  for (const auto& [name, t] : s.optimizer.tensors) all.push_back(t);
  for (auto _ : state) {
    uint32_t crc = 0;
    for (const Tensor& t : all)
      crc ^= state.range(0) == 0 ? Crc32c(t.raw_data(), t.nbytes())
                                 : internal::Crc32cExtendPortable(0, t.raw_data(), t.nbytes());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(state.iterations() * run.Bytes());
  state.SetLabel(state.range(0) == 0 ? "dispatched" : "portable table");
}
BENCHMARK(BM_Crc32cOfDefaultCheckpoint)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace octet
