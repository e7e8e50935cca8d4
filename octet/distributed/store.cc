#include <octet/distributed/store.h>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

namespace octet::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string ErrnoText(int err) { return std::strerror(err); }

// Keys may hold any bytes ("nccl/unique_id", "rank 3"); file names keep
// [A-Za-z0-9_-] and escape everything else as %XX. '.' is escaped too, so no
// key file can collide with the store's own ".tmp." / ".lock." files.
std::string EscapeKey(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

void CheckKey(const std::string& key) {
  if (key.empty()) OCTET_FAIL("FileStore: empty key");
  if (key.size() > 200) {
    OCTET_FAIL(absl::StrCat("FileStore: key of ", key.size(), " bytes is longer than 200"));
  }
}

// Empty on success, else what failed (the caller cleans up, then throws).
std::string WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::StrCat("FileStore: writing ", path, " failed: ", ErrnoText(errno));
    }
    done += static_cast<size_t>(n);
  }
  return "";
}

uint64_t UniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = std::random_device{}();
  return seed ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
}

}  // namespace

bool Store::PollUntil(std::chrono::milliseconds timeout, const std::function<bool()>& ready) {
  const auto deadline = Clock::now() + timeout;
  auto sleep = std::chrono::microseconds(1000);
  while (true) {
    if (ready()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(sleep);
    sleep = std::min<std::chrono::microseconds>(sleep * 2, std::chrono::microseconds(20000));
  }
}

void Store::ThrowTimeout(const std::string& store, const std::vector<std::string>& keys,
                         std::chrono::milliseconds timeout, Clock::time_point start) {
  const int64_t waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    bool present = false;
    try {
      present = Check({key});
    } catch (const Error&) {
    }
    if (!present) missing.push_back(absl::StrCat("'", key, "'"));
  }
  if (missing.empty()) {
    for (const std::string& key : keys) missing.push_back(absl::StrCat("'", key, "'"));
  }
  throw StoreTimeoutError(absl::StrCat(store, ": timed out waiting for key", missing.size() == 1 ? " " : "s ",
                                       absl::StrJoin(missing, ", "), " (timeout ", timeout.count(), " ms, waited ",
                                       waited, " ms)"));
}

std::unique_ptr<FileStore> FileStore::Open(const std::string& directory) {
  if (directory.empty()) OCTET_FAIL("FileStore: empty directory path");
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    OCTET_FAIL(absl::StrCat("FileStore: cannot create directory ", directory, ": ", ec.message()));
  }
  if (!std::filesystem::is_directory(directory, ec)) {
    OCTET_FAIL(absl::StrCat("FileStore: ", directory, " is not a directory"));
  }
  return std::unique_ptr<FileStore>(new FileStore(directory));
}

std::string FileStore::PathOf(const std::string& key) const { return directory_ + "/" + EscapeKey(key); }

void FileStore::Set(const std::string& key, const std::string& value) {
  CheckKey(key);
  const std::string path = PathOf(key);
  const std::string tmp = absl::StrCat(directory_, "/.tmp.", EscapeKey(key), ".", ::getpid(), ".", UniqueSuffix());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) OCTET_FAIL(absl::StrCat("FileStore: cannot create ", tmp, ": ", ErrnoText(errno)));
  std::string error = WriteAll(fd, value, tmp);
  if (error.empty() && ::fsync(fd) != 0) {
    error = absl::StrCat("FileStore: fsync of ", tmp, " failed: ", ErrnoText(errno));
  }
  if (::close(fd) != 0 && error.empty()) {
    error = absl::StrCat("FileStore: closing ", tmp, " failed: ", ErrnoText(errno));
  }
  if (error.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    error = absl::StrCat("FileStore: renaming ", tmp, " to ", path, " failed: ", ErrnoText(errno));
  }
  if (!error.empty()) {
    ::unlink(tmp.c_str());
    OCTET_FAIL(error);
  }
}

bool FileStore::TryRead(const std::string& key, std::string* value) const {
  const std::string path = PathOf(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    OCTET_FAIL(absl::StrCat("FileStore: cannot open ", path, ": ", ErrnoText(errno)));
  }
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      OCTET_FAIL(absl::StrCat("FileStore: reading ", path, " failed: ", ErrnoText(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (value != nullptr) *value = std::move(out);
  return true;
}

std::string FileStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  CheckKey(key);
  const auto start = Clock::now();
  std::string value;
  if (!PollUntil(timeout, [&]() { return TryRead(key, &value); })) {
    ThrowTimeout(absl::StrCat("FileStore ", directory_), {key}, timeout, start);
  }
  return value;
}

bool FileStore::Check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    CheckKey(key);
    struct stat st;
    if (::stat(PathOf(key).c_str(), &st) != 0) {
      if (errno == ENOENT) return false;
      OCTET_FAIL(absl::StrCat("FileStore: stat of ", PathOf(key), " failed: ", ErrnoText(errno)));
    }
  }
  return true;
}

void FileStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  if (!PollUntil(timeout, [&]() { return Check(keys); })) {
    ThrowTimeout(absl::StrCat("FileStore ", directory_), keys, timeout, start);
  }
}

int64_t FileStore::Add(const std::string& key, int64_t delta) {
  CheckKey(key);
  // flock on a per-key lock file serialises concurrent adders (processes and threads).
  const std::string lock_path = directory_ + "/.lock." + EscapeKey(key);
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    OCTET_FAIL(absl::StrCat("FileStore: cannot open lock file ", lock_path, ": ", ErrnoText(errno)));
  }
  while (::flock(lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int err = errno;
      ::close(lock_fd);
      OCTET_FAIL(absl::StrCat("FileStore: flock of ", lock_path, " failed: ", ErrnoText(err)));
    }
  }
  const auto unlock = [lock_fd]() {
    ::flock(lock_fd, LOCK_UN);
    ::close(lock_fd);
  };
  try {
    std::string text;
    const bool found = TryRead(key, &text);
    int64_t value = 0;
    if (found && !absl::SimpleAtoi(text, &value)) {
      OCTET_FAIL(absl::StrCat("FileStore: key '", key, "' holds '", text.substr(0, 40), "', not an integer"));
    }
    value += delta;
    Set(key, std::to_string(value));
    unlock();
    return value;
  } catch (...) {
    unlock();
    throw;
  }
}

void FileStore::Delete(const std::string& key) {
  CheckKey(key);
  const std::string path = PathOf(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    OCTET_FAIL(absl::StrCat("FileStore: deleting ", path, " failed: ", ErrnoText(errno)));
  }
}

}  // namespace octet::dist
