#include <octet/nn/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include <octet/autograd/grad_mode.h>
#include <octet/core/crc32c.h>
#include <octet/core/scaling.h>
#include <octet/nn/file_util_internal.h>
#include <octet/nn/safetensors_internal.h>

namespace octet::nn {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kScaleInvSuffix = ".scale_inv";
constexpr const char* kAmaxSuffix = ".amax";
constexpr const char* kChecksumPrefix = "octet.crc32c.";
constexpr const char* kMetadataChecksumKey = "octet.crc32c.__metadata__";

// NOTE [safetensors checksums]: dtype and shape as text, then the data.
uint32_t EntryChecksum(const char* dtype_name, const Shape& shape, const void* data, size_t n) {
  std::string head = absl::StrCat(dtype_name, "[");
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&head, i ? "," : "", shape[i]);
  head += "]";
  return Crc32cExtend(Crc32c(head), data, n);
}

uint32_t MetadataChecksum(const std::map<std::string, std::string>& metadata) {
  uint32_t crc = 0;
  for (const auto& [k, v] : metadata) {
    if (k.rfind(kChecksumPrefix, 0) == 0) continue;
    crc = Crc32cExtend(crc, k.data(), k.size() + 1);  // with the '\0'
    crc = Crc32cExtend(crc, v.data(), v.size() + 1);
  }
  return crc;
}

// The fingerprint of a file: over its checksum entries, in key order.
uint32_t Digest(const std::map<std::string, std::string>& checksums) {
  uint32_t crc = 0;
  for (const auto& [k, v] : checksums) {
    const std::string line = absl::StrCat(k, "=", v, "\n");
    crc = Crc32cExtend(crc, line.data(), line.size());
  }
  return crc;
}

std::string Prefix(const std::string& path) { return absl::StrCat("safetensors file '", path, "': "); }

absl::Status Corrupt(const std::string& path, const std::string& problem) {
  return absl::DataLossError(Prefix(path) + problem);
}

// ---- header validation helpers --------------------------------------------------

bool ValidUtf8(const char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

bool DTypeFromSafetensorsName(const std::string& name, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DTypeInfo& info = Info(static_cast<DType>(i));
    if (name == info.safetensors_name) {
      *out = info.dtype;
      return true;
    }
  }
  return false;
}

// Dtypes of the safetensors format that octet has no element type for.
bool IsKnownForeignDtype(const std::string& name) {
  static const std::set<std::string> kForeign = {"F4",      "F6_E2M3",     "F6_E3M2",     "I8",  "F8_E8M0",
                                                 "I16",     "U16",         "U32",         "U64", "C64",
                                                 "F8_E4M3FNUZ", "F8_E5M2FNUZ"};
  return kForeign.count(name) > 0;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

std::string JsonTypeName(const json& j) { return j.type_name(); }

// Parses one tensor entry; `problem` gets the reason when it returns false.
bool ParseEntry(const std::string& name, const json& j, Entry* e, std::string* problem) {
  e->name = name;
  if (!j.is_object()) {
    *problem = absl::StrCat("bad schema: the entry of tensor '", name, "' is a JSON ", JsonTypeName(j),
                            ", not an object");
    return false;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      *problem = absl::StrCat("bad schema: tensor '", name, "' has an unexpected key '", it.key(),
                              "' (expected dtype, shape, data_offsets)");
      return false;
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(key)) {
      *problem = absl::StrCat("bad schema: tensor '", name, "' has no '", key, "'");
      return false;
    }
  }
  const json& dt = j["dtype"];
  if (!dt.is_string()) {
    *problem = absl::StrCat("bad schema: tensor '", name, "': dtype is a JSON ", JsonTypeName(dt), ", not a string");
    return false;
  }
  const std::string dts = dt.get<std::string>();
  if (!DTypeFromSafetensorsName(dts, &e->dtype)) {
    *problem = IsKnownForeignDtype(dts)
                   ? absl::StrCat("tensor '", name, "' has dtype ", dts, ", which octet does not support")
                   : absl::StrCat("tensor '", name, "' has an unknown dtype '", dts, "'");
    return false;
  }
  const json& sh = j["shape"];
  if (!sh.is_array()) {
    *problem = absl::StrCat("bad schema: tensor '", name, "': shape is a JSON ", JsonTypeName(sh), ", not an array");
    return false;
  }
  for (const json& d : sh) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      *problem = absl::StrCat("bad schema: tensor '", name, "': shape ", sh.dump(),
                              " must hold non-negative integers");
      return false;
    }
    e->shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  const json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    *problem = absl::StrCat("bad schema: tensor '", name, "': data_offsets ", off.dump(),
                            " must be [begin, end] with non-negative integers");
    return false;
  }
  e->begin = off[0].get<uint64_t>();
  e->end = off[1].get<uint64_t>();
  return true;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const Tensor* SafetensorsFile::Find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

namespace internal {

absl::Status SaveSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                             const std::map<std::string, std::string>& user_metadata, uint32_t* digest) {
  NoGradGuard no_grad;
  const std::string where = Prefix(path);
  if (path.empty()) return absl::InvalidArgumentError(where + "the path is empty");
  for (const auto& [k, v] : user_metadata) {
    if (k.rfind(kChecksumPrefix, 0) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, "metadata key '", k, "' is reserved (keys starting with '",
                                                     kChecksumPrefix, "' hold the checksums)"));
    }
  }
  // Expand FP8 companions and collect contiguous CPU copies, checking names.
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<std::string> names;
  auto add = [&](const std::string& name, const Tensor& t) -> absl::Status {
    if (name.empty()) return absl::InvalidArgumentError(where + "a tensor has an empty name");
    if (name == "__metadata__") {
      return absl::InvalidArgumentError(where + "a tensor may not be named '__metadata__' (reserved for the metadata)");
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the name '", name, "' is used twice (or collides with an FP8 scale companion)"));
    }
    out.emplace_back(name, t);
    return absl::OkStatus();
  };
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(where, "tensor '", name, "' is undefined"));
    Tensor c = t.detach();
    if (!c.device().is_cpu()) c = c.To(kCPU);
    c = c.Contiguous();
    if (absl::Status s = add(name, c); !s.ok()) return s;
    const ScaleMeta* meta = IsFp8(t.dtype()) ? t.scale_meta() : nullptr;
    if (meta == nullptr) continue;
    if (meta->granularity != ScaleGranularity::kPerTensor) {
      return absl::InvalidArgumentError(absl::StrCat(where, "tensor '", name, "' has ", Name(meta->granularity),
                                                     " scaling; only per-tensor FP8 scales can be saved"));
    }
    const float scale_inv = static_cast<float>(meta->scale_inv.Item());
    const float amax = meta->amax.defined() ? static_cast<float>(meta->amax.Item()) : 0.0f;
    if (absl::Status s = add(name + kScaleInvSuffix, Full({1}, scale_inv)); !s.ok()) return s;
    if (absl::Status s = add(name + kAmaxSuffix, Full({1}, amax)); !s.ok()) return s;
  }
  // An FP8 tensor saved without ScaleMeta next to a tensor of the caller named
  // like one of its companions: a load would take that tensor as the FP8
  // tensor's scale (or refuse the file), so the file would not round-trip.
  for (const auto& [name, t] : tensors) {
    if (!IsFp8(t.dtype()) || t.scale_meta() != nullptr) continue;
    for (const char* suffix : {kScaleInvSuffix, kAmaxSuffix}) {
      if (names.count(name + suffix)) {
        return absl::InvalidArgumentError(absl::StrCat(where, "the name '", name, suffix,
                                                       "' collides with the FP8 scale companion of the FP8 tensor '",
                                                       name, "' (a load would read it as that tensor's scale)"));
      }
    }
  }

  // NOTE [safetensors checksums]
  std::map<std::string, std::string> checksums;
  for (const auto& [name, t] : out) {
    checksums[kChecksumPrefix + name] =
        Crc32cHex(EntryChecksum(Info(t.dtype()).safetensors_name, t.shape(), t.raw_data(), t.nbytes()));
  }
  checksums[kMetadataChecksumKey] = Crc32cHex(MetadataChecksum(user_metadata));
  std::map<std::string, std::string> metadata = user_metadata;
  metadata.insert(checksums.begin(), checksums.end());
  if (digest != nullptr) *digest = Digest(checksums);

  ordered_json header = ordered_json::object();
  {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : out) {
    ordered_json e = ordered_json::object();
    e["dtype"] = Info(t.dtype()).safetensors_name;
    ordered_json shape = ordered_json::array();
    for (int64_t d : t.shape()) shape.push_back(static_cast<uint64_t>(d));
    e["shape"] = std::move(shape);
    const uint64_t end = offset + t.nbytes();
    e["data_offsets"] = ordered_json::array({offset, end});
    header[name] = std::move(e);
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, "cannot encode the header (", e.what(),
                                                   "); names and metadata must be valid UTF-8"));
  }
  while (text.size() % 8 != 0) text.push_back(' ');
  if (text.size() > kSafetensorsMaxHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(where, "the header would be ", text.size(),
                                                   " bytes, more than the limit of ", kSafetensorsMaxHeaderSize));
  }
  return WriteAtomically(path, [&](int fd, const std::string& tmp) -> absl::Status {
    uint64_t n = text.size();  // little-endian host (static_assert above)
    if (absl::Status s = WriteAll(fd, &n, 8, tmp); !s.ok()) return s;
    if (absl::Status s = WriteAll(fd, text.data(), text.size(), tmp); !s.ok()) return s;
    for (const auto& [name, t] : out) {
      if (t.nbytes() == 0) continue;
      if (absl::Status s = WriteAll(fd, t.raw_data(), t.nbytes(), tmp); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<SafetensorsFile> LoadSafetensors(const std::string& path) {
  const std::string where = Prefix(path);
  // Regular files only: a FIFO would block the open (nn/file_util_internal.h).
  uint64_t file_size = 0;
  absl::StatusOr<int> opened = OpenRegularFile(path, where, &file_size);
  if (!opened.ok()) return opened.status();
  Fd fd;
  fd.fd = *opened;

  // Rule 1: the 8-byte length.
  if (file_size < 8) {
    return Corrupt(path, absl::StrCat("header too small: the file has ", file_size,
                                      " bytes, fewer than the 8-byte header length"));
  }
  // Read with pread, not mmap: an I/O error is then a Status, not a SIGBUS.
  uint64_t n;
  if (absl::Status s = ReadFullyAt(fd.fd, 0, &n, 8, path, where); !s.ok()) return s;
  // Rules 2 and 3: header size limit, header inside the file.
  if (n > kSafetensorsMaxHeaderSize) {
    return Corrupt(path, absl::StrCat("header too large: the header length is ", n, " bytes, more than the limit of ",
                                      kSafetensorsMaxHeaderSize));
  }
  if (8 + n > file_size) {
    return Corrupt(path, absl::StrCat("invalid header length: the header claims ", n, " bytes but the file has only ",
                                      file_size - 8, " after the length (truncated?)"));
  }
  std::string header_bytes(static_cast<size_t>(n), '\0');
  if (absl::Status s = ReadFullyAt(fd.fd, 8, header_bytes.data(), header_bytes.size(), path, where); !s.ok()) return s;
  const char* hdr = header_bytes.data();
  // Rule 4: UTF-8, JSON, schema; plus explicit duplicate-key detection.
  if (!ValidUtf8(hdr, n)) return Corrupt(path, "the header is not valid UTF-8");
  std::string duplicate;
  std::vector<std::set<std::string>> keys;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!keys.back().insert(key).second && duplicate.empty()) {
        duplicate = depth <= 1 ? absl::StrCat("'", key, "'") : absl::StrCat("'", key, "' (nested at depth ", depth, ")");
      }
    }
    return true;
  };
  json header;
  try {
    header = json::parse(hdr, hdr + n, callback);
  } catch (const json::exception& e) {
    return Corrupt(path, absl::StrCat("the header is not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) return Corrupt(path, absl::StrCat("duplicate key ", duplicate, " in the header"));
  if (!header.is_object()) {
    return Corrupt(path, absl::StrCat("bad schema: the header is a JSON ", header.type_name(), ", not an object"));
  }
  SafetensorsFile file;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return Corrupt(path, "bad schema: __metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return Corrupt(path, absl::StrCat("bad schema: __metadata__ value of '", m.key(), "' is a JSON ",
                                            m.value().type_name(), ", not a string"));
        }
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    Entry e;
    std::string problem;
    if (!ParseEntry(it.key(), it.value(), &e, &problem)) return Corrupt(path, problem);
    entries.push_back(std::move(e));
  }
  // Rules 5 and 6: contiguous offsets from 0, byte sizes.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  std::string previous;
  for (const Entry& e : entries) {
    if (e.end < e.begin) {
      return Corrupt(path, absl::StrCat("invalid offsets: tensor '", e.name, "' has data_offsets [", e.begin, ", ",
                                        e.end, "] with end before begin"));
    }
    if (e.begin != expected) {
      const std::string after = previous.empty() ? "the start of the data" : absl::StrCat("tensor '", previous, "'");
      return Corrupt(path, e.begin > expected
                               ? absl::StrCat("invalid offsets: a hole of ", e.begin - expected,
                                              " bytes before tensor '", e.name, "' (it begins at ", e.begin, ", ",
                                              after, " ends at ", expected, ")")
                               : absl::StrCat("invalid offsets: tensor '", e.name, "' (begins at ", e.begin,
                                              ") overlaps ", after, " (ends at ", expected, ")"));
    }
    uint64_t bytes = static_cast<uint64_t>(SizeOf(e.dtype));
    for (int64_t d : e.shape) {
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
        return Corrupt(path, absl::StrCat("tensor '", e.name, "' has shape ", ShapeStr(e.shape),
                                          " whose byte size overflows"));
      }
    }
    if (e.end - e.begin != bytes) {
      return Corrupt(path, absl::StrCat("wrong byte size: tensor '", e.name, "' (", Info(e.dtype).safetensors_name,
                                        " ", ShapeStr(e.shape), ") needs ", bytes, " bytes but data_offsets [",
                                        e.begin, ", ", e.end, "] span ", e.end - e.begin));
    }
    expected = e.end;
    previous = e.name;
  }
  // Rule 7: the file ends exactly where the data ends.
  if (8 + n + expected != file_size) {
    return Corrupt(path, 8 + n + expected > file_size
                             ? absl::StrCat("truncated: the header describes ", 8 + n + expected,
                                            " bytes but the file has ", file_size)
                             : absl::StrCat("trailing bytes: the header describes ", 8 + n + expected,
                                            " bytes but the file has ", file_size, " (",
                                            file_size - (8 + n + expected), " extra)"));
  }

  // Checksums (NOTE [safetensors checksums]): the metadata's and the
  // coverage are checked here, each tensor's data as it is read (read_entry
  // below); the file is returned only when every one passed.
  const uint64_t data_start = 8 + n;
  std::map<std::string, std::string> checksums;
  std::map<std::string, uint32_t> stored_crc;  // tensor name -> its checksum, when checksummed
  for (auto it = file.metadata.begin(); it != file.metadata.end();) {
    if (it->first.rfind(kChecksumPrefix, 0) == 0) {
      checksums.insert(*it);
      it = file.metadata.erase(it);
    } else {
      ++it;
    }
  }
  if (!checksums.empty()) {
    auto stored = [&](const std::string& key, const std::string& what, uint32_t* crc) -> absl::Status {
      auto it = checksums.find(key);
      if (it == checksums.end()) return Corrupt(path, absl::StrCat(what, " has no checksum ('", key, "' is missing)"));
      if (!ParseCrc32cHex(it->second, crc)) {
        return Corrupt(path, absl::StrCat("checksum '", key, "' of ", what, " is not 8 hex digits: '", it->second, "'"));
      }
      return absl::OkStatus();
    };
    uint32_t want = 0;
    if (absl::Status s = stored(kMetadataChecksumKey, "the metadata", &want); !s.ok()) return s;
    if (const uint32_t got = MetadataChecksum(file.metadata); got != want) {
      return Corrupt(path, absl::StrCat("checksum mismatch in the metadata (stored crc32c ", Crc32cHex(want),
                                        ", computed ", Crc32cHex(got), "): the header was changed or is corrupt"));
    }
    std::set<std::string> covered = {kMetadataChecksumKey};
    for (const Entry& e : entries) {
      const std::string key = kChecksumPrefix + e.name;
      if (absl::Status s = stored(key, absl::StrCat("tensor '", e.name, "'"), &want); !s.ok()) return s;
      covered.insert(key);
      stored_crc[e.name] = want;  // compared as the data is read, below
    }
    for (const auto& [k, v] : checksums) {
      if (!covered.count(k)) {
        return Corrupt(path, absl::StrCat("checksum '", k, "' names tensor '", k.substr(std::strlen(kChecksumPrefix)),
                                          "', which the file does not hold (a tensor was removed or renamed)"));
      }
    }
    file.checksummed = true;
    file.digest = Digest(checksums);
  }

  // FP8 scale companions (NOTE [safetensors fp8 scales]), validated before
  // any tensor is built.
  std::map<std::string, const Entry*> by_name;
  for (const Entry& e : entries) by_name[e.name] = &e;
  // Reads entry e's bytes into dst and checks them against its checksum.
  auto read_entry = [&](const Entry& e, void* dst) -> absl::Status {
    const size_t bytes = static_cast<size_t>(e.end - e.begin);
    if (absl::Status s = ReadFullyAt(fd.fd, data_start + e.begin, dst, bytes, path, where); !s.ok()) return s;
    auto want = stored_crc.find(e.name);
    if (want == stored_crc.end()) return absl::OkStatus();
    const uint32_t got = EntryChecksum(Info(e.dtype).safetensors_name, e.shape, dst, bytes);
    if (got == want->second) return absl::OkStatus();
    return Corrupt(path, absl::StrCat("checksum mismatch in tensor '", e.name, "' (stored crc32c ",
                                      Crc32cHex(want->second), ", computed ", Crc32cHex(got),
                                      "): its data or header entry is corrupt"));
  };
  absl::Status read_status;
  auto read_f32 = [&](const Entry& e) {
    float v = 0.0f;
    if (absl::Status s = read_entry(e, &v); !s.ok() && read_status.ok()) read_status = s;
    return v;
  };
  std::set<std::string> companions;
  std::map<std::string, std::pair<float, float>> scales;  // name -> (scale_inv, amax)
  for (const Entry& e : entries) {
    if (!IsFp8(e.dtype)) continue;
    auto si = by_name.find(e.name + kScaleInvSuffix);
    auto am = by_name.find(e.name + kAmaxSuffix);
    if (si == by_name.end()) {
      if (am != by_name.end()) {
        return Corrupt(path, absl::StrCat("FP8 tensor '", e.name, "' has '", e.name, kAmaxSuffix, "' but no '",
                                          e.name, kScaleInvSuffix, "'"));
      }
      continue;
    }
    for (auto c : {si, am}) {
      if (c == by_name.end()) continue;
      const Entry& ce = *c->second;
      if (ce.dtype != DType::kFloat32 || Numel(ce.shape) != 1) {
        return Corrupt(path, absl::StrCat("scale companion '", ce.name, "' of FP8 tensor '", e.name, "' is ",
                                          Info(ce.dtype).safetensors_name, " ", ShapeStr(ce.shape),
                                          "; expected F32 with one element (per-tensor scale)"));
      }
      companions.insert(ce.name);
    }
    const float scale_inv = read_f32(*si->second), amax = am == by_name.end() ? 0.0f : read_f32(*am->second);
    if (!read_status.ok()) return read_status;
    if (!(std::isfinite(scale_inv) && scale_inv > 0.0f)) {
      return Corrupt(path, absl::StrCat("FP8 tensor '", e.name, "' has ", e.name, kScaleInvSuffix, " = ", scale_inv,
                                        "; a scale must be finite and > 0"));
    }
    if (!(std::isfinite(amax) && amax >= 0.0f)) {
      return Corrupt(path, absl::StrCat("FP8 tensor '", e.name, "' has ", e.name, kAmaxSuffix, " = ", amax,
                                        "; an amax must be finite and >= 0"));
    }
    scales[e.name] = {scale_inv, amax};
  }

  // Everything is valid: build the tensors, in data order.
  for (const Entry& e : entries) {
    if (companions.count(e.name)) continue;
    Tensor t = Empty(e.shape, {.dtype = e.dtype});
    if (absl::Status s = read_entry(e, t.raw_data()); !s.ok()) return s;
    if (e.dtype == DType::kBool) {
      // Any nonzero byte is true; normalise so every bool holds 0 or 1.
      uint8_t* b = static_cast<uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) b[i] = b[i] != 0;
    }
    auto sc = scales.find(e.name);
    if (sc != scales.end()) {
      auto meta = std::make_shared<ScaleMeta>();
      meta->granularity = ScaleGranularity::kPerTensor;
      meta->scale_inv = Full({1}, sc->second.first);
      meta->scale = Full({1}, 1.0f / sc->second.first);
      meta->amax = Full({1}, sc->second.second);
      t = t.WithScaleMeta(std::move(meta));
    }
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

}  // namespace internal

void SaveSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                     const std::map<std::string, std::string>& metadata, uint32_t* digest) {
  internal::ThrowIfError(internal::SaveSafetensors(path, tensors, metadata, digest));
}

SafetensorsFile LoadSafetensors(const std::string& path) {
  absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
  internal::ThrowIfError(f.status());
  return *std::move(f);
}

}  // namespace octet::nn
