#include <octet/distributed/init.h>

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include <octet/distributed/gloo_group.h>
#if OCTET_WITH_NCCL  // set for this file by CMakeLists.txt
#include <octet/distributed/cuda/nccl_group.h>
#endif
#include <octet/distributed/redis_store.h>

namespace octet::dist {
namespace {

const char* GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : nullptr;
}

void ParseIntVar(const char* name, const char* text, int64_t* out) {
  if (!absl::SimpleAtoi(text, out)) {
    OCTET_FAIL(absl::StrCat(name, "='", text, "' is not an integer"));
  }
}

}  // namespace

DistEnv ReadDistEnv() {
  DistEnv env;
  int64_t rank = 0, size = 1;
  const char* rank_name = "OCTET_RANK";
  const char* size_name = "OCTET_WORLD_SIZE";
  if (GetEnv("OCTET_RANK") != nullptr || GetEnv("OCTET_WORLD_SIZE") != nullptr) {
    env.source = "OCTET_*";
  } else if (GetEnv("SLURM_PROCID") != nullptr && GetEnv("SLURM_NTASKS") != nullptr) {
    env.source = "SLURM_*";
    rank_name = "SLURM_PROCID";
    size_name = "SLURM_NTASKS";
  } else {
    env.source = "default";
  }
  if (env.source != "default") {
    if (GetEnv(rank_name) == nullptr || GetEnv(size_name) == nullptr) {
      OCTET_FAIL(
          absl::StrCat("set both ", rank_name, " and ", size_name, " (only one of them is set)"));
    }
    ParseIntVar(rank_name, GetEnv(rank_name), &rank);
    ParseIntVar(size_name, GetEnv(size_name), &size);
  }
  if (size < 1 || size > 4096) {
    OCTET_FAIL(absl::StrCat(size_name, "=", size, " is not a world size in [1, 4096]"));
  }
  if (rank < 0 || rank >= size) {
    OCTET_FAIL(
        absl::StrCat(rank_name, "=", rank, " is not a rank of a world of ", size, " (", size_name, ")"));
  }
  env.rank = static_cast<int>(rank);
  env.world_size = static_cast<int>(size);
  if (const char* m = GetEnv("OCTET_MASTER")) env.master = m;
  if (const char* id = GetEnv("OCTET_RUN_ID")) env.run_id = id;
  if (const char* h = GetEnv("OCTET_HOSTNAME")) env.hostname = h;
  if (const char* b = GetEnv("OCTET_BACKEND")) env.backend = b;
  if (env.backend != "gloo" && env.backend != "nccl") {
    OCTET_FAIL(absl::StrCat("OCTET_BACKEND='", env.backend, "' (expected gloo or nccl)"));
  }
  env.local_rank = env.rank;
  if (const char* lr = GetEnv("OCTET_LOCAL_RANK")) {
    int64_t v = 0;
    ParseIntVar("OCTET_LOCAL_RANK", lr, &v);
    if (v < 0 || v > 4095) OCTET_FAIL(absl::StrCat("OCTET_LOCAL_RANK=", v, " is not a local rank in [0, 4095]"));
    env.local_rank = static_cast<int>(v);
  }
  if (const char* t = GetEnv("OCTET_TIMEOUT_MS")) {
    int64_t ms = 0;
    ParseIntVar("OCTET_TIMEOUT_MS", t, &ms);
    if (ms <= 0) OCTET_FAIL(absl::StrCat("OCTET_TIMEOUT_MS=", ms, " must be positive"));
    env.timeout = std::chrono::milliseconds(ms);
  }
  if (env.world_size > 1 && env.master.empty()) {
    OCTET_FAIL(absl::StrCat(
        "world size ", env.world_size, " (", size_name,
        ") but OCTET_MASTER is not set: name the rendezvous store, redis://HOST:PORT or a shared directory "
        "(octet-run sets it)"));
  }
  return env;
}

std::unique_ptr<Store> OpenStore(const std::string& master) {
  if (absl::StartsWith(master, "redis://") || absl::StartsWith(master, "redis:")) {
    const std::string rest = master.substr(absl::StartsWith(master, "redis://") ? 8 : 6);
    return RedisStore::Connect(rest);
  }
  std::string dir = master;
  if (absl::StartsWith(dir, "file://")) dir = dir.substr(7);
  if (dir.empty()) OCTET_FAIL("OCTET_MASTER: empty store directory");
  return FileStore::Open(dir);
}

void RegisterRank(Store& store, const std::string& run_id, int rank, int world_size, std::chrono::milliseconds timeout,
                  std::vector<int>* local_pids) {
  if (local_pids != nullptr) local_pids->assign(world_size, 0);
  const std::string mine = absl::StrCat(run_id, "/rank/", rank);
  if (store.Check({mine})) {
    OCTET_FAIL(absl::StrCat(
        "rank ", rank, ": key '", mine,
        "' is already in the store: a stale store from an earlier run with run id '", run_id,
        "', or two ranks started with the same rank. Use a fresh store directory (or a new OCTET_RUN_ID)"));
  }
  // "<world size> <host> <pid>": the size is checked below, host and pid let
  // the group name a local peer that died (ProcessGroup::SetLocalPeerPids).
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  store.Set(mine, absl::StrCat(world_size, " ", host, " ", ::getpid()));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(absl::StrCat(run_id, "/rank/", r));
  std::string wait_error;
  try {
    store.Wait(keys, timeout);
  } catch (const Error& e) {
    wait_error = e.what();
  }
  if (!wait_error.empty()) {
    std::vector<std::string> missing;
    for (int r = 0; r < world_size; ++r) {
      try {
        if (!store.Check({keys[r]})) missing.push_back(std::to_string(r));
      } catch (const Error&) {
      }
    }
    throw StoreTimeoutError(absl::StrCat(
        "rank ", rank, " of ", world_size, ": rank", missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", "),
        " never joined within ", timeout.count(), " ms (not started, crashed, or a different world size or run id): ",
        wait_error));
  }
  for (int r = 0; r < world_size; ++r) {
    const std::string v = store.Get(keys[r], timeout);
    const std::vector<std::string> parts = absl::StrSplit(v, ' ');
    if (parts[0] != std::to_string(world_size)) {
      OCTET_FAIL(absl::StrCat("wrong world size: rank ", r, " was started with world size ",
                                                     parts[0], " but rank ", rank, " with ", world_size));
    }
    int pid = 0;
    if (local_pids != nullptr && parts.size() == 3 && parts[1] == host && absl::SimpleAtoi(parts[2], &pid)) {
      (*local_pids)[r] = pid;
    }
  }
}

DistContext InitProcessGroup(const DistEnv& env) {
  DistContext out;
  out.env = env;
  GlooOptions options{.timeout = env.timeout, .hostname = env.hostname, .prefix = env.run_id};
  if (env.master.empty()) {
    if (env.world_size != 1) OCTET_FAIL("InitProcessGroup: no store (OCTET_MASTER)");
    out.group = CreateGlooProcessGroup(nullptr, 0, 1, options);
    return out;
  }
  out.store = OpenStore(env.master);
  std::vector<int> pids;
  RegisterRank(*out.store, env.run_id, env.rank, env.world_size, env.timeout, &pids);
  if (env.backend == "nccl") {
#if OCTET_WITH_NCCL
    // The NCCL group (private, distributed/cuda) reports a Status.
    absl::StatusOr<std::unique_ptr<ProcessGroup>> g = CreateNcclProcessGroup(
        *out.store, env.rank, env.world_size,
        {.device = env.local_rank, .timeout = env.timeout, .key = env.run_id + "/nccl/unique_id"});
    if (!g.ok()) OCTET_FAIL(g.status().message());
    out.group = std::move(*g);
#else
    OCTET_FAIL("OCTET_BACKEND=nccl: this octet was built without NCCL (a CUDA build with OCTET_NCCL and NCCL found)");
#endif
  } else {
    out.group = CreateGlooProcessGroup(out.store.get(), env.rank, env.world_size, options);
  }
  out.group->SetLocalPeerPids(std::move(pids));
  return out;
}

DistContext InitFromEnvironment() { return InitProcessGroup(ReadDistEnv()); }

}  // namespace octet::dist
