// CheckpointDirLock (nn/checkpoint.h, NOTE [checkpoint directory lock]).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include <octet/core/error.h>
#include <octet/nn/checkpoint.h>
#include <octet/nn/checkpoint_internal.h>
#include <octet/nn/safetensors_internal.h>

namespace octet::nn {
namespace {

namespace fs = std::filesystem;

// What the holder wrote into the lock file ("pid 1234 on host h"), trimmed.
std::string ReadHolder(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  return std::string(absl::StripAsciiWhitespace(absl::string_view(buf, static_cast<size_t>(n))));
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir) : dir_(dir) {
  internal::ThrowIfError(internal::CreateCheckpointDir(dir));
  const std::string path = (fs::path(dir) / kCheckpointLockFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) {
    throw Error(absl::StrCat("checkpoint '", dir, "': cannot open the lock file '", path, "': ", std::strerror(errno)));
  }
  int rc;
  while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    const int err = errno;
    const std::string holder = ReadHolder(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      throw Error(absl::StrCat("checkpoint '", dir, "' is in use by another run (",
                               holder.empty() ? "its lock file names no process yet" : holder,
                               "): two runs saving into one directory would mix their checkpoints; let it end, "
                               "or give this run another directory"));
    }
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
      unavailable_ = absl::StrCat("the file system of '", dir, "' cannot lock files (flock: ", std::strerror(err),
                                  "): nothing stops another run from saving there too");
      return;
    }
    throw Error(absl::StrCat("checkpoint '", dir, "': cannot lock '", path, "': ", std::strerror(err)));
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  const std::string me = absl::StrCat("pid ", ::getpid(), " on host ", host, "\n");
  // Informational only (the flock is the lock): a failed write leaves it stale.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd_, me.data(), me.size(), 0);
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace octet::nn
