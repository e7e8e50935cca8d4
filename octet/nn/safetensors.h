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
// is an octet::Error whose message starts with "safetensors file '<path>': "
// and names the problem (and the tensor, when there is one). The data is
// read (pread, not mmap: an I/O error is an Error, not a SIGBUS) straight
// into freshly allocated CPU tensors.
//
// NOTE [safetensors checksums]: SaveSafetensors writes, into __metadata__,
// "octet.crc32c.<name>" for every tensor entry of the file (FP8 companions
// included): 8 hex digits of CRC-32C (core/crc32c.h) over the entry's dtype
// name and shape as text ("F32[2,3]") followed by its data bytes; and
// "octet.crc32c.__metadata__": CRC-32C over the other metadata entries, each
// as key '\0' value '\0', in key order. Plain safetensors readers see string
// metadata and ignore it. On load, a file with any "octet.crc32c." key is
// verified completely before anything is returned: a mismatch names the file
// and the tensor ("checksum mismatch in tensor 'w'"), a tensor without a
// checksum or a checksum without a tensor is an error. The checksum keys are
// not returned in SafetensorsFile::metadata; SafetensorsFile::checksummed says
// the file had (and passed) them, and SafetensorsFile::digest is CRC-32C over
// all of them ("key=value\n" in key order), a fingerprint of the file's whole
// content that SaveSafetensors also returns. Files without checksums (other
// writers) load as before, unverified.
//
// Values: an FP8 scale companion must hold a finite scale_inv > 0 and a
// finite amax >= 0 (0 or NaN would make every dequantized value inf/NaN).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <octet/core/tensor.h>

namespace octet::nn {

// Limit on the JSON header (the reference implementation's MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

struct SafetensorsFile {
  // In the order of the data buffer (= the order they were saved in by
  // SaveSafetensors). CPU tensors, contiguous, not requiring grad.
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;  // without the checksum keys
  bool checksummed = false;  // NOTE [safetensors checksums]: had checksums, all verified
  uint32_t digest = 0;       // ... and their fingerprint (0 when not checksummed)

  // The tensor named `name`, or nullptr.
  const Tensor* Find(const std::string& name) const;
};

// Errors (octet::Error): an empty path, an undefined tensor, an empty or
// repeated name, the name "__metadata__", a name colliding with an FP8
// companion ("X.scale_inv" or "X.amax" beside an FP8 tensor "X", with or
// without ScaleMeta), FP8 scale metadata that is not per-tensor, a header over
// the limit, and any I/O failure (message names the path and the errno text),
// a metadata key starting with "octet.crc32c." (reserved for the checksums).
// Tensors may be
// on any device and non-contiguous (they are copied to contiguous CPU bytes
// first). `digest`, when given, gets SafetensorsFile::digest of the file.
void SaveSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                     const std::map<std::string, std::string>& metadata = {}, uint32_t* digest = nullptr);

SafetensorsFile LoadSafetensors(const std::string& path);

}  // namespace octet::nn
