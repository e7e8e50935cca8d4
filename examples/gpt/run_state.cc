#include "examples/gpt/run_state.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <octet/core/crc32c.h>
#include <octet/core/error.h>
#include <octet/nn/checkpoint.h>

namespace octet::gpt {
namespace {

namespace fs = std::filesystem;

bool Exists(const fs::path& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

bool ParseResumeMode(const std::string& text, ResumeMode* mode) {
  if (text.empty() || text == "false" || text == "no") *mode = ResumeMode::kNo;
  else if (text == "true" || text == "yes" || text == "must") *mode = ResumeMode::kMust;
  else if (text == "auto") *mode = ResumeMode::kAuto;
  else return false;
  return true;
}

std::vector<char*> NormalizeResumeFlag(int argc, char** argv) {
  static char kTrue[] = "--resume=true";
  static char kFalse[] = "--resume=false";
  std::vector<char*> out(argv, argv + argc);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "--resume") == 0 || std::strcmp(argv[i], "-resume") == 0) out[i] = kTrue;
    if (std::strcmp(argv[i], "--noresume") == 0 || std::strcmp(argv[i], "-noresume") == 0) out[i] = kFalse;
  }
  return out;
}

absl::StatusOr<ResumePlan> PlanResume(const std::string& dir, ResumeMode mode, bool overwrite) {
  // A step directory as --ckpt_dir would get step directories nested inside it.
  const fs::path norm = fs::path(dir).lexically_normal();
  const std::string base = norm.filename().empty() ? norm.parent_path().filename().string() : norm.filename().string();
  std::string why;
  int64_t step;
  if (nn::ParseStepDirName(base, &step)) why = absl::StrCat("named ", base);
  for (const char* f : {"model.safetensors", "train_state.safetensors"})
    if (why.empty() && Exists(norm / f)) why = absl::StrCat("it holds ", f);
  if (!why.empty()) {
    const std::string parent =
        norm.filename().empty() ? norm.parent_path().parent_path().string() : norm.parent_path().string();
    return absl::InvalidArgumentError(absl::StrCat("--ckpt_dir '", dir, "' is a step directory (", why,
                                                   "), not a checkpoint directory; pass the directory that holds the "
                                                   "step directories",
                                                   parent.empty() ? "" : absl::StrCat(" ('", parent, "')")));
  }
  std::optional<nn::CheckpointDirInfo> info;
  try {
    info = nn::ScanCheckpointDir(dir);
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("--ckpt_dir: ", e.what()));
  }
  ResumePlan plan;
  if (mode != ResumeMode::kNo && info->newest() >= 0) {
    plan.step = info->newest();
    if (!info->latest_problem.empty()) {
      plan.notes.push_back(absl::StrCat("note: ", info->latest_problem, "; resuming from ",
                                        nn::StepDirName(plan.step)));
    }
    return plan;
  }
  if (mode == ResumeMode::kMust) {
    return absl::NotFoundError(absl::StrCat("--resume: no checkpoint to resume from in '", dir, "' (",
                                            info->Describe(),
                                            "); use --resume=auto to start from scratch when there is none"));
  }
  // From scratch: step directories of an earlier run must not be mixed with
  // (or overwritten by) this run's.
  std::vector<std::string> steps;
  for (int64_t s : info->complete_steps) steps.push_back(nn::StepDirName(s));
  for (const std::string& s : info->incomplete) steps.push_back(s.substr(0, s.find(' ')));
  if (steps.empty()) return plan;
  if (!overwrite) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--ckpt_dir '", dir, "' already holds checkpoints (", info->Describe(), "); ",
        info->complete_steps.empty() ? "none is complete" : "pass --resume to continue from the newest",
        ", or --overwrite to remove them and start from scratch"));
  }
  plan.remove = std::move(steps);
  return plan;
}

absl::Status RemoveOverwritten(const std::string& dir, ResumePlan& plan) {
  if (plan.remove.empty()) return absl::OkStatus();
  for (const std::string& s : plan.remove) {
    std::error_code ec;
    fs::remove_all(fs::path(dir) / s, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("--overwrite: cannot remove '", (fs::path(dir) / s).string(), "': ", ec.message()));
    }
  }
  std::error_code ec;
  fs::remove(fs::path(dir) / "LATEST", ec);
  plan.notes.push_back(absl::StrCat("--overwrite: removed ", plan.remove.size(), " step director",
                                    plan.remove.size() == 1 ? "y" : "ies", " from '", dir, "' (",
                                    absl::StrJoin(plan.remove, ", "), ")"));
  plan.remove.clear();
  return absl::OkStatus();
}

const std::vector<std::string>& RunIdentityKeys() {
  static const std::vector<std::string> keys = {
      "gpt.n_layer",   "gpt.n_head",     "gpt.n_embd",       "gpt.block_size", "gpt.vocab_size",
      "gpt.tie_weights", "gpt.bias",     "gpt.dropout",      "amp.level",      "amp.recipe",
      "train.seed",    "train.batch",    "train.seq_len",    "train.grad_accum", "train.steps",
      "train.state_dtype", "dataset.fingerprint", "dataset.tokenizer"};
  return keys;
}

absl::Status CheckRunAgrees(const std::map<std::string, std::string>& saved,
                            const std::map<std::string, std::string>& run, bool anyway,
                            std::vector<std::string>* warnings) {
  std::vector<std::string> diffs;
  for (const std::string& key : RunIdentityKeys()) {
    auto s = saved.find(key);
    auto r = run.find(key);
    const std::string sv = s == saved.end() ? "(missing)" : "'" + s->second + "'";
    const std::string rv = r == run.end() ? "(missing)" : "'" + r->second + "'";
    if (sv != rv) diffs.push_back(absl::StrCat(key, ": the checkpoint has ", sv, ", this run has ", rv));
  }
  if (diffs.empty()) return absl::OkStatus();
  if (!anyway) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--resume: the checkpoint is of another run: ", absl::StrJoin(diffs, "; "),
        ". Run with the checkpoint's settings, or pass --resume_anyway to resume regardless"));
  }
  for (const std::string& d : diffs) warnings->push_back(absl::StrCat("warning: --resume_anyway: ", d));
  return absl::OkStatus();
}

std::string DatasetFingerprint(const TokenDataset& train, const TokenDataset* val, bool in_memory) {
  uint32_t crc = 0;
  int64_t tokens[2] = {0, 0}, shards[2] = {0, 0};
  const TokenDataset* sets[2] = {&train, val};
  for (int k = 0; k < 2; ++k) {
    if (sets[k] == nullptr) continue;
    const TokenDataset& d = *sets[k];
    const std::string tag = k == 0 ? "train\n" : "val\n";
    crc = Crc32cExtend(crc, tag.data(), tag.size());
    for (int64_t i = 0; i < d.num_shards(); ++i) {
      tokens[k] += d.shard_tokens(i);
      ++shards[k];
      absl::StatusOr<std::shared_ptr<const std::vector<uint16_t>>> t =
          in_memory ? d.LoadShard(i) : absl::StatusOr<std::shared_ptr<const std::vector<uint16_t>>>(nullptr);
      if (in_memory && t.ok() && *t != nullptr) {
        crc = Crc32cExtend(crc, (*t)->data(), (*t)->size() * sizeof(uint16_t));
      } else {
        const std::string line = absl::StrCat(fs::path(d.shard_name(i)).filename().string(), " ", d.shard_tokens(i), "\n");
        crc = Crc32cExtend(crc, line.data(), line.size());
      }
    }
  }
  return absl::StrCat(in_memory ? "text" : "shards", ": ", tokens[0], " train + ", tokens[1], " val tokens",
                      in_memory ? "" : absl::StrCat(" in ", shards[0], " + ", shards[1], " files"), ", crc32c ",
                      Crc32cHex(crc));
}

}  // namespace octet::gpt
