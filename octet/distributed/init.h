// Setting up a job's process group from the environment (DESIGN.md §6).
//
//   dist::DistContext dist = dist::InitFromEnvironment();  // throws octet::Error
//   dist::ProcessGroup& pg = *dist.group;
//
// Variables (octet-run sets them; tools/octet_run.cc):
//   OCTET_RANK, OCTET_WORLD_SIZE   this rank and the number of ranks; when
//                                  absent, Slurm's SLURM_PROCID/SLURM_NTASKS;
//                                  when neither, a single rank (0 of 1).
//   OCTET_MASTER                   the rendezvous store: "redis://HOST:PORT"
//                                  (or "redis:HOST:PORT") for a Redis server,
//                                  "file://DIR" or a path for a FileStore in a
//                                  directory every rank sees. Needed when the
//                                  world size is above 1.
//   OCTET_RUN_ID                   key prefix of this job in the store
//                                  (default "octet"); a fresh one per run lets
//                                  one Redis server or directory serve many.
//   OCTET_TIMEOUT_MS               rendezvous and collective timeout (default 60000).
//   OCTET_HOSTNAME                 address Gloo listens on (default 127.0.0.1).
//   OCTET_BACKEND                  gloo (CPU tensors, the default) or nccl
//                                  (CUDA tensors; CUDA builds; device =
//                                  OCTET_LOCAL_RANK, else the rank).
//
// NOTE [rank registration]: before Gloo connects, each rank registers under
// "<run id>/rank/<r>" with its world size and waits for all the others. A key
// that is already there is a stale store (an earlier run with the same run id,
// or two ranks given the same OCTET_RANK): an error saying so. A rank that
// registered a different world size is an error naming both sizes; a rank
// that never registers is a StoreTimeoutError naming it.
//
// Every function here throws octet::Error with a message naming what is wrong.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <octet/distributed/process_group.h>
#include <octet/distributed/store.h>

namespace octet::dist {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  std::string master;  // OCTET_MASTER
  std::string run_id = "octet";
  std::chrono::milliseconds timeout{60000};
  std::string hostname = "127.0.0.1";
  std::string backend = "gloo";
  int local_rank = 0;  // OCTET_LOCAL_RANK (the CUDA device of an NCCL group)
  std::string source;  // "OCTET_*", "SLURM_*" or "default" (for messages)
};

// Reads the variables above; throws octet::Error naming the variable for a
// value that is not a number, a rank outside [0, world size), or a missing
// OCTET_MASTER with more than one rank.
DistEnv ReadDistEnv();

// Opens the store an OCTET_MASTER value names.
std::unique_ptr<Store> OpenStore(const std::string& master);

// NOTE [rank registration].
// On success, `local_pids` (when given) holds the pid of every rank on this
// host (0 for the others).
void RegisterRank(Store& store, const std::string& run_id, int rank, int world_size, std::chrono::milliseconds timeout,
                  std::vector<int>* local_pids = nullptr);

struct DistContext {
  DistEnv env;
  std::unique_ptr<Store> store;         // null for a single rank without OCTET_MASTER
  std::unique_ptr<ProcessGroup> group;  // declared after the store: destroyed first
};

// Store + registration + Gloo group for `env`.
DistContext InitProcessGroup(const DistEnv& env);
// ReadDistEnv + InitProcessGroup.
DistContext InitFromEnvironment();

}  // namespace octet::dist
