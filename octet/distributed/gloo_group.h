// GlooProcessGroup: a ProcessGroup on CPU tensors over Gloo's TCP transport
// (Debian libgloo-dev). Ranks meet through any octet Store (FileStore in a
// shared directory, RedisStore); Gloo's own rendezvous runs through an
// adapter under the key prefix "<prefix>/gloo/".
//
// Errors throw octet::Error: setup names what failed (a peer that never
// arrives is a timeout naming the missing keys); collectives throw
// through Work::Wait, naming the rank whose connection was lost
// when Gloo's message names its address (NOTE [lost rank]). A group of more
// than one rank sets SIGPIPE to ignored when it still has its default action,
// so writing to a dead peer is an error, not a silent kill (NOTE [dead peer
// SIGPIPE] in gloo_group.cc).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <octet/distributed/process_group.h>
#include <octet/distributed/store.h>

namespace octet::dist {

struct GlooOptions {
  // Every collective and the connection set-up time out after this.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // The address this rank listens on (loopback by default; set the host's
  // address for a multi-machine job).
  std::string hostname = "127.0.0.1";
  // Key prefix of this job in the store (a run id: keys are never reused).
  std::string prefix = "octet";
};

// `store` may be null only for a single rank (size 1), which connects to nobody.
std::unique_ptr<ProcessGroup> CreateGlooProcessGroup(Store* store, int rank, int size, const GlooOptions& options = {});

}  // namespace octet::dist
