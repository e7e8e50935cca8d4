// Key-value stores for rendezvous (DESIGN.md §6): ranks publish small blobs
// (the NCCL unique id, Gloo addresses) and wait for each other's.
//
// FileStore keeps one file per key in a directory that every rank can see
// (one machine, or a shared filesystem). A value becomes visible atomically:
// it is written to a temporary file in the same directory and renamed into
// place, so a reader sees either no key or the whole value, never a part.
//
// Errors throw octet::Error: a Get or Wait that outlives its timeout throws
// StoreTimeoutError (an octet::Error) naming the key(s) still missing, the
// directory and how long it waited; I/O failures name the path and the errno
// text; a bad key (empty, longer than 200 bytes) is named too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <octet/core/error.h>

namespace octet::dist {

// What Get and Wait throw when their timeout passes (catch octet::Error for
// every store error, this one to tell a missing peer from a broken store).
class StoreTimeoutError : public Error {
 public:
  using Error::Error;
};

// Every method throws octet::Error on failure.
class Store {
 public:
  virtual ~Store() = default;

  // Publishes `value` under `key` (replacing an older value).
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to appear
  // (StoreTimeoutError when it does not).
  virtual std::string Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits until every key exists (StoreTimeoutError naming the missing ones
  // when they do not within `timeout`).
  virtual void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // True when every key exists now (no waiting).
  virtual bool Check(const std::vector<std::string>& keys) = 0;
  // Atomically adds `delta` to the integer stored under `key` (absent = 0) and
  // returns the new value. Barriers are built from it.
  virtual int64_t Add(const std::string& key, int64_t delta) = 0;
  // Removes `key`; nothing happens when it does not exist.
  virtual void Delete(const std::string& key) = 0;

 protected:
  // Polls `ready` until it returns true (then true) or `timeout` passes (then
  // false), backing off from 1 ms to 20 ms between polls; its errors propagate.
  static bool PollUntil(std::chrono::milliseconds timeout, const std::function<bool()>& ready);
  // Throws the StoreTimeoutError of a Get or Wait on `keys` that began at
  // `start` and gave up after `timeout`: `store` (what and where, e.g.
  // "FileStore /tmp/x"), the keys still missing now (a key whose Check fails
  // counts as missing; all of them when each appeared since), the timeout and
  // the time waited.
  [[noreturn]] void ThrowTimeout(const std::string& store, const std::vector<std::string>& keys,
                                 std::chrono::milliseconds timeout, std::chrono::steady_clock::time_point start);
};

class FileStore : public Store {
 public:
  // Opens (creating it and its parents when missing) the store directory.
  static std::unique_ptr<FileStore> Open(const std::string& directory);

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool Check(const std::vector<std::string>& keys) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  void Delete(const std::string& key) override;

  const std::string& directory() const { return directory_; }
  // The file that holds `key` (keys may contain any bytes; they are escaped).
  std::string PathOf(const std::string& key) const;

 private:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}
  // Reads the value if the key exists: true, or false when it is absent;
  // throws octet::Error when the file exists but cannot be read.
  bool TryRead(const std::string& key, std::string* value) const;

  std::string directory_;
};

}  // namespace octet::dist
