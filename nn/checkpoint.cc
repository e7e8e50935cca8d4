#include "nn/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octet::nn {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "train_state.safetensors";
constexpr const char* kLatestFile = "LATEST";
constexpr const char* kFormat = "octet-training-state";
constexpr const char* kVersion = "1";
constexpr const char* kOptimizerPrefix = "optimizer/";
constexpr const char* kExtraPrefix = "extra/";

absl::Status Errno(int err, const std::string& what) {
  return absl::ErrnoToStatus(err, what);  // appends ": <strerror>"
}

void FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

bool ParseUint64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool IsStepDirName(const std::string& name, int64_t* step) {
  if (name.size() < 6 || name.compare(0, 5, "step_") != 0) return false;
  uint64_t v;
  if (!ParseUint64(name.substr(5), &v) || v > static_cast<uint64_t>(INT64_MAX)) return false;
  *step = static_cast<int64_t>(v);
  return true;
}

// Swaps `from` into `to`'s place. When `to` exists it is atomically exchanged
// (renameat2 RENAME_EXCHANGE) and `from` then holds the old directory, which
// the caller removes.
absl::Status RenameDirIntoPlace(const std::string& from, const std::string& to, bool* exchanged) {
  *exchanged = false;
  if (::rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  if (errno != ENOTEMPTY && errno != EEXIST) return Errno(errno, absl::StrCat("renaming '", from, "' to '", to, "'"));
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    *exchanged = true;
    return absl::OkStatus();
  }
  return Errno(errno, absl::StrCat("replacing '", to, "' with '", from, "'"));
}

}  // namespace

std::string StepDirName(int64_t step) { return absl::StrFormat("step_%08d", step); }

absl::Status SaveTrainingState(const std::string& dir, const TrainingState& state) {
  if (state.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", dir, "': step must be >= 0, got ", state.step));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("checkpoint '", dir, "': cannot create the directory: ", ec.message()));

  const std::string name = StepDirName(state.step);
  const std::string final_dir = (fs::path(dir) / name).string();
  const std::string tmp_dir = (fs::path(dir) / absl::StrCat(".tmp.", name, ".", ::getpid())).string();
  fs::remove_all(tmp_dir, ec);
  if (::mkdir(tmp_dir.c_str(), 0755) != 0) {
    return Errno(errno, absl::StrCat("checkpoint '", dir, "': cannot create '", tmp_dir, "'"));
  }
  auto fail = [&](absl::Status s) {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    return s;
  };

  std::map<std::string, std::string> model_meta = {{"octet.step", std::to_string(state.step)}};
  if (absl::Status s = SaveSafetensors((fs::path(tmp_dir) / kModelFile).string(), state.model, model_meta); !s.ok()) {
    return fail(s);
  }

  optim::NamedTensors tensors;
  tensors.reserve(state.optimizer.tensors.size() + state.extra.size());
  for (const auto& [n, t] : state.optimizer.tensors) tensors.emplace_back(kOptimizerPrefix + n, t);
  for (const auto& [n, t] : state.extra) tensors.emplace_back(kExtraPrefix + n, t);
  std::map<std::string, std::string> meta = {
      {"octet.format", kFormat},
      {"octet.version", kVersion},
      {"step", std::to_string(state.step)},
      {"rng.seed", std::to_string(state.rng_seed)},
      {"rng.offset", std::to_string(state.rng_offset)},
  };
  for (const auto& [k, v] : state.optimizer.scalars) meta["optimizer." + k] = v;
  for (const auto& [k, v] : state.metadata) meta["meta." + k] = v;
  if (absl::Status s = SaveSafetensors((fs::path(tmp_dir) / kStateFile).string(), tensors, meta); !s.ok()) {
    return fail(s);
  }
  FsyncPath(tmp_dir);

  bool exchanged = false;
  if (absl::Status s = RenameDirIntoPlace(tmp_dir, final_dir, &exchanged); !s.ok()) return fail(s);
  if (exchanged) fs::remove_all(tmp_dir, ec);  // the previous checkpoint of this step
  FsyncPath(dir);
  return WriteFileAtomically((fs::path(dir) / kLatestFile).string(), name + "\n");
}

absl::Status SaveTrainingState(const std::string& dir, int64_t step, const optim::NamedTensors& model,
                               const optim::OptimizerState& optimizer, const optim::NamedTensors& extra,
                               uint64_t rng_seed, uint64_t rng_offset,
                               const std::map<std::string, std::string>& metadata) {
  TrainingState s;
  s.step = step;
  s.model = model;
  s.optimizer = optimizer;
  s.extra = extra;
  s.rng_seed = rng_seed;
  s.rng_offset = rng_offset;
  s.metadata = metadata;
  return SaveTrainingState(dir, s);
}

namespace {

absl::StatusOr<TrainingState> LoadStepDir(const std::string& step_dir) {
  const std::string model_path = (fs::path(step_dir) / kModelFile).string();
  const std::string state_path = (fs::path(step_dir) / kStateFile).string();
  absl::StatusOr<SafetensorsFile> model = LoadSafetensors(model_path);
  if (!model.ok()) return model.status();
  absl::StatusOr<SafetensorsFile> st = LoadSafetensors(state_path);
  if (!st.ok()) return st.status();

  auto bad = [&](const std::string& problem) {
    return absl::DataLossError(absl::StrCat("training state '", state_path, "': ", problem));
  };
  const auto& meta = st->metadata;
  auto get = [&](const char* key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  const std::string* format = get("octet.format");
  if (format == nullptr || *format != kFormat) return bad("not an octet training state (octet.format is missing)");
  const std::string* version = get("octet.version");
  if (version == nullptr || *version != kVersion) {
    return bad(absl::StrCat("unsupported octet.version '", version ? *version : "", "' (expected ", kVersion, ")"));
  }
  TrainingState out;
  uint64_t step = 0;
  const std::string* step_text = get("step");
  if (step_text == nullptr || !ParseUint64(*step_text, &step) || step > static_cast<uint64_t>(INT64_MAX)) {
    return bad("'step' is missing or not a non-negative integer");
  }
  out.step = static_cast<int64_t>(step);
  for (const char* key : {"rng.seed", "rng.offset"}) {
    const std::string* v = get(key);
    uint64_t x;
    if (v == nullptr || !ParseUint64(*v, &x)) return bad(absl::StrCat("'", key, "' is missing or not an integer"));
    (std::strcmp(key, "rng.seed") == 0 ? out.rng_seed : out.rng_offset) = x;
  }
  auto model_step = model->metadata.find("octet.step");
  if (model_step == model->metadata.end() || model_step->second != *step_text) {
    return absl::DataLossError(absl::StrCat("checkpoint '", step_dir, "': ", kModelFile, " is of step ",
                                            model_step == model->metadata.end() ? "?" : model_step->second, " but ",
                                            kStateFile, " is of step ", *step_text));
  }
  for (const auto& [k, v] : meta) {
    if (k.rfind("optimizer.", 0) == 0) out.optimizer.scalars[k.substr(10)] = v;
    if (k.rfind("meta.", 0) == 0) out.metadata[k.substr(5)] = v;
  }
  for (auto& [n, t] : st->tensors) {
    if (n.rfind(kOptimizerPrefix, 0) == 0) {
      out.optimizer.tensors.emplace_back(n.substr(std::strlen(kOptimizerPrefix)), std::move(t));
    } else if (n.rfind(kExtraPrefix, 0) == 0) {
      out.extra.emplace_back(n.substr(std::strlen(kExtraPrefix)), std::move(t));
    } else {
      return bad(absl::StrCat("unexpected tensor '", n, "' (names start with optimizer/ or extra/)"));
    }
  }
  out.model = std::move(model->tensors);
  return out;
}

}  // namespace

absl::StatusOr<TrainingState> LoadTrainingState(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kModelFile, ec)) return LoadStepDir(dir);
  const std::string latest = (fs::path(dir) / kLatestFile).string();
  std::ifstream in(latest);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("checkpoint '", dir, "': no ", kLatestFile, " file and no ", kModelFile,
                                            " (not a checkpoint directory)"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string name = ss.str();
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  int64_t step;
  if (!IsStepDirName(name, &step)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint '", latest, "': expected a step directory name like step_00000100, got '", name, "'"));
  }
  return LoadStepDir((fs::path(dir) / name).string());
}

absl::StatusOr<TrainingState> LoadTrainingState(const std::string& dir, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint '", dir, "': step must be >= 0"));
  return LoadStepDir((fs::path(dir) / StepDirName(step)).string());
}

}  // namespace octet::nn
