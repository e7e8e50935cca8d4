// Key-value stores for rendezvous (DESIGN.md §6): ranks publish small blobs
// (the NCCL unique id, Gloo addresses) and wait for each other's.
//
// FileStore keeps one file per key in a directory that every rank can see
// (one machine, or a shared filesystem). A value becomes visible atomically:
// it is written to a temporary file in the same directory and renamed into
// place, so a reader sees either no key or the whole value, never a part.
//
// Errors are returned, never thrown (setup code decides what to do):
// a Get or Wait that outlives its timeout returns DEADLINE_EXCEEDED naming the
// key(s) still missing, the directory and how long it waited; I/O failures
// return the errno text with the path.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace octet::dist {

class Store {
 public:
  virtual ~Store() = default;

  // Publishes `value` under `key` (replacing an older value).
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to appear.
  virtual absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits until every key exists.
  virtual absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // True when every key exists now (no waiting).
  virtual absl::StatusOr<bool> Check(const std::vector<std::string>& keys) = 0;
  // Atomically adds `delta` to the integer stored under `key` (absent = 0) and
  // returns the new value. Barriers are built from it.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Removes `key`; OK when it does not exist.
  virtual absl::Status Delete(const std::string& key) = 0;
};

class FileStore : public Store {
 public:
  // Opens (creating it and its parents when missing) the store directory.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(const std::string& directory);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::Status Delete(const std::string& key) override;

  const std::string& directory() const { return directory_; }
  // The file that holds `key` (keys may contain any bytes; they are escaped).
  std::string PathOf(const std::string& key) const;

 private:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}
  // Reads the value if the key exists: OK + true, OK + false when absent.
  absl::StatusOr<bool> TryRead(const std::string& key, std::string* value) const;

  std::string directory_;
};

}  // namespace octet::dist
