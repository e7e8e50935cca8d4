// Training checkpoints: everything a run needs to continue bit-identically,
// verified on load so that a damaged or mixed-up checkpoint is an error,
// never a silent wrong start.
//
// NOTE [checkpoint layout]: SaveTrainingState(dir, state) writes
//
//   dir/step_00000100/model.safetensors        the model tensors, by name
//   dir/step_00000100/train_state.safetensors  "optimizer/<name>" optimizer state
//                                               "extra/<name>"     extra tensors
//   dir/LATEST                                 "step_00000100\n"
//
// train_state.safetensors' __metadata__ holds "octet.format" =
// "octet-training-state", "octet.version" = "2", "step", "rng.seed",
// "rng.offset", "model.digest" (the digest of the model.safetensors written
// with it, NOTE [safetensors checksums]), "optimizer.<key>" for each
// optimizer scalar and "meta.<key>" for each caller metadata entry;
// model.safetensors' metadata holds "octet.step". Both files carry CRC-32C
// checksums of every tensor and of their metadata (NOTE [safetensors
// checksums] in nn/safetensors.h). FP8 tensors keep their scales (NOTE
// [safetensors fp8 scales]).
//
// Atomicity: both files are written (each fsync'ed) into a temporary
// directory "dir/.tmp.step_00000100.<pid>", which is renamed to
// "dir/step_00000100" (atomically swapped with an existing one of that name,
// then the old one is removed); LATEST is replaced atomically last. So a step
// directory exists only complete, and the newest complete step directory is
// the last finished save wherever a kill struck. Loading goes by the step
// directories (newest complete one), not by LATEST, which may be missing or
// stale after a kill; LATEST is kept for people and other tools. A save first
// removes the temporaries of interrupted saves (".tmp.step_*.<pid>"
// directories and "LATEST.tmp.<pid>" files) whose process is gone
// (kill(pid, 0) fails with ESRCH); a live process's are left alone.
//
// Errors: every function below throws octet::Error naming the path (and the
// file, tensor or key) on failure.
//
// Verification on load (each failure names the file, and the tensor or key):
// regular files only (a FIFO is an error, not a hang; nn/file_util_internal.h);
// every checksum; the step in both files equals the step directory's name; the
// model file is the one the training state was saved with (model.digest);
// values that cannot be right: a non-finite or negative "optimizer.lr", NaN or
// infinite model or optimizer tensor elements (FP8 NaN/inf codes included),
// FP8 scales not finite and > 0 or amax not finite and >= 0, and "extra/"
// tensors named "*amax_history" with an element not finite and >= 0 or
// "*scale" with an element not finite and > 0 or whose reciprocal overflows.
//
// What a bit-identical resume needs, and where it is: model weights
// (model.safetensors); optimizer step, lr, moments, master weights and state
// scales (optimizer/*, optimizer.* scalars); FP8 amax histories and scales of
// the amp recipe, loss-scaler state (extra/* tensors and meta.* scalars);
// the RNG (seed, offset) of octet's default generator (rng.*); the data
// sampler's position and anything else the program derives state from
// (meta.*: e.g. "data.epoch", "data.shard", "data.offset").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <octet/nn/safetensors.h>
#include <octet/optim/optimizer.h>

namespace octet::nn {

struct TrainingState {
  int64_t step = 0;
  optim::NamedTensors model;
  optim::OptimizerState optimizer;
  optim::NamedTensors extra;  // amax histories, ...
  uint64_t rng_seed = 0;
  uint64_t rng_offset = 0;
  std::map<std::string, std::string> metadata;  // data position, config, ...
};

// "step_00000100" (8 digits, more when the step needs them).
std::string StepDirName(int64_t step);
// Whether `name` is a step directory name ("step_" and digits); its step.
bool ParseStepDirName(const std::string& name, int64_t* step);

// Writes the checkpoint of state.step (see NOTE [checkpoint layout]); creates
// dir when missing and first removes stale temporaries of interrupted saves.
// Errors name the path: step < 0, tensors that safetensors refuses
// (nn/safetensors.h), any I/O failure (the temporary directory is removed,
// LATEST and existing checkpoints are untouched).
void SaveTrainingState(const std::string& dir, const TrainingState& state);
void SaveTrainingState(const std::string& dir, int64_t step, const optim::NamedTensors& model,
                       const optim::OptimizerState& optimizer, const optim::NamedTensors& extra, uint64_t rng_seed,
                       uint64_t rng_offset, const std::map<std::string, std::string>& metadata);

// Checks, before a run spends hours, that SaveTrainingState could write into
// dir: creates dir when missing, then creates and removes a temporary
// directory there as a save does (".tmp.step_0.<pid>", a name no save uses and
// that an interrupted check leaves for the next save to remove). Errors name
// dir and the reason (permission denied, read-only file system, not a
// directory, ...). Free space is not checked: it may change before the save.
void CheckCheckpointDirWritable(const std::string& dir);

// NOTE [checkpoint directory lock]: a run that saves into a directory holds a
// CheckpointDirLock on it for as long as it runs, an exclusive flock(2) on
// dir/.lock, which holds "pid P on host H" of the holder. Another lock of the
// directory (another run, another machine sharing it where the file system
// forwards locks, or a second lock in this process) is an error naming the
// holder: two runs saving into one directory would interleave their step
// directories, and a later --resume would take whichever is newest. The
// kernel drops the lock when the process ends, however it ends, so a lock is
// never stale; the file stays and ScanCheckpointDir leaves it out. Where the
// file system cannot lock (flock fails with ENOLCK, EOPNOTSUPP, ENOSYS or
// EINVAL), the object holds nothing and unavailable() says so, for the
// program to print.
inline constexpr const char* kCheckpointLockFile = ".lock";

class CheckpointDirLock {
 public:
  // Creates dir (and dir/.lock) when missing and locks it. Throws
  // octet::Error naming dir: held by another (with what its lock file says),
  // or a directory or lock file that cannot be created or opened.
  explicit CheckpointDirLock(const std::string& dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  const std::string& dir() const { return dir_; }
  // "" when the lock is held; else why this file system could not lock.
  const std::string& unavailable() const { return unavailable_; }

 private:
  std::string dir_;
  int fd_ = -1;
  std::string unavailable_;
};

// What a checkpoint directory holds (ScanCheckpointDir).
struct CheckpointDirInfo {
  bool exists = false;
  std::vector<int64_t> complete_steps;  // ascending: step directories holding both files
  std::vector<std::string> incomplete;  // "step_00000300 (no train_state.safetensors)", ...
  std::vector<std::string> temporaries;  // names of interrupted saves' leftovers
  std::vector<std::string> others;       // every other entry, by name
  std::vector<std::string> described;    // every entry in name order, incomplete ones with the reason
  std::string latest;                    // LATEST's step directory name, "" when unusable
  std::string latest_problem;            // why LATEST is unusable or stale, "" when fine
  int64_t num_entries = 0;

  int64_t newest() const { return complete_steps.empty() ? -1 : complete_steps.back(); }
  // "empty", or e.g. "3 entries: notes.txt, step_00000300 (no ...), ..." (at most 8 named).
  std::string Describe() const;
};

// Lists `dir` without loading anything (the lock file of NOTE [checkpoint
// directory lock] is left out). A missing dir gives exists = false;
// a dir that cannot be listed (EACCES, EIO, not a directory) is an error
// naming it. LATEST is read only when it is a regular file (a FIFO is
// reported in latest_problem, never opened).
CheckpointDirInfo ScanCheckpointDir(const std::string& dir);

// Removes every complete step directory of dir but the newest `keep` (>= 1),
// oldest first; returns their names. Each is first renamed to a temporary
// (".tmp.step_N.<pid>", swept by a later save if this process dies before it
// is gone), so a loader sees a step directory whole or not at all. Incomplete
// step directories and other entries are left alone. Errors name dir and the
// directory that could not be removed (those before it are gone).
std::vector<std::string> PruneCheckpoints(const std::string& dir, int64_t keep);

// Removes dir's temporaries of interrupted saves whose process is gone
// (NOTE [checkpoint layout]); returns their names. Called by every save.
std::vector<std::string> RemoveStaleCheckpointTemporaries(const std::string& dir);

// Loads the newest complete step directory of dir (LATEST is not needed), or
// dir itself when it is a step directory (holds model.safetensors). Errors:
// no complete step directory (the message says what dir holds), and every
// verification of NOTE [checkpoint layout].
TrainingState LoadTrainingState(const std::string& dir);
// Loads dir/StepDirName(step).
TrainingState LoadTrainingState(const std::string& dir, int64_t step);

}  // namespace octet::nn
