// train_gpt: trains a GPT on a byte-level text corpus (default: Debian's
// fortunes) or on llm.c token shards, at amp level O0 (FP32), O1 (FP8) or O2
// (BF16), with AdamW, warmup + cosine LR, gradient clipping, periodic
// validation, checkpoints and bit-identical resume.
//
//   train_gpt --amp O1 --steps 600 --metrics /tmp/o1.jsonl --ckpt_dir /tmp/ckpt
//   train_gpt --amp O1 --steps 600 --ckpt_dir /tmp/ckpt --resume
//
// Output: a progress line every --log_every steps (step, train loss, LR,
// ms/step, tokens/s, achieved GFLOP/s, and at O1 the worst FP8 saturation of
// that step), the validation loss every --eval_every steps, a sample at the
// end, and a metrics file (--metrics: JSON lines when the name ends in .json
// or .jsonl, else CSV). Bad input gives a message on stderr and exit code 1.
#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <octet/core/random.h>
#include "examples/gpt/data.h"
#include "examples/gpt/distributed_training.h"
#include "examples/gpt/metrics_writer.h"
#include "examples/gpt/model_meta.h"
#include "examples/gpt/run_state.h"
#include "examples/gpt/stop_signal.h"
#include "examples/gpt/train_step.h"
#include "examples/gpt/training_data.h"
#include <octet/nn/amp.h>
#include <octet/nn/checkpoint.h>
#include <octet/nn/gpt.h>
#include <octet/ops/cpu_gelu_path.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/index_check.h>
#include <octet/optim/adamw.h>
#include <octet/optim/lr_schedule.h>

ABSL_FLAG(std::string, data, octet::gpt::kDefaultCorpusPath,
          "Comma-separated text files/directories (byte tokens, V=256), or llm.c .bin token shards / glob patterns");
ABSL_FLAG(std::string, val_data, "", "For .bin shards: validation shards (text corpora split themselves)");
ABSL_FLAG(int64_t, vocab_size, 0, "Vocabulary size; 0: 256 for text, 50257 for .bin shards");
ABSL_FLAG(std::string, amp, "O0", "Mixed precision: O0 (FP32), O1 (FP8 compute), O2 (BF16 compute)");
ABSL_FLAG(std::string, recipe, "delayed", "O1 FP8 scaling: delayed | current");
ABSL_FLAG(int32_t, amax_history, 16, "O1 delayed scaling: amax history length");
ABSL_FLAG(std::string, amax_algo, "max", "O1 delayed scaling: max | most_recent");
ABSL_FLAG(int32_t, margin, 0, "O1: scale = fp8_max / amax / 2^margin (>= 0: a negative one saturates the amax)");
ABSL_FLAG(bool, pow2_scales, false, "O1: round scales down to powers of two");
ABSL_FLAG(bool, fp8_lm_head, false, "O1: run the (tied) lm_head GEMM in FP8 too");
ABSL_FLAG(bool, fp8_attention, true,
          "O1: the attention reads and keeps an FP8 copy of q, k, v (false: the BF16 projection output)");
ABSL_FLAG(int64_t, steps, 3000, "Optimizer steps (the default takes ~3 minutes on 2 cores)");
ABSL_FLAG(int64_t, seed, 1337, "Seed for initialisation, data order and sampling");
ABSL_FLAG(std::string, ckpt_dir, "", "Checkpoint directory (empty: no checkpoints)");
ABSL_FLAG(std::string, resume, "false",
          "--resume: resume from the newest complete checkpoint in --ckpt_dir (error when there is none); "
          "--resume=auto: resume if there is one, else start from scratch");
ABSL_FLAG(bool, overwrite, false, "Start from scratch even if --ckpt_dir holds checkpoints (removes them)");
ABSL_FLAG(bool, resume_anyway, false, "Resume even if the checkpoint's model/amp/seed/data differ (warns)");
ABSL_FLAG(int64_t, ckpt_every, 0, "Save a checkpoint every N steps (0: only at the end)");
ABSL_FLAG(int64_t, ckpt_keep, 0,
          "Keep only the newest N checkpoints in --ckpt_dir, removing older ones after each save (0: all)");
ABSL_FLAG(int64_t, stop_after, -1, "Stop after this many steps (saving a checkpoint) as if interrupted");
ABSL_FLAG(int64_t, batch, 16, "Batch size B (sequences per micro-batch)");
ABSL_FLAG(int64_t, grad_accum, 1, "Micro-batches per optimizer step");
ABSL_FLAG(int64_t, seq_len, 128, "Sequence length T");
ABSL_FLAG(int64_t, block_size, 128, "Model context length (T must not exceed it)");
ABSL_FLAG(int64_t, n_layer, 4, "Transformer blocks");
ABSL_FLAG(int64_t, n_head, 4, "Attention heads");
ABSL_FLAG(int64_t, n_embd, 128, "Model width C");
ABSL_FLAG(double, dropout, 0.0, "Dropout probability");
ABSL_FLAG(double, lr, 2e-3, "Peak learning rate");
ABSL_FLAG(int64_t, warmup, 50, "Warmup steps (linear)");
ABSL_FLAG(double, final_lr_frac, 0.1, "Final LR as a fraction of the peak (cosine decay)");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay (2-D parameters)");
ABSL_FLAG(double, beta2, 0.95, "AdamW beta2");
ABSL_FLAG(double, grad_clip, 1.0, "Clip the global gradient norm to this (0: off)");
ABSL_FLAG(std::string, state_dtype, "fp32", "AdamW state: fp32 | bf16 | fp8");
ABSL_FLAG(int64_t, eval_every, 100, "Validation every N steps (0: only at the end)");
ABSL_FLAG(int64_t, eval_batches, 8, "Validation batches per evaluation");
ABSL_FLAG(int64_t, log_every, 10, "Progress line every N steps");
ABSL_FLAG(std::string, metrics, "", "Metrics file: JSON lines (.json/.jsonl) or CSV");
ABSL_FLAG(std::string, device, "cpu", "Where to train: cpu, cuda or cuda:N");
ABSL_FLAG(bool, cuda_graph, false,
          "Capture the training step in a CUDA graph and replay it (--device=cuda, one process, no dropout; "
          "no FP8 telemetry)");
ABSL_FLAG(int32_t, threads, 0, "OpenMP threads (0: OMP_NUM_THREADS / all cores)");
ABSL_FLAG(int64_t, sample_tokens, 200, "Tokens to sample at the end (0: none)");
ABSL_FLAG(double, temperature, 0.8, "Sampling temperature");
ABSL_FLAG(int64_t, top_k, 40, "Sampling top-k (0: all)");
ABSL_FLAG(std::string, prompt, "", "Sampling prompt (text corpora; default: start of a fortune)");

namespace octet::gpt {
namespace {

using Clock = std::chrono::steady_clock;

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

absl::Status Fail(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// More OpenMP threads than this is a mistake, not a set-up: libgomp cannot
// create 100000 and crashed trying.
constexpr int32_t kMaxThreads = 1024;

// The numeric flags' ranges, checked before any data is read or step run: a
// value outside them is an error naming the flag, never a silent default
// (--log_every 0 meant 1, --eval_batches 0 one batch, --stop_after 0 no
// stop, a negative --threads all cores) nor a failure after the training
// (--temperature 0, at the sampling). The ranges of the model's, the
// optimizer's and the schedule's own arguments are theirs to check.
absl::Status CheckRanges() {
  const int32_t threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0 || threads > kMaxThreads)
    return Fail(absl::StrCat("--threads must be in [0, ", kMaxThreads, "] (0: OMP_NUM_THREADS / all cores), got ",
                             threads));
  if (absl::GetFlag(FLAGS_log_every) < 1)
    return Fail(absl::StrCat("--log_every must be >= 1, got ", absl::GetFlag(FLAGS_log_every)));
  if (absl::GetFlag(FLAGS_eval_every) < 0)
    return Fail(absl::StrCat("--eval_every must be >= 0 (0: only at the end), got ", absl::GetFlag(FLAGS_eval_every)));
  if (absl::GetFlag(FLAGS_eval_batches) < 1)
    return Fail(absl::StrCat("--eval_batches must be >= 1, got ", absl::GetFlag(FLAGS_eval_batches)));
  if (absl::GetFlag(FLAGS_ckpt_keep) < 0)
    return Fail(absl::StrCat("--ckpt_keep must be >= 0 (0: all), got ", absl::GetFlag(FLAGS_ckpt_keep)));
  if (absl::GetFlag(FLAGS_ckpt_every) < 0)
    return Fail(absl::StrCat("--ckpt_every must be >= 0 (0: only at the end), got ", absl::GetFlag(FLAGS_ckpt_every)));
  if (absl::GetFlag(FLAGS_stop_after) < -1 || absl::GetFlag(FLAGS_stop_after) == 0)
    return Fail(absl::StrCat("--stop_after must be -1 (run every step) or >= 1, got ", absl::GetFlag(FLAGS_stop_after)));
  if (absl::GetFlag(FLAGS_margin) < 0)
    return Fail(absl::StrCat("--margin must be >= 0, got ", absl::GetFlag(FLAGS_margin)));
  if (!(absl::GetFlag(FLAGS_grad_clip) >= 0.0))
    return Fail(absl::StrCat("--grad_clip must be >= 0 (0: off), got ", absl::GetFlag(FLAGS_grad_clip)));
  if (absl::GetFlag(FLAGS_sample_tokens) < 0)
    return Fail(absl::StrCat("--sample_tokens must be >= 0 (0: none), got ", absl::GetFlag(FLAGS_sample_tokens)));
  return CheckSamplingFlags(absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_top_k));
}

absl::Status Run() {
  // ---- flags -------------------------------------------------------------------------
  nn::amp::Level level;
  if (!nn::amp::ParseLevel(absl::GetFlag(FLAGS_amp), &level))
    return Fail(absl::StrCat("unknown --amp level '", absl::GetFlag(FLAGS_amp), "' (expected O0, O1 or O2)"));
  nn::amp::Recipe recipe;
  if (!nn::amp::ParseScaling(absl::GetFlag(FLAGS_recipe), &recipe.scaling))
    return Fail(absl::StrCat("unknown --recipe '", absl::GetFlag(FLAGS_recipe), "' (expected delayed or current)"));
  recipe.amax_history_len = absl::GetFlag(FLAGS_amax_history);
  if (recipe.amax_history_len < 1)
    return Fail(absl::StrCat("--amax_history must be >= 1, got ", recipe.amax_history_len));
  const std::string algo = absl::GetFlag(FLAGS_amax_algo);
  if (algo == "max") recipe.amax_algo = AmaxAlgo::kMax;
  else if (algo == "most_recent") recipe.amax_algo = AmaxAlgo::kMostRecent;
  else return Fail(absl::StrCat("unknown --amax_algo '", algo, "' (expected max or most_recent)"));
  recipe.margin = absl::GetFlag(FLAGS_margin);
  recipe.power_of_two_scales = absl::GetFlag(FLAGS_pow2_scales);
  recipe.fp8_lm_head = absl::GetFlag(FLAGS_fp8_lm_head);
  recipe.fp8_attention_inputs = absl::GetFlag(FLAGS_fp8_attention);
  optim::StateDType state_dtype;
  const std::string sd = absl::GetFlag(FLAGS_state_dtype);
  if (sd == "fp32") state_dtype = optim::StateDType::kFloat32;
  else if (sd == "bf16") state_dtype = optim::StateDType::kBFloat16;
  else if (sd == "fp8") state_dtype = optim::StateDType::kFp8Fp16;
  else return Fail(absl::StrCat("unknown --state_dtype '", sd, "' (expected fp32, bf16 or fp8)"));

  const int64_t steps = absl::GetFlag(FLAGS_steps), B = absl::GetFlag(FLAGS_batch), T = absl::GetFlag(FLAGS_seq_len);
  const int64_t accum = absl::GetFlag(FLAGS_grad_accum);
  const int64_t block_size = absl::GetFlag(FLAGS_block_size);
  if (steps < 1) return Fail(absl::StrCat("--steps must be >= 1, got ", steps));
  if (B < 1 || T < 1 || accum < 1)
    return Fail(absl::StrCat("--batch, --seq_len and --grad_accum must be >= 1, got ", B, ", ", T, ", ", accum));
  if (T > block_size)
    return Fail(absl::StrCat("--seq_len (", T, ") is larger than the model's --block_size (", block_size, ")"));
  const int64_t log_every = absl::GetFlag(FLAGS_log_every);
  const int64_t eval_every = absl::GetFlag(FLAGS_eval_every);
  if (absl::Status s = CheckRanges(); !s.ok()) return s;
  const std::string ckpt_dir = absl::GetFlag(FLAGS_ckpt_dir);
  ResumeMode resume_mode;
  if (!ParseResumeMode(absl::GetFlag(FLAGS_resume), &resume_mode))
    return Fail(absl::StrCat("unknown --resume '", absl::GetFlag(FLAGS_resume), "' (expected true, false or auto)"));
  if (resume_mode != ResumeMode::kNo && ckpt_dir.empty()) return Fail("--resume needs --ckpt_dir");
  if (absl::GetFlag(FLAGS_threads) > 0) omp_set_num_threads(absl::GetFlag(FLAGS_threads));
  Device device;
  try {
    device = ParseDevice(absl::GetFlag(FLAGS_device));
    CheckDeviceExists(device, "--device");
  } catch (const Error& e) {
    return Fail(e.what());
  }

  // Data parallelism under octet-run (examples/gpt/distributed_training.h).
  absl::StatusOr<std::unique_ptr<DistributedTraining>> dist = DistributedTraining::Create();
  if (!dist.ok()) return dist.status();
  DistributedTraining& dt = **dist;
  // Before the data is read: ZeroAdamW shards only float32 state.
  if (dt.zero1() && state_dtype != optim::StateDType::kFloat32) {
    return Fail(absl::StrCat("--zero1 shards float32 AdamW state only; --state_dtype is ", sd,
                             " (use --state_dtype=fp32, or drop --zero1)"));
  }

  // ---- data --------------------------------------------------------------------------
  absl::StatusOr<TrainingData> data =
      LoadTrainingData(absl::GetFlag(FLAGS_data), absl::GetFlag(FLAGS_val_data), absl::GetFlag(FLAGS_vocab_size));
  if (!data.ok()) return data.status();
  std::printf("data: %s\n", data->description.c_str());
  const uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  absl::StatusOr<BatchSampler> sampler =
      BatchSampler::Create(data->train, {.batch_size = B, .seq_len = T, .shuffle = true, .seed = dt.DataSeed(seed)});
  if (!sampler.ok()) return sampler.status();
  if (data->val) {
    // Fail early (not at the first evaluation) when the validation split is too short.
    absl::StatusOr<BatchSampler> probe = BatchSampler::Create(data->val, {.batch_size = B, .seq_len = T});
    if (!probe.ok()) return absl::Status(probe.status().code(), absl::StrCat("validation data: ", probe.status().message()));
  }

  // ---- model, optimizer, schedule -------------------------------------------------------
  nn::GPTConfig config{.n_layer = absl::GetFlag(FLAGS_n_layer),
                       .n_head = absl::GetFlag(FLAGS_n_head),
                       .n_embd = absl::GetFlag(FLAGS_n_embd),
                       .block_size = block_size,
                       .vocab_size = data->vocab_size,
                       .tie_weights = true,
                       .dropout = absl::GetFlag(FLAGS_dropout),
                       .seed = seed};
  if (config.n_layer < 1 || config.n_head < 1 || config.n_embd < 1 || config.n_embd % config.n_head != 0)
    return Fail(absl::StrCat("bad model shape: --n_layer ", config.n_layer, " --n_head ", config.n_head, " --n_embd ",
                             config.n_embd, " (all >= 1, n_head must divide n_embd)"));
  ManualSeed(seed);
  nn::GPT model(config);
  model.To(device);  // initialised on the CPU (the same weights on every device), then moved
  model.SetAmp(level, recipe);
  nn::amp::Fp8State fp8_state(model);  // NOTE [who updates the FP8 state] (nn/fp8_state.h)
  optim::AdamW::Options adamw;  // decay: 2-D parameters (the default filter), as in GPT-2
  adamw.lr = absl::GetFlag(FLAGS_lr);
  adamw.beta1 = 0.9;
  adamw.beta2 = absl::GetFlag(FLAGS_beta2);
  adamw.eps = 1e-8;
  adamw.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  adamw.state_dtype = state_dtype;
  optim::AdamW opt(dt.OptimizerParams(model), adamw);
  dt.Attach(model, adamw);
  dt.AttachFp8State(fp8_state);
  const optim::LrSchedule schedule({.kind = optim::LrScheduleKind::kCosine,
                                    .max_lr = absl::GetFlag(FLAGS_lr),
                                    .warmup_steps = std::min(absl::GetFlag(FLAGS_warmup), steps - 1),
                                    .total_steps = steps,
                                    .final_frac = absl::GetFlag(FLAGS_final_lr_frac)});
  std::printf("model: GPT n_layer=%lld n_head=%lld n_embd=%lld block_size=%lld vocab=%lld, %lld parameters; amp %s",
              static_cast<long long>(config.n_layer), static_cast<long long>(config.n_head),
              static_cast<long long>(config.n_embd), static_cast<long long>(config.block_size),
              static_cast<long long>(config.vocab_size), static_cast<long long>(model.NumParameters()),
              nn::amp::Name(level));
  if (level == nn::amp::Level::kO1) {
    std::printf(" (%s scaling, history %d, amax %s, margin %d)", nn::amp::Name(recipe.scaling),
                recipe.amax_history_len, recipe.amax_algo == AmaxAlgo::kMax ? "max" : "most_recent", recipe.margin);
  }
  std::printf("; AdamW state %s", optim::Name(state_dtype));
  std::printf("; batch %lld x %lld tokens x %lld micro-batches; %s", static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(accum), ToString(device).c_str());
  if (device.is_cpu()) std::printf(", %d threads", omp_get_max_threads());
  std::printf("\n");
  if (device.is_cpu() && level != nn::amp::Level::kO0) {
    // NOTE [CPU GEMM path] in ops/cpu_gemm_path.h: where BF16 instructions
    // are slow, O1 and O2 compute their GEMMs with FP32 FMAs; they still save
    // memory, but need not be faster than O0 (docs/cpu-speed.md).
    const CpuGemmPathInfo gemm = GetCpuGemmPath();
    std::printf(
        "cpu gemm: bf16/fp8 operands on %s (%s; one thread: FP32 FMA %.0f, BF16 dot product %.0f, AMX BF16 %.0f "
        "GFLOP/s)\n",
        gemm.path == CpuGemmPath::kFp32Fma ? "FP32 FMAs, widened exactly"
        : gemm.amx_bf16_gflops > 0.0       ? "BF16 (AMX tiles)"
                                           : "BF16 (dot products)",
        gemm.reason.c_str(), gemm.fp32_fma_gflops, gemm.bf16_dot_gflops, gemm.amx_bf16_gflops);
    // NOTE [bf16 gelu tables] in ops/cpu_gelu_path.h: the same bits either way.
    const CpuGeluPathInfo gelu = GetCpuGeluPath();
    const auto how = [](CpuGeluPath p) { return p == CpuGeluPath::kTable ? "by table lookup" : "computed"; };
    std::printf("cpu gelu: bf16 forward %s (%s), backward %s (%s)\n", how(gelu.path), gelu.reason.c_str(),
                how(gelu.backward_path), gelu.backward_reason.c_str());
  }

  std::map<std::string, std::string> run_meta;
  ConfigToMetadata(config, &run_meta);
  run_meta["amp.level"] = nn::amp::Name(level);
  run_meta["train.batch"] = absl::StrCat(B);
  run_meta["train.seq_len"] = absl::StrCat(T);
  run_meta["train.grad_accum"] = absl::StrCat(accum);
  run_meta["train.steps"] = absl::StrCat(steps);
  run_meta["train.seed"] = absl::StrCat(seed);
  run_meta["train.state_dtype"] = sd;
  run_meta["gpt.dropout"] = absl::StrCat(config.dropout);
  run_meta["amp.recipe"] = level != nn::amp::Level::kO1 ? "none"
                           : absl::StrCat(nn::amp::Name(recipe.scaling), ",history=", recipe.amax_history_len, ",algo=",
                                          algo, ",margin=", recipe.margin, ",pow2=", recipe.power_of_two_scales ? 1 : 0,
                                          ",fp8_lm_head=", recipe.fp8_lm_head ? 1 : 0,
                                          ",fp8_attention=", recipe.fp8_attention_inputs ? 1 : 0);
  run_meta["dataset.fingerprint"] = data->fingerprint;
  run_meta["dataset.tokenizer"] = data->text ? "bytes" : "llm.c token shards";

  // ---- resume ------------------------------------------------------------------------------
  int64_t step = 0;
  std::unique_ptr<nn::CheckpointDirLock> ckpt_lock;  // held until the run ends
  if (!ckpt_dir.empty()) {  // examples/gpt/run_state.h
    absl::StatusOr<ResumePlan> plan = PlanResume(ckpt_dir, resume_mode, absl::GetFlag(FLAGS_overwrite));
    if (!plan.ok()) return plan.status();
    if (dt.is_main()) {  // the one rank that writes there
      // A save that cannot write is found now, not after the steps it was to keep.
      nn::CheckCheckpointDirWritable(ckpt_dir);  // throws octet::Error naming dir and why
      // No other run saves there while this one runs (NOTE [checkpoint directory lock] in nn/checkpoint.h).
      ckpt_lock = std::make_unique<nn::CheckpointDirLock>(ckpt_dir);  // throws naming the holder
      if (!ckpt_lock->unavailable().empty()) std::printf("note: %s\n", ckpt_lock->unavailable().c_str());
      if (absl::Status s = RemoveOverwritten(ckpt_dir, *plan); !s.ok()) return s;
    }
    for (const std::string& note : plan->notes) std::printf("%s\n", note.c_str());
    if (plan->step >= 0) {
      nn::TrainingState st = nn::LoadTrainingState(ckpt_dir, plan->step);  // throws octet::Error on failure
      std::vector<std::string> warnings;
      if (absl::Status s = CheckRunAgrees(st.metadata, run_meta, absl::GetFlag(FLAGS_resume_anyway), &warnings); !s.ok())
        return s;
      for (const std::string& w : warnings) std::printf("%s\n", w.c_str());
      model.LoadStateDict(st.model);  // octet::Error on a mismatch, reported by main
      if (absl::Status s = dt.LoadOptimizerState(opt, st.optimizer); !s.ok()) return s;
      nn::amp::LoadScalingState(model, st.extra);
      absl::StatusOr<DataPosition> pos = PositionFromMetadata(st.metadata);
      if (!pos.ok()) return pos.status();
      if (absl::Status s = sampler->SetPosition(*pos); !s.ok()) return s;
      DefaultGenerator().SetState(st.rng_seed, st.rng_offset);
      uint64_t gseed = 0, goffset = 0;
      if (absl::SimpleAtoi(st.metadata["model_rng.seed"], &gseed) &&
          absl::SimpleAtoi(st.metadata["model_rng.offset"], &goffset))
        model.generator().SetState(gseed, goffset);
      step = st.step;
      std::printf("resumed from %s at step %lld\n", ckpt_dir.c_str(), static_cast<long long>(step));
    } else if (resume_mode == ResumeMode::kAuto) {
      std::printf("--resume=auto: no checkpoint in '%s' yet, starting from scratch\n", ckpt_dir.c_str());
    }
  }
  // --stop_after counts from step 0, resumed or not: a step this run never
  // reaches would be no stop at all.
  if (const int64_t stop = absl::GetFlag(FLAGS_stop_after); stop >= 1 && (stop <= step || stop > steps))
    return Fail(absl::StrCat("--stop_after ", stop, " is not a step this run takes (steps ", step + 1, " to ", steps,
                             stop <= step ? ": it resumes after it)" : ")"));
  auto save = [&](int64_t at_step) -> absl::Status {
    if (ckpt_dir.empty()) return absl::OkStatus();
    const optim::OptimizerState opt_state = dt.OptimizerState(opt);  // collectives under ZeRO-1
    const optim::NamedTensors model_state = dt.ModelState(model);
    if (!dt.is_main()) return absl::OkStatus();
    std::map<std::string, std::string> meta = run_meta;
    PositionToMetadata(sampler->position(), &meta);
    meta["model_rng.seed"] = absl::StrCat(model.generator().seed());
    meta["model_rng.offset"] = absl::StrCat(model.generator().offset());
    nn::SaveTrainingState(ckpt_dir, at_step, model_state, opt_state, nn::amp::ScalingState(model),
                          DefaultGenerator().seed(), DefaultGenerator().offset(), meta);  // throws on failure
    if (const int64_t keep = absl::GetFlag(FLAGS_ckpt_keep); keep > 0) nn::PruneCheckpoints(ckpt_dir, keep);
    return absl::OkStatus();
  };

  MetricsWriter metrics;
  if (absl::Status s = metrics.Open(dt.is_main() ? absl::GetFlag(FLAGS_metrics) : "", /*append=*/step > 0); !s.ok()) return s;

  // ---- training loop -------------------------------------------------------------------------
  const int64_t tokens_per_step = B * T * accum;
  const double flops_per_step = static_cast<double>(model.TrainingFlopsPerToken(T)) * tokens_per_step;
  const int64_t stop_after = absl::GetFlag(FLAGS_stop_after);
  const int64_t ckpt_every = absl::GetFlag(FLAGS_ckpt_every);
  double val_loss = NAN, total_ms = 0.0;
  int64_t timed_steps = 0;
  struct PendingStep {  // a step whose loss and gradient norm are still on the device
    int64_t step;
    Tensor loss_sum, grad_norm;
    double lr, ms, tok_s, gflops;
  };
  std::vector<PendingStep> pending;
  const bool cuda_graph = absl::GetFlag(FLAGS_cuda_graph);
  if (cuda_graph) {
    if (absl::Status s = TrainStep::CheckGraphMode(device, dt.world_size(), config.dropout); !s.ok()) return s;
  }
  // examples/gpt/train_step.h: the step's device work, eager or a CUDA graph.
  TrainStep train_step({.device = device,
                        .grad_accum = accum,
                        .grad_clip = absl::GetFlag(FLAGS_grad_clip),
                        .cuda_graph = cuda_graph},
                       model, opt, fp8_state, dt);
  const bool telemetry = level == nn::amp::Level::kO1 && !cuda_graph;
  SetDeferredIndexChecks(true);  // token-id / target checks read at the read points below
  model.Train();
  if (level == nn::amp::Level::kO1) nn::amp::SetTelemetry(model, false);
  std::vector<Batch> batches(accum);
  const int64_t first_step = step;  // 0, or where a resumed run starts
  // NOTE [stopping on a signal] in examples/gpt/stop_signal.h.
  if (!ckpt_dir.empty()) CatchStopSignals(true);
  for (; step < steps; ++step) {
    const bool log_step = (step + 1) % log_every == 0 || step == 0 || step + 1 == steps;
    if (telemetry) nn::amp::SetTelemetry(model, log_step);
    const auto t0 = Clock::now();
    for (int64_t micro = 0; micro < accum; ++micro) {
      absl::StatusOr<Batch> batch = sampler->Next();
      if (!batch.ok()) return batch.status();
      batches[micro] = *std::move(batch);
    }
    const double lr = schedule.LrAt(step);
    // The loss and the gradient norm stay device tensors until a log line, an
    // evaluation or a checkpoint needs them (the metrics rows of the steps in
    // between are written then).
    const TrainStep::Result result = train_step.Run(batches, lr);
    const Tensor& loss_sum = result.loss_sum;
    const Tensor& grad_norm = result.grad_norm;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (step > first_step) {  // this process's first step pays for one-time set-up
      total_ms += ms;
      ++timed_steps;
    }
    const double tok_s = tokens_per_step / (ms / 1000.0);
    const double gflops = flops_per_step / (ms / 1000.0) / 1e9;
    pending.push_back({step + 1, loss_sum, grad_norm, lr, ms, tok_s, gflops});
    const bool last = step + 1 == steps;
    const bool eval_now = data->val && ((eval_every > 0 && (step + 1) % eval_every == 0) || last);
    const bool stop_here = stop_after >= 0 && step + 1 == stop_after;
    const bool save_now = (ckpt_every > 0 && (step + 1) % ckpt_every == 0) || last || stop_here;
    // One process stops after the step in which it got a signal; ranks check
    // at the read points (NOTE [stopping on a signal] in examples/gpt/stop_signal.h).
    const bool signalled_alone = dt.world_size() == 1 && StopSignal() != 0;
    if (!log_step && !eval_now && !save_now && !signalled_alone) continue;
    // A read point: index errors of the steps since the last one (NOTE
    // [deferred index checks] in ops/index_check.h), then the pending steps'
    // values, oldest first.
    ThrowIfDeferredIndexCheckFailed();
    double loss_value = NAN;
    for (size_t i = 0; i < pending.size(); ++i) {
      const PendingStep& p = pending[i];
      loss_value = p.loss_sum.Item() / static_cast<double>(accum);
      if (!std::isfinite(loss_value))
        return absl::InternalError(absl::StrCat("training diverged: loss ", loss_value, " at step ", p.step));
      if (i + 1 < pending.size())
        metrics.Step(p.step, loss_value, p.lr, p.grad_norm.Item(), p.ms, p.tok_s, p.gflops, 0.0, NAN);
    }
    const double grad_norm_value = grad_norm.Item();
    pending.clear();
    const double worst_sat = telemetry && log_step ? nn::amp::WorstSaturation(nn::amp::Telemetry(model)) : 0.0;
    double step_val = NAN;
    if (eval_now) {
      absl::StatusOr<double> v = EvaluateLoss(model, data->val, B, T, absl::GetFlag(FLAGS_eval_batches), device);
      if (!v.ok()) return v.status();
      step_val = val_loss = *v;
    }
    if (log_step) {
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | %7.1f ms/step | %8.0f tok/s | %6.1f GFLOP/s",
                  static_cast<long long>(step + 1), static_cast<long long>(steps), loss_value, lr, ms, tok_s, gflops);
      if (telemetry) std::printf(" | fp8 worst sat %.3f%%", 100.0 * worst_sat);
      std::printf("%s\n", dt.StepSummary().c_str());
    }
    if (!std::isnan(step_val))
      std::printf("step %5lld/%lld | val loss %.4f\n", static_cast<long long>(step + 1), static_cast<long long>(steps),
                  step_val);
    std::fflush(stdout);
    metrics.Step(step + 1, loss_value, lr, grad_norm_value, ms, tok_s, gflops, worst_sat, step_val);
    const int stop_signal = ckpt_dir.empty() ? 0 : dt.MaxOverRanks(StopSignal(), device);
    if (save_now || stop_signal != 0) {
      if (absl::Status s = save(step + 1); !s.ok()) return s;
    }
    if (stop_signal != 0) {
      std::printf("stopping after step %lld on signal %d (%s): saved a checkpoint in %s; --resume continues it\n",
                  static_cast<long long>(step + 1), stop_signal, strsignal(stop_signal), ckpt_dir.c_str());
      std::fflush(stdout);
      SetStopSignal(stop_signal);  // main exits 128 + it
      return absl::OkStatus();
    }
    if (stop_here) {
      std::printf("stopping after step %lld (--stop_after)\n", static_cast<long long>(step + 1));
      return absl::OkStatus();
    }
  }

  CatchStopSignals(false);  // a signal noted after the last step's checkpoint ends the process here, as usual

  // ---- summary and sample --------------------------------------------------------------------
  // NaN when no step was timed (only this process's first step ran).
  const double avg_ms = timed_steps > 0 ? total_ms / timed_steps : NAN;
  const double avg_tok_s = tokens_per_step / (avg_ms / 1000.0);
  if (timed_steps > 0) {
    std::printf("done: final val loss %.4f | %.1f ms/step | %.0f tok/s | %.1f GFLOP/s | peak RSS %.1f MB\n", val_loss,
                avg_ms, avg_tok_s, flops_per_step / (avg_ms / 1000.0) / 1e9, PeakRssMb());
  } else {
    std::printf("done: final val loss %.4f | no timed step (the first step of a run pays for set-up and is not "
                "timed) | peak RSS %.1f MB\n",
                val_loss, PeakRssMb());
  }
  if (cuda_graph) std::printf("step: %s\n", train_step.Mode().c_str());
  metrics.Final(val_loss, avg_ms, avg_tok_s, PeakRssMb());
  const int64_t n_sample = absl::GetFlag(FLAGS_sample_tokens);
  if (n_sample > 0 && data->text && data->vocab_size == ByteTokenizer::kVocabSize) {
    const std::vector<int64_t> ids = ByteTokenizer::PromptIds(absl::GetFlag(FLAGS_prompt), config.block_size);
    Generator gen(seed);
    const Tensor out = model.Generate(FromVector(ids, {1, static_cast<int64_t>(ids.size())}).To(device), n_sample,
                                      absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_top_k), &gen);
    std::vector<int64_t> tokens;
    for (double v : out.ToDoubles()) tokens.push_back(static_cast<int64_t>(v));
    absl::StatusOr<std::string> text = ByteTokenizer::Decode(tokens);
    if (text.ok()) std::printf("---- sample ----\n%s\n----------------\n", ByteTokenizer::Printable(*text).c_str());
  } else if (n_sample > 0) {
    std::printf("no end-of-run sample: the model's tokens are not bytes (%s, vocab %lld); sample_gpt prints "
                "token ids from its checkpoint\n",
                data->text ? "a text corpus" : "token shards", static_cast<long long>(data->vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace octet::gpt

int main(int argc, char** argv) {
  octet::gpt::StartStopSignalThread();  // first: every thread inherits the blocked signals
  absl::SetProgramUsageMessage("Trains a GPT at amp level O0/O1/O2. See --helpfull.");
  std::vector<char*> args = octet::gpt::NormalizeResumeFlag(argc, argv);  // a bare --resume
  const std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (rest.size() > 1) {
    std::fprintf(stderr, "train_gpt: error: unexpected argument '%s' (flags are --name=value)\n", rest[1]);
    return 1;
  }
  try {
    const absl::Status s = octet::gpt::Run();
    if (!s.ok()) {
      std::fprintf(stderr, "train_gpt: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    if (octet::gpt::StopSignal() != 0) return 128 + octet::gpt::StopSignal();  // saved, then stopped
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
