#include <octet/nn/file_util_internal.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace octet::nn {
namespace {

std::mutex& HookMutex() {
  static std::mutex m;
  return m;
}
FileFaultHook& Hook() {
  static FileFaultHook h;
  return h;
}

int Injected(std::string_view op, const std::string& path) {
  std::lock_guard<std::mutex> lock(HookMutex());
  return Hook() ? Hook()(op, path) : 0;
}

int Stat(const std::string& path, struct stat* st) {
  if (const int e = Injected("stat", path); e != 0) {
    errno = e;
    return -1;
  }
  return ::stat(path.c_str(), st);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void SetFileFaultHookForTesting(FileFaultHook hook) {
  std::lock_guard<std::mutex> lock(HookMutex());
  Hook() = std::move(hook);
}

std::string DescribeFileType(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "of an unknown file type";
}

absl::StatusOr<int> OpenRegularFile(const std::string& path, const std::string& prefix, uint64_t* size) {
  struct stat st;
  if (Stat(path, &st) != 0) return absl::ErrnoToStatus(errno, prefix + "cannot open");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "not a regular file (it is ", DescribeFileType(st.st_mode), ")"));
  }
  // O_NONBLOCK: should the path have been replaced by a FIFO since the stat,
  // the open does not wait for a writer; the fstat below then refuses it.
  int fd;
  if (const int e = Injected("open", path); e != 0) {
    errno = e;
    fd = -1;
  } else {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  }
  if (fd < 0) return absl::ErrnoToStatus(errno, prefix + "cannot open");
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::ErrnoToStatus(e, prefix + "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "not a regular file (it is ", DescribeFileType(st.st_mode), ")"));
  }
  // Regular files ignore O_NONBLOCK; clear it anyway so reads are plain.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

absl::Status ReadFullyAt(int fd, uint64_t offset, void* dst, size_t n, const std::string& path,
                         const std::string& prefix) {
  if (const int e = Injected("read", path); e != 0) return absl::ErrnoToStatus(e, prefix + "cannot read");
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, prefix + "cannot read");
    }
    if (r == 0) return absl::DataLossError(absl::StrCat(prefix, "the file ended at byte ", offset, " while being read"));
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSmallRegularFile(const std::string& path, const std::string& prefix,
                                                 uint64_t max_bytes) {
  uint64_t size = 0;
  absl::StatusOr<int> fd = OpenRegularFile(path, prefix, &size);
  if (!fd.ok()) return fd.status();
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t r = ::read(*fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(*fd);
      return absl::ErrnoToStatus(e, prefix + "cannot read");
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
    if (out.size() > max_bytes) {
      ::close(*fd);
      return absl::InvalidArgumentError(absl::StrCat(prefix, "longer than ", max_bytes, " bytes"));
    }
  }
  ::close(*fd);
  return out;
}

absl::StatusOr<std::vector<DirEntry>> ListDirectory(const std::string& dir) {
  const std::string prefix = absl::StrCat("directory '", dir, "': ");
  struct stat st;
  if (Stat(dir, &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(prefix + "does not exist");
    return absl::ErrnoToStatus(errno, prefix + "cannot stat");
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "not a directory (it is ", DescribeFileType(st.st_mode), ")"));
  }
  DIR* d = nullptr;
  if (const int e = Injected("opendir", dir); e != 0) {
    errno = e;
  } else {
    d = ::opendir(dir.c_str());
  }
  if (d == nullptr) return absl::ErrnoToStatus(errno, prefix + "cannot list");
  std::vector<DirEntry> out;
  while (true) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      const int err = errno;
      ::closedir(d);
      if (err != 0) return absl::ErrnoToStatus(err, prefix + "cannot list");
      break;
    }
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    DirEntry entry;
    entry.name = name;
    struct stat es;
    const std::string full = dir + "/" + name;
    if (Stat(full, &es) == 0) {
      entry.mode = es.st_mode;
      entry.type = S_ISREG(es.st_mode)   ? DirEntry::Type::kRegular
                   : S_ISDIR(es.st_mode) ? DirEntry::Type::kDirectory
                                         : DirEntry::Type::kOther;
    } else if (::lstat(full.c_str(), &es) == 0) {
      entry.mode = es.st_mode;  // e.g. a dangling symlink
    }
    out.push_back(std::move(entry));
  }
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

// ---- atomic writes ------------------------------------------------------------

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("writing '", tmp, "'"));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status WriteAtomically(const std::string& path, const AtomicWriteBody& body) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create temporary file '", tmp, "' for '", path, "'"));
  }
  absl::Status st = body(fd, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = absl::ErrnoToStatus(errno, absl::StrCat("fsync of '", tmp, "'"));
  if (::close(fd) != 0 && st.ok()) st = absl::ErrnoToStatus(errno, absl::StrCat("closing '", tmp, "'"));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::ErrnoToStatus(errno, absl::StrCat("renaming '", tmp, "' to '", path, "'"));
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // Make the rename itself durable. Some filesystems refuse fsync on a
  // directory (EINVAL); that is not an error of the write.
  const int dfd = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  return WriteAtomically(path,
                         [&](int fd, const std::string& tmp) { return WriteAll(fd, bytes.data(), bytes.size(), tmp); });
}

}  // namespace octet::nn
