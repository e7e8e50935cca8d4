#include <octet/distributed/redis_store.h>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>

namespace octet::dist {
namespace {

using Clock = std::chrono::steady_clock;

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

std::unique_ptr<RedisStore> RedisStore::Connect(const std::string& host, int port,
                                                std::chrono::milliseconds connect_timeout) {
  const std::string address = absl::StrCat(host, ":", port);
  if (host.empty() || port <= 0 || port > 65535) {
    OCTET_FAIL(absl::StrCat("RedisStore: bad address '", address, "'"));
  }
  redisContext* ctx = redisConnectWithTimeout(host.c_str(), port, ToTimeval(connect_timeout));
  if (ctx == nullptr) OCTET_FAIL("RedisStore: cannot allocate a hiredis context");
  if (ctx->err != 0) {
    const std::string why = ctx->errstr;
    redisFree(ctx);
    OCTET_FAIL(absl::StrCat("RedisStore: cannot reach Redis at ", address, ": ", why));
  }
  // Commands wait at most this long for a reply too (a stuck server is an error, not a hang).
  redisSetTimeout(ctx, ToTimeval(std::max(connect_timeout, std::chrono::milliseconds(5000))));
  std::unique_ptr<RedisStore> store(new RedisStore(ctx, address));
  Reply pong(static_cast<redisReply*>(redisCommand(ctx, "PING")));
  if (!pong || pong->type == REDIS_REPLY_ERROR) {
    OCTET_FAIL(
        absl::StrCat("RedisStore: Redis at ", address, " does not answer PING: ", pong ? pong->str : ctx->errstr));
  }
  return store;
}

std::unique_ptr<RedisStore> RedisStore::Connect(const std::string& host_port,
                                                std::chrono::milliseconds connect_timeout) {
  const size_t colon = host_port.rfind(':');
  int port = 6379;
  std::string host = host_port;
  if (colon != std::string::npos) {
    host = host_port.substr(0, colon);
    if (!absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
      OCTET_FAIL(absl::StrCat("RedisStore: bad port in '", host_port, "' (want HOST:PORT)"));
    }
  }
  return Connect(host, port, connect_timeout);
}

RedisStore::~RedisStore() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

#define OCTET_REDIS_CALL(reply, ...)                                                        \
  Reply reply(static_cast<redisReply*>(redisCommand(ctx_, __VA_ARGS__)));                   \
  if (!reply) {                                                                             \
    OCTET_FAIL(absl::StrCat("RedisStore ", address_, ": connection lost: ", ctx_->errstr)); \
  }                                                                                         \
  if (reply->type == REDIS_REPLY_ERROR) {                                                   \
    OCTET_FAIL(absl::StrCat("RedisStore ", address_, ": ", reply->str));                    \
  }

void RedisStore::Set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  OCTET_REDIS_CALL(r, "SET %b %b", key.data(), key.size(), value.data(), value.size());
}

bool RedisStore::TryGet(const std::string& key, std::string* value) {
  std::lock_guard<std::mutex> lock(mu_);
  OCTET_REDIS_CALL(r, "GET %b", key.data(), key.size());
  if (r->type == REDIS_REPLY_NIL) return false;
  if (r->type != REDIS_REPLY_STRING) {
    OCTET_FAIL(absl::StrCat("RedisStore ", address_, ": GET ", key, " gave reply type ", r->type));
  }
  value->assign(r->str, r->len);
  return true;
}

std::string RedisStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  std::string value;
  if (!PollUntil(timeout, [&]() { return TryGet(key, &value); })) {
    ThrowTimeout(absl::StrCat("RedisStore ", address_), {key}, timeout, start);
  }
  return value;
}

bool RedisStore::Check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    std::lock_guard<std::mutex> lock(mu_);
    OCTET_REDIS_CALL(r, "EXISTS %b", key.data(), key.size());
    if (r->type != REDIS_REPLY_INTEGER || r->integer == 0) return false;
  }
  return true;
}

void RedisStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  if (!PollUntil(timeout, [&]() { return Check(keys); })) {
    ThrowTimeout(absl::StrCat("RedisStore ", address_), keys, timeout, start);
  }
}

int64_t RedisStore::Add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  OCTET_REDIS_CALL(r, "INCRBY %b %lld", key.data(), key.size(), static_cast<long long>(delta));
  return static_cast<int64_t>(r->integer);
}

void RedisStore::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  OCTET_REDIS_CALL(r, "DEL %b", key.data(), key.size());
}

#undef OCTET_REDIS_CALL

}  // namespace octet::dist
