#include <octet/nn/checkpoint.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include <octet/core/crc32c.h>
#include <octet/nn/file_util_internal.h>
#include <octet/nn/checkpoint_internal.h>
#include <octet/nn/safetensors_internal.h>
#include <octet/optim/optimizer.h>

namespace octet::nn {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "train_state.safetensors";
constexpr const char* kLatestFile = "LATEST";
constexpr const char* kFormat = "octet-training-state";
constexpr const char* kVersion = "2";
constexpr const char* kOptimizerPrefix = "optimizer/";
constexpr const char* kExtraPrefix = "extra/";
constexpr const char* kTmpDirPrefix = ".tmp.step_";
constexpr const char* kLatestTmpPrefix = "LATEST.tmp.";

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

// This process's temporary for the step directory `name` in dir:
// "dir/.tmp.<name>.<pid>", the form TemporaryPid reads (and a later save
// sweeps once this process is gone).
std::string OwnTemporary(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / absl::StrCat(".tmp.", name, ".", ::getpid())).string();
}

// The pid of an interrupted save's temporary: ".tmp.step_<digits>.<pid>" or
// "LATEST.tmp.<pid>"; -1 for any other name.
int64_t TemporaryPid(const std::string& name) {
  std::string rest;
  if (name.rfind(kLatestTmpPrefix, 0) == 0) {
    rest = name.substr(std::strlen(kLatestTmpPrefix));
  } else if (name.rfind(kTmpDirPrefix, 0) == 0) {
    const std::string tail = name.substr(std::strlen(kTmpDirPrefix));
    const size_t dot = tail.find('.');
    uint64_t step;
    if (dot == std::string::npos || !ParseUint64(tail.substr(0, dot), &step)) return -1;
    rest = tail.substr(dot + 1);
  } else {
    return -1;
  }
  uint64_t pid;
  if (!ParseUint64(rest, &pid) || pid == 0 || pid > INT32_MAX) return -1;
  return static_cast<int64_t>(pid);
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

bool ParseStepDirName(const std::string& name, int64_t* step) {
  if (name.size() < 6 || name.compare(0, 5, "step_") != 0) return false;
  uint64_t v;
  if (!ParseUint64(name.substr(5), &v) || v > static_cast<uint64_t>(INT64_MAX)) return false;
  *step = static_cast<int64_t>(v);
  return true;
}

absl::Status internal::CreateCheckpointDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("checkpoint '", dir, "': cannot create the directory: ", ec.message()));
}

absl::StatusOr<std::vector<std::string>> internal::RemoveStaleCheckpointTemporaries(const std::string& dir) {
  absl::StatusOr<std::vector<DirEntry>> entries = ListDirectory(dir);
  if (!entries.ok()) return entries.status();
  std::vector<std::string> removed;
  for (const DirEntry& e : *entries) {
    const int64_t pid = TemporaryPid(e.name);
    if (pid < 0 || pid == ::getpid()) continue;
    // Only when the owner is gone: EPERM means it lives (as another user).
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ec;
    fs::remove_all(fs::path(dir) / e.name, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("checkpoint '", dir, "': cannot remove the stale temporary '", e.name,
                                                 "': ", ec.message()));
    }
    removed.push_back(e.name);
  }
  return removed;
}

absl::StatusOr<std::vector<std::string>> internal::PruneCheckpoints(const std::string& dir, int64_t keep) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", dir, "': the number of checkpoints to keep must be >= 1, got ", keep));
  }
  absl::StatusOr<CheckpointDirInfo> info = ScanCheckpointDir(dir);
  if (!info.ok()) return info.status();
  const std::vector<int64_t>& steps = info->complete_steps;
  std::vector<std::string> removed;
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
    const std::string name = StepDirName(steps[i]);
    const std::string tmp = OwnTemporary(dir, name);
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (::rename((fs::path(dir) / name).c_str(), tmp.c_str()) != 0) {
      return Errno(errno, absl::StrCat("checkpoint '", dir, "': cannot remove the old checkpoint '", name, "'"));
    }
    fs::remove_all(tmp, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("checkpoint '", dir, "': cannot remove the old checkpoint '", name,
                                                 "' (now '", tmp, "'): ", ec.message()));
    }
    removed.push_back(name);
  }
  if (!removed.empty()) FsyncPath(dir);
  return removed;
}

absl::Status internal::CheckCheckpointDirWritable(const std::string& dir) {
  if (absl::Status s = CreateCheckpointDir(dir); !s.ok()) return s;
  const std::string probe = OwnTemporary(dir, "step_0");  // a name no save uses
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno(errno, absl::StrCat("checkpoint '", dir, "': a save could not write there: cannot create '", probe,
                                     "'"));
  }
  if (::rmdir(probe.c_str()) != 0) {
    return Errno(errno, absl::StrCat("checkpoint '", dir, "': cannot remove '", probe, "'"));
  }
  return absl::OkStatus();
}

absl::Status internal::SaveTrainingState(const std::string& dir, const TrainingState& state) {
  if (state.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", dir, "': step must be >= 0, got ", state.step));
  }
  if (absl::Status s = CreateCheckpointDir(dir); !s.ok()) return s;
  std::error_code ec;
  if (absl::StatusOr<std::vector<std::string>> r = RemoveStaleCheckpointTemporaries(dir); !r.ok()) return r.status();

  const std::string name = StepDirName(state.step);
  const std::string final_dir = (fs::path(dir) / name).string();
  const std::string tmp_dir = OwnTemporary(dir, name);
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
  uint32_t model_digest = 0;
  if (absl::Status s = internal::SaveSafetensors((fs::path(tmp_dir) / kModelFile).string(), state.model, model_meta, &model_digest);
      !s.ok()) {
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
      {"model.digest", Crc32cHex(model_digest)},
  };
  for (const auto& [k, v] : state.optimizer.scalars) meta["optimizer." + k] = v;
  for (const auto& [k, v] : state.metadata) meta["meta." + k] = v;
  if (absl::Status s = internal::SaveSafetensors((fs::path(tmp_dir) / kStateFile).string(), tensors, meta); !s.ok()) {
    return fail(s);
  }
  FsyncPath(tmp_dir);

  bool exchanged = false;
  if (absl::Status s = RenameDirIntoPlace(tmp_dir, final_dir, &exchanged); !s.ok()) return fail(s);
  if (exchanged) fs::remove_all(tmp_dir, ec);  // the previous checkpoint of this step
  FsyncPath(dir);
  return WriteFileAtomically((fs::path(dir) / kLatestFile).string(), name + "\n");
}

absl::Status internal::SaveTrainingState(const std::string& dir, int64_t step, const optim::NamedTensors& model,
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
  return internal::SaveTrainingState(dir, s);
}

// ---- scanning -------------------------------------------------------------------

std::string CheckpointDirInfo::Describe() const {
  if (!exists) return "the directory does not exist";
  if (num_entries == 0) return "the directory is empty";
  const std::vector<std::string>& parts = described;
  constexpr size_t kMax = 8;
  std::string out = absl::StrCat(num_entries, num_entries == 1 ? " entry: " : " entries: ");
  for (size_t i = 0; i < parts.size() && i < kMax; ++i) absl::StrAppend(&out, i ? ", " : "", parts[i]);
  if (parts.size() > kMax) absl::StrAppend(&out, " and ", parts.size() - kMax, " more");
  return out;
}

absl::StatusOr<CheckpointDirInfo> internal::ScanCheckpointDir(const std::string& dir) {
  CheckpointDirInfo info;
  absl::StatusOr<std::vector<DirEntry>> entries = ListDirectory(dir);
  if (absl::IsNotFound(entries.status())) return info;
  if (!entries.ok()) return entries.status();
  std::erase_if(*entries, [](const DirEntry& e) { return e.name == kCheckpointLockFile; });
  info.exists = true;
  info.num_entries = static_cast<int64_t>(entries->size());
  bool has_latest = false;
  for (const DirEntry& e : *entries) {
    int64_t step;
    if (e.name == kLatestFile) {
      has_latest = true;
      const std::string path = (fs::path(dir) / e.name).string();
      absl::StatusOr<std::string> text = ReadSmallRegularFile(path, absl::StrCat("'", path, "': "), 4096);
      if (!text.ok()) {
        info.latest_problem = std::string(text.status().message());
        continue;
      }
      std::string name = *text;
      while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
      if (!ParseStepDirName(name, &step)) {
        info.latest_problem = absl::StrCat("'", path, "' holds '", name.substr(0, 64),
                                           "', not a step directory name like step_00000100");
      } else {
        info.latest = name;
      }
    } else if (TemporaryPid(e.name) >= 0) {
      info.temporaries.push_back(e.name);
    } else if (ParseStepDirName(e.name, &step)) {
      if (e.type != DirEntry::Type::kDirectory) {
        info.incomplete.push_back(absl::StrCat(e.name, " (", DescribeFileType(e.mode), ", not a directory)"));
        continue;
      }
      std::vector<std::string> missing;
      for (const char* f : {kModelFile, kStateFile}) {
        struct stat st;
        const std::string p = (fs::path(dir) / e.name / f).string();
        if (::stat(p.c_str(), &st) != 0) {
          missing.push_back(absl::StrCat("no ", f));
        } else if (!S_ISREG(st.st_mode)) {
          missing.push_back(absl::StrCat(f, " is ", DescribeFileType(st.st_mode)));
        }
      }
      if (missing.empty()) {
        info.complete_steps.push_back(step);
      } else {
        info.incomplete.push_back(absl::StrCat(e.name, " (", absl::StrJoin(missing, ", "), ")"));
      }
    } else {
      info.others.push_back(e.name);
    }
  }
  std::sort(info.complete_steps.begin(), info.complete_steps.end());
  for (const DirEntry& e : *entries) {  // in name order; incomplete step directories with the reason
    std::string d = e.name;
    for (const std::string& inc : info.incomplete)
      if (inc.rfind(e.name + " (", 0) == 0) d = inc;
    info.described.push_back(d);
  }
  if (info.latest_problem.empty() && !info.complete_steps.empty()) {
    const std::string newest = StepDirName(info.newest());
    if (!has_latest) {
      info.latest_problem = absl::StrCat("no LATEST file (the newest complete checkpoint is ", newest, ")");
    } else if (info.latest != newest) {
      info.latest_problem = absl::StrCat("LATEST names ", info.latest, " but the newest complete checkpoint is ", newest);
    }
  }
  return info;
}

// ---- loading ----------------------------------------------------------------------

namespace {

// Index of the first NaN/inf element of a floating tensor (FP8 codes
// included), or -1.
int64_t FirstNonFinite(const Tensor& t) {
  const int64_t n = t.numel();
  const uint8_t* p = static_cast<const uint8_t*>(t.raw_data());
  switch (t.dtype()) {
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t b;
        std::memcpy(&b, p + 4 * i, 4);
        if ((b & 0x7F800000u) == 0x7F800000u) return i;
      }
      return -1;
    case DType::kFloat64:
      for (int64_t i = 0; i < n; ++i) {
        uint64_t b;
        std::memcpy(&b, p + 8 * i, 8);
        if ((b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull) return i;
      }
      return -1;
    case DType::kBFloat16:
    case DType::kFloat16: {
      const uint16_t mask = t.dtype() == DType::kBFloat16 ? 0x7F80 : 0x7C00;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        if ((b & mask) == mask) return i;
      }
      return -1;
    }
    case DType::kFloat8E4M3:  // no inf; NaN is S.1111.111
      for (int64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7F) == 0x7F) return i;
      return -1;
    case DType::kFloat8E5M2:
      for (int64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7C) == 0x7C) return i;
      return -1;
    default:
      return -1;
  }
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// NOTE [checkpoint layout], values that cannot be right.
std::string internal::BadValue(const std::string& name, const Tensor& tensor, bool scaling_state,
                               const std::string& holder) {
  if (!IsFloat(tensor.dtype())) return "";
  const Tensor t = tensor.To(kCPU).Contiguous();
  const int64_t bad = FirstNonFinite(t);
  if (bad >= 0) {
    return absl::StrCat("holds ", t.Flatten().Slice(0, bad, bad + 1).Item(), " at element ", bad, "; ", holder,
                        " must hold finite values");
  }
  if (!scaling_state || t.dtype() != DType::kFloat32) return "";
  const bool history = EndsWith(name, "amax_history"), scale = !history && EndsWith(name, "scale");
  if (!history && !scale) return "";
  const float* v = static_cast<const float*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (history ? v[i] < 0.0f : v[i] <= 0.0f) {
      return absl::StrCat("holds ", v[i], " at element ", i,
                          history ? "; an amax must be >= 0" : "; a scale must be > 0");
    }
    // A scale too small to invert: the quantized values would dequantize to NaN.
    if (scale && !std::isfinite(1.0f / v[i]))
      return absl::StrCat("holds ", v[i], " at element ", i, "; a scale must have a finite reciprocal");
  }
  return "";
}

namespace {

absl::Status CheckValues(const std::string& file, const std::string& prefix, const optim::NamedTensors& tensors,
                         bool scaling_state) {
  for (const auto& [n, t] : tensors) {
    const std::string bad = internal::BadValue(n, t, scaling_state, "a checkpoint");
    if (!bad.empty()) {
      return absl::DataLossError(absl::StrCat("checkpoint file '", file, "': tensor '", prefix, n, "' ", bad));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingState> LoadStepDir(const std::string& step_dir) {
  const std::string model_path = (fs::path(step_dir) / kModelFile).string();
  const std::string state_path = (fs::path(step_dir) / kStateFile).string();
  absl::StatusOr<SafetensorsFile> model = internal::LoadSafetensors(model_path);
  if (!model.ok()) return model.status();
  absl::StatusOr<SafetensorsFile> st = internal::LoadSafetensors(state_path);
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
    return bad(absl::StrCat("unsupported octet.version '", version ? *version : "", "' (expected ", kVersion,
                            version && *version == "1" ? "; version 1 checkpoints carry no checksums" : "", ")"));
  }
  for (const auto* f : {&*model, &*st}) {
    if (!f->checksummed) {
      return absl::DataLossError(absl::StrCat("checkpoint file '", f == &*model ? model_path : state_path,
                                              "' carries no checksums (octet.crc32c.* metadata was removed?)"));
    }
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
  // Swapped or renamed step directories.
  int64_t dir_step;
  const std::string dir_name = fs::path(step_dir).lexically_normal().filename().string().empty()
                                   ? fs::path(step_dir).lexically_normal().parent_path().filename().string()
                                   : fs::path(step_dir).lexically_normal().filename().string();
  if (ParseStepDirName(dir_name, &dir_step) && dir_step != out.step) {
    return absl::DataLossError(absl::StrCat("checkpoint '", step_dir, "': the directory is named ", dir_name,
                                            " but its files are of step ", out.step,
                                            " (step directories renamed or swapped?)"));
  }
  const std::string* digest = get("model.digest");
  if (digest == nullptr || *digest != Crc32cHex(model->digest)) {
    return absl::DataLossError(absl::StrCat("checkpoint '", step_dir, "': ", kModelFile, " (digest ",
                                            Crc32cHex(model->digest), ") is not the model file ", kStateFile,
                                            " was saved with (model.digest ", digest ? *digest : "missing",
                                            "): files of different runs or steps were mixed"));
  }
  for (const auto& [k, v] : meta) {
    if (k.rfind("optimizer.", 0) == 0) out.optimizer.scalars[k.substr(10)] = v;
    if (k.rfind("meta.", 0) == 0) out.metadata[k.substr(5)] = v;
  }
  if (auto lr = out.optimizer.scalars.find("lr"); lr != out.optimizer.scalars.end()) {
    double v = 0;
    if (!optim::ParseDouble(lr->second, &v) || !std::isfinite(v) || v < 0) {
      return bad(absl::StrCat("optimizer.lr = '", lr->second, "'; a learning rate must be a finite number >= 0"));
    }
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
  if (absl::Status s = CheckValues(model_path, "", out.model, false); !s.ok()) return s;
  if (absl::Status s = CheckValues(state_path, kOptimizerPrefix, out.optimizer.tensors, false); !s.ok()) return s;
  if (absl::Status s = CheckValues(state_path, kExtraPrefix, out.extra, true); !s.ok()) return s;
  return out;
}

}  // namespace

absl::StatusOr<TrainingState> internal::LoadTrainingState(const std::string& dir) {
  struct stat st;
  if (::stat((fs::path(dir) / kModelFile).c_str(), &st) == 0) return LoadStepDir(dir);
  absl::StatusOr<CheckpointDirInfo> info = ScanCheckpointDir(dir);
  if (!info.ok()) return info.status();
  if (info->complete_steps.empty()) {
    return absl::NotFoundError(absl::StrCat("checkpoint '", dir, "': no complete step directory (", info->Describe(),
                                            ")"));
  }
  return LoadStepDir((fs::path(dir) / StepDirName(info->newest())).string());
}

absl::StatusOr<TrainingState> internal::LoadTrainingState(const std::string& dir, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint '", dir, "': step must be >= 0"));
  return LoadStepDir((fs::path(dir) / StepDirName(step)).string());
}

// ---- the public, throwing API ----------------------------------------------------

namespace {

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  internal::ThrowIfError(v.status());
  return *std::move(v);
}

}  // namespace

void SaveTrainingState(const std::string& dir, const TrainingState& state) {
  internal::ThrowIfError(internal::SaveTrainingState(dir, state));
}

void SaveTrainingState(const std::string& dir, int64_t step, const optim::NamedTensors& model,
                       const optim::OptimizerState& optimizer, const optim::NamedTensors& extra, uint64_t rng_seed,
                       uint64_t rng_offset, const std::map<std::string, std::string>& metadata) {
  internal::ThrowIfError(
      internal::SaveTrainingState(dir, step, model, optimizer, extra, rng_seed, rng_offset, metadata));
}

void CheckCheckpointDirWritable(const std::string& dir) {
  internal::ThrowIfError(internal::CheckCheckpointDirWritable(dir));
}

CheckpointDirInfo ScanCheckpointDir(const std::string& dir) { return ValueOrThrow(internal::ScanCheckpointDir(dir)); }

std::vector<std::string> PruneCheckpoints(const std::string& dir, int64_t keep) {
  return ValueOrThrow(internal::PruneCheckpoints(dir, keep));
}

std::vector<std::string> RemoveStaleCheckpointTemporaries(const std::string& dir) {
  return ValueOrThrow(internal::RemoveStaleCheckpointTemporaries(dir));
}

TrainingState LoadTrainingState(const std::string& dir) { return ValueOrThrow(internal::LoadTrainingState(dir)); }

TrainingState LoadTrainingState(const std::string& dir, int64_t step) {
  return ValueOrThrow(internal::LoadTrainingState(dir, step));
}

}  // namespace octet::nn
