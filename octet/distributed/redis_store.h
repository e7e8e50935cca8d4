// RedisStore: an octet Store on a Redis server (hiredis), for jobs whose
// ranks share no filesystem. Keys are plain Redis keys (use a per-run prefix:
// the process group does); Set overwrites, Add is INCRBY, Get and Wait poll.
//
// Errors throw octet::Error: an unreachable server names host:port and the
// reason; a timed-out Get/Wait is a StoreTimeoutError naming the missing
// keys; a server error reply carries Redis's text.
// One connection per store, guarded by a mutex (safe to share between threads).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <octet/distributed/store.h>

struct redisContext;

namespace octet::dist {

class RedisStore : public Store {
 public:
  // Connects (with `connect_timeout`) and PINGs the server.
  static std::unique_ptr<RedisStore> Connect(
      const std::string& host, int port, std::chrono::milliseconds connect_timeout = std::chrono::seconds(2));
  // "host:port" form (port defaults to 6379).
  static std::unique_ptr<RedisStore> Connect(
      const std::string& host_port, std::chrono::milliseconds connect_timeout = std::chrono::seconds(2));
  ~RedisStore() override;

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool Check(const std::vector<std::string>& keys) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  void Delete(const std::string& key) override;

  const std::string& address() const { return address_; }

 private:
  RedisStore(redisContext* ctx, std::string address) : ctx_(ctx), address_(std::move(address)) {}
  // GET: true with the value, false when the key is absent; throws
  // octet::Error when the server fails.
  bool TryGet(const std::string& key, std::string* value);

  std::mutex mu_;
  redisContext* ctx_;
  std::string address_;
};

}  // namespace octet::dist
