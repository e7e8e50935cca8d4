// Reading and writing safetensors files (https://github.com/huggingface/safetensors).
//
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON, then the
// data buffer. The header maps each tensor name to
// {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets
// into the data buffer, end exclusive) and may hold "__metadata__", a
// string -> string map. Data is little-endian, row-major, without padding
// between tensors.
//
// Dtypes: every octet dtype, by its table name Info(dtype).safetensors_name:
// F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I32 I64 U8 BOOL. Other safetensors dtypes
// (I8, U16, F8_E8M0, F4, ...) are rejected on load with an error naming them.
//
// NOTE [safetensors fp8 scales]: an FP8 tensor "X" with per-tensor ScaleMeta
// is saved with two companion tensors written right after it:
//   "X.scale_inv"  F32 [1]  the dequantization multiplier: real = fp8 * scale_inv
//                           (the meaning of DeepSeek-V3's / vLLM's weight_scale_inv)
//   "X.amax"       F32 [1]  the amax recorded when X was quantized
// On load, an FP8 tensor "X" next to a "X.scale_inv" (F32, 1 element) gets
// ScaleMeta back with exactly that scale_inv, scale = 1/scale_inv and the
// amax from "X.amax" (0 when absent); the companions are not returned as
// tensors. An FP8 tensor without companions loads without ScaleMeta. A
// companion of the wrong dtype/shape is an error. Other granularities
// (per-row, blocks) are refused on save.
//
// Writing (SaveSafetensors): tensors keep the caller's order (also in the
// data buffer); the header starts with '{', "__metadata__" (when given) comes
// first, and is padded with spaces to a multiple of 8 bytes so the data
// starts 8-aligned. The write is atomic: the bytes go to "<path>.tmp.<pid>",
// which is fsync'ed and renamed over <path> (then the directory is fsync'ed);
// on any failure the temp file is removed and an existing <path> is left
// untouched.
//
// Reading (LoadSafetensors) parses and validates the whole header before
// anything is returned (never a partial load) and enforces the reference
// reader's rules (FORMATS.md §1): file shorter than 8 bytes; header length
// above 100,000,000; header running past the end of the file; header not
// UTF-8; not JSON; wrong schema (not an object, a tensor entry without
// exactly the keys dtype/shape/data_offsets of the right types, a
// __metadata__ that is not a string map); duplicate keys (rejected explicitly
// at every level); unknown or unsupported dtype; offsets that are not
// contiguous from 0 once sorted (holes, overlaps, end < begin); a shape whose
// byte size overflows or differs from end - begin; and a file whose length is
// not exactly 8 + N + the last end (truncation, trailing bytes). Every error
// is an absl::Status whose message starts with "safetensors file '<path>': "
// and names the problem (and the tensor, when there is one). The data is
// mapped (mmap) once and copied into freshly allocated CPU tensors.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace octet::nn {

// Limit on the JSON header (the reference implementation's MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

struct SafetensorsFile {
  // In the order of the data buffer (= the order they were saved in by
  // SaveSafetensors). CPU tensors, contiguous, not requiring grad.
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;

  // The tensor named `name`, or nullptr.
  const Tensor* Find(const std::string& name) const;
};

// Errors (absl::Status): an undefined tensor, an empty or repeated name, the
// name "__metadata__", a name colliding with an FP8 companion, FP8 scale
// metadata that is not per-tensor, a header over the limit, and any I/O
// failure (message names the path and the errno text). Tensors may be on any
// device and non-contiguous (they are copied to contiguous CPU bytes first).
absl::Status SaveSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

absl::StatusOr<SafetensorsFile> LoadSafetensors(const std::string& path);

// Atomically replaces `path` with `bytes` (temp file "<path>.tmp.<pid>",
// fsync, rename, directory fsync). Shared with nn/checkpoint.cc.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes);

}  // namespace octet::nn
