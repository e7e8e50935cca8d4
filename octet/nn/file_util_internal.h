// Reading files and directories without surprises, and writing files
// atomically (internal to nn/: used by nn/safetensors.cc and
// nn/checkpoint.cc).
//
// Only regular files are opened: the type is checked with stat() before the
// open (which is O_NONBLOCK, and checked again with fstat), so a FIFO, socket
// or device in place of a checkpoint file is an error instead of a read that
// blocks forever. Every failure is an absl::Status naming the path and the
// errno text; a directory that cannot be listed (EACCES, EIO, ...) is an
// error, never "empty".
//
// Tests inject failures with SetFileFaultHookForTesting (tests run as root,
// where chmod does not stop a read).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace octet::nn {

// "a FIFO", "a directory", "a socket", ... for a stat() st_mode.
std::string DescribeFileType(mode_t mode);

// An fd of the regular file `path`, opened read-only; the caller closes it.
// `*size` gets its size. Errors start with `prefix` (e.g. "safetensors file
// 'x': "): missing, not a regular file (names the type), open/stat failures.
absl::StatusOr<int> OpenRegularFile(const std::string& path, const std::string& prefix, uint64_t* size);

// The whole content of the regular file `path` (at most max_bytes; longer is
// an error).
absl::StatusOr<std::string> ReadSmallRegularFile(const std::string& path, const std::string& prefix,
                                                 uint64_t max_bytes);

// Reads exactly n bytes at `offset` of fd (the file `path`). Errors start
// with `prefix`: an I/O error (errno text), or end of file first ("the file
// ended at byte X", a file shortened while being read).
absl::Status ReadFullyAt(int fd, uint64_t offset, void* dst, size_t n, const std::string& path,
                         const std::string& prefix);

struct DirEntry {
  enum class Type { kRegular, kDirectory, kOther };
  std::string name;
  Type type = Type::kOther;  // of the target, for symlinks
  mode_t mode = 0;
};

// The entries of `dir` (not "." and ".."), sorted by name. NotFound when dir
// does not exist; other failures (not a directory, EACCES, EIO) name the path.
absl::StatusOr<std::vector<DirEntry>> ListDirectory(const std::string& dir);

// Replaces `path` atomically: `body(fd, tmp)` writes the new content to the
// temporary file tmp = "<path>.tmp.<pid>" (open for writing as fd), which is
// then fsync'ed, renamed over `path`, and the rename made durable by an fsync
// of the directory (skipped where the filesystem refuses one). On any failure
// the temporary file is removed, `path` is untouched, and the status names
// the step and the errno text.
using AtomicWriteBody = std::function<absl::Status(int fd, const std::string& tmp)>;
absl::Status WriteAtomically(const std::string& path, const AtomicWriteBody& body);

// WriteAtomically with `bytes` as the whole content.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// Writes all n bytes to fd (short writes continued, EINTR retried); an error
// names `tmp`, the file fd writes to.
absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& tmp);

// Test hook: called with ("open" | "opendir" | "stat" | "read", path) before each such
// call above; a non-zero return is used as that call's errno. Pass nullptr to
// remove it.
using FileFaultHook = std::function<int(std::string_view op, const std::string& path)>;
void SetFileFaultHookForTesting(FileFaultHook hook);

}  // namespace octet::nn
