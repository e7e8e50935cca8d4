// Where a train_gpt run starts, and whether a checkpoint belongs to it: the
// decisions behind --ckpt_dir, --resume, --resume=auto, --overwrite and
// --resume_anyway (README, "Checkpoints"), kept out of train_gpt.cc.
//
//   --resume (= --resume=true)  must resume: no complete checkpoint in
//                               --ckpt_dir is an error saying what is there
//   --resume=auto               resume when there is a checkpoint, else start
//   (no --resume)               start from scratch
//
// Starting from scratch in a directory that holds step directories is an
// error unless --overwrite, which removes them first (never silently mixing a
// new run's steps with an old run's). A --ckpt_dir that is itself a step
// directory is refused. Resuming takes the newest complete step directory
// (nn::ScanCheckpointDir; LATEST may be missing or stale), and the run's
// identity (model config, amp level and recipe, seed, batch shape, steps,
// data fingerprint, tokenizer) must equal the checkpoint's, unless
// --resume_anyway turns the mismatches into warnings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "examples/gpt/data.h"

namespace octet::gpt {

enum class ResumeMode { kNo, kMust, kAuto };

// "" | "false" | "no" -> kNo, "true" | "yes" | "must" -> kMust, "auto" -> kAuto.
bool ParseResumeMode(const std::string& text, ResumeMode* mode);

// absl needs a value for a string flag: rewrites a bare "--resume" (or
// "-resume") to "--resume=true" and "--noresume" to "--resume=false", up to a
// "--". The returned pointers live as long as argv.
std::vector<char*> NormalizeResumeFlag(int argc, char** argv);

struct ResumePlan {
  int64_t step = -1;                // the step directory to resume from; -1: from scratch
  std::vector<std::string> notes;   // to print: stale LATEST, removed checkpoints, ...
  std::vector<std::string> remove;  // --overwrite: the step directories RemoveOverwritten removes
};

// Decides where a run with --ckpt_dir=dir starts (see the top of this file);
// changes nothing. Errors name dir and what it holds: a step directory as
// dir, an unreadable dir, kMust without a complete checkpoint, step
// directories in the way of a fresh start without `overwrite`.
absl::StatusOr<ResumePlan> PlanResume(const std::string& dir, ResumeMode mode, bool overwrite);

// Removes plan.remove (and LATEST) from dir, noting it in plan.notes. A run
// calls it once it holds dir's lock (NOTE [checkpoint directory lock] in
// nn/checkpoint.h), so that it never removes a running run's checkpoints.
absl::Status RemoveOverwritten(const std::string& dir, ResumePlan& plan);

// The metadata keys a resumed run must agree on.
const std::vector<std::string>& RunIdentityKeys();

// Compares `saved` (the checkpoint's metadata) with `run` on RunIdentityKeys():
// each difference is named with both values ("train.seed: the checkpoint has
// 11, this run has 12"). An error listing them all, or, with `anyway`, the
// same lines in `warnings` and OK.
absl::Status CheckRunAgrees(const std::map<std::string, std::string>& saved,
                            const std::map<std::string, std::string>& run, bool anyway,
                            std::vector<std::string>* warnings);

// The identity of the training data, for "dataset.fingerprint": kind, sizes
// and CRC-32C of the tokens when `in_memory` (text corpora), else of the
// shard file names (without directories) and token counts.
std::string DatasetFingerprint(const TokenDataset& train, const TokenDataset* val, bool in_memory);

}  // namespace octet::gpt
