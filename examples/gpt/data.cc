#include "examples/gpt/data.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octet::gpt {

static_assert(std::endian::native == std::endian::little, "llm.c shards are little-endian");

namespace {

namespace fs = std::filesystem;

absl::Status Errno(int err, const std::string& what) {
  return absl::ErrnoToStatus(err, what);  // appends ": <strerror>"
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("cannot open '", path, "'"));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Errno(err, absl::StrCat("cannot read '", path, "'"));
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

absl::Status PreadExact(int fd, void* dst, size_t n, off_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, offset);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("cannot read '", path, "'"));
    }
    if (r == 0) return absl::DataLossError(absl::StrCat("token shard '", path, "': unexpected end of file"));
    p += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
  return absl::OkStatus();
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// Splits text at lines holding only "%" (see NOTE [text corpus]).
void SplitDocuments(const std::string& text, std::vector<std::string>* docs) {
  std::string current;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string::npos ? text.size() : nl + 1;
    std::string_view line(text.data() + pos, end - pos);
    std::string_view bare = line;
    while (!bare.empty() && (bare.back() == '\n' || bare.back() == '\r')) bare.remove_suffix(1);
    if (bare == "%") {
      if (!IsBlank(current)) docs->push_back(std::move(current));
      current.clear();
    } else {
      current.append(line);
    }
    pos = end;
  }
  if (!IsBlank(current)) docs->push_back(std::move(current));
  for (std::string& d : *docs) {
    if (d.back() != '\n') d.push_back('\n');
  }
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A permutation of 0..n-1 from the stream keyed by (seed, a, b).
std::vector<int64_t> Permutation(int64_t n, uint64_t seed, uint64_t a, uint64_t b) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed;
  state = SplitMix64(&state) ^ (a * 0xD1B54A32D192ED03ull);
  state = SplitMix64(&state) ^ (b * 0x8CB92BA72F3D8DD7ull);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(SplitMix64(&state) % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

}  // namespace

// ---- tokenizer -------------------------------------------------------------------------

std::vector<uint16_t> ByteTokenizer::Encode(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::vector<int64_t> ByteTokenizer::PromptIds(std::string_view prompt, int64_t max_tokens) {
  if (prompt.empty()) prompt = "%\n";
  if (static_cast<int64_t>(prompt.size()) > max_tokens) prompt.remove_prefix(prompt.size() - max_tokens);
  std::vector<int64_t> ids(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) ids[i] = static_cast<unsigned char>(prompt[i]);
  return ids;
}

absl::StatusOr<std::string> ByteTokenizer::Decode(const std::vector<int64_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= kVocabSize) {
      return absl::InvalidArgumentError(absl::StrCat("byte tokenizer: token id ", tokens[i], " at position ", i,
                                                     " is outside [0, ", kVocabSize, ")"));
    }
    out[i] = static_cast<char>(tokens[i]);
  }
  return out;
}

std::string ByteTokenizer::Printable(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c == '\b') {
      if (!out.empty()) out.pop_back();  // overstrike: the next byte replaces the previous one
    } else if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7F)) {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("\\x%02X", c);
    }
  }
  return out;
}

// ---- text corpus ---------------------------------------------------------------------------

absl::StatusOr<TextCorpus> LoadTextCorpus(const std::vector<std::string>& paths, const CorpusOptions& options) {
  if (options.validation_every < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("text corpus: validation_every must be >= 2, got ", options.validation_every));
  }
  if (paths.empty()) return absl::InvalidArgumentError("text corpus: no paths given");
  TextCorpus corpus;
  std::set<std::string> read;  // canonical paths already read
  std::vector<std::string> docs;

  auto read_file = [&](const fs::path& p) -> absl::Status {
    std::error_code ec;
    const fs::path canon = fs::canonical(p, ec);
    if (ec) return absl::NotFoundError(absl::StrCat("text corpus: cannot resolve '", p.string(), "': ", ec.message()));
    if (!read.insert(canon.string()).second) return absl::OkStatus();
    absl::StatusOr<std::string> text = ReadWholeFile(p.string());
    if (!text.ok()) return text.status();
    corpus.files.push_back(p.string());
    corpus.bytes_read += static_cast<int64_t>(text->size());
    SplitDocuments(*text, &docs);
    return absl::OkStatus();
  };

  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);  // follows symlinks
    if (ec || !fs::exists(st)) {
      return absl::NotFoundError(absl::StrCat("text corpus: '", path, "' does not exist"));
    }
    if (fs::is_regular_file(st)) {
      if (absl::Status s = read_file(path); !s.ok()) return s;
      continue;
    }
    if (!fs::is_directory(st)) {
      return absl::InvalidArgumentError(absl::StrCat("text corpus: '", path, "' is neither a file nor a directory"));
    }
    std::vector<fs::path> files, links;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path p = it->path();
      const std::string name = p.filename().string();
      if (name.empty() || name[0] == '.' || EndsWith(name, ".dat")) continue;
      std::error_code e2;
      if (it->is_symlink(e2)) {
        if (!EndsWith(name, ".u8")) links.push_back(p);
      } else if (it->is_regular_file(e2)) {
        files.push_back(p);
      }
    }
    if (ec) return Errno(ec.value(), absl::StrCat("text corpus: cannot list '", path, "'"));
    std::sort(files.begin(), files.end());
    std::sort(links.begin(), links.end());
    for (const fs::path& p : files) {
      if (absl::Status s = read_file(p); !s.ok()) return s;
    }
    for (const fs::path& p : links) {
      std::error_code e2;
      if (!fs::is_regular_file(fs::status(p, e2)) || e2) continue;  // dangling, or not a file
      if (absl::Status s = read_file(p); !s.ok()) return s;
    }
  }
  if (docs.empty()) {
    std::string list;
    for (const std::string& p : paths) absl::StrAppend(&list, list.empty() ? "'" : ", '", p, "'");
    return absl::InvalidArgumentError(absl::StrCat("text corpus: empty corpus: no text in ", list, " (",
                                                   corpus.files.size(), " files read)"));
  }
  std::string train, val;
  const int64_t every = options.validation_every;
  corpus.num_documents = static_cast<int64_t>(docs.size());
  for (int64_t i = 0; i < corpus.num_documents; ++i) {
    const bool is_val = corpus.num_documents >= every && i % every == every - 1;
    std::string& dst = is_val ? val : train;
    dst += docs[i];
    dst += "%\n";
    (is_val ? corpus.num_val_documents : corpus.num_train_documents) += 1;
  }
  if (val.empty()) {  // fewer documents than validation_every: split the bytes
    const size_t n = train.size() / static_cast<size_t>(every);
    val = train.substr(train.size() - n);
    train.resize(train.size() - n);
  }
  corpus.train_tokens = ByteTokenizer::Encode(train);
  corpus.val_tokens = ByteTokenizer::Encode(val);
  return corpus;
}

// ---- token shards --------------------------------------------------------------------------

absl::StatusOr<int64_t> ReadTokenShardHeader(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("token shard '", path, "': cannot open"));
  struct stat st;
  int32_t h[256];
  absl::Status s = absl::OkStatus();
  if (::fstat(fd, &st) != 0) {
    s = Errno(errno, absl::StrCat("token shard '", path, "': cannot stat"));
  } else if (!S_ISREG(st.st_mode)) {
    s = absl::InvalidArgumentError(absl::StrCat("token shard '", path, "': not a regular file"));
  } else if (st.st_size < kShardHeaderBytes) {
    s = absl::DataLossError(absl::StrCat("token shard '", path, "': the file has ", st.st_size,
                                         " bytes, fewer than the 1024-byte header"));
  } else {
    s = PreadExact(fd, h, sizeof(h), 0, path);
  }
  ::close(fd);
  if (!s.ok()) return s;
  if (h[0] == 20240801) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "': magic 20240801 is llm.c's Llama-3 format ",
                                            "(uint32 tokens), not supported; expected GPT-2 shards (magic ",
                                            kShardMagic, ")"));
  }
  if (h[0] != kShardMagic) {
    return absl::DataLossError(
        absl::StrCat("token shard '", path, "': bad magic ", h[0], " (expected ", kShardMagic, ")"));
  }
  if (h[1] != kShardVersion) {
    return absl::DataLossError(
        absl::StrCat("token shard '", path, "': bad version ", h[1], " (expected ", kShardVersion, ")"));
  }
  const int64_t ntok = h[2];
  if (ntok <= 0) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "': the header says ", ntok, " tokens"));
  }
  const int64_t expected = kShardHeaderBytes + 2 * ntok;
  if (st.st_size != expected) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "': wrong size: the header says ", ntok,
                                            " tokens, so the file should have ", expected, " bytes, but it has ",
                                            st.st_size, st.st_size < expected ? " (truncated)" : " (trailing bytes)"));
  }
  return ntok;
}

absl::StatusOr<std::vector<uint16_t>> ReadTokenShard(const std::string& path, int64_t vocab_size) {
  absl::StatusOr<int64_t> ntok = ReadTokenShardHeader(path);
  if (!ntok.ok()) return ntok.status();
  std::vector<uint16_t> tokens(static_cast<size_t>(*ntok));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("token shard '", path, "': cannot open"));
  absl::Status s = PreadExact(fd, tokens.data(), tokens.size() * 2, kShardHeaderBytes, path);
  ::close(fd);
  if (!s.ok()) return s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      return absl::DataLossError(absl::StrCat("token shard '", path, "': token id ", tokens[i], " at index ", i,
                                              " is >= the vocab size ", vocab_size));
    }
  }
  return tokens;
}

absl::Status WriteTokenShard(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "': cannot write ", tokens.size(), " tokens (need 1..INT32_MAX)"));
  }
  int32_t h[256] = {};
  h[0] = kShardMagic;
  h[1] = kShardVersion;
  h[2] = static_cast<int32_t>(tokens.size());
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, absl::StrCat("token shard '", path, "': cannot create '", tmp, "'"));
  auto write_all = [&](const void* data, size_t n) -> bool {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  bool ok = write_all(h, sizeof(h)) && write_all(tokens.data(), tokens.size() * 2) && ::fsync(fd) == 0;
  const int err = errno;
  ok = (::close(fd) == 0) && ok;
  if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return absl::OkStatus();
  const int err2 = ok ? errno : err;
  ::unlink(tmp.c_str());
  return Errno(err2, absl::StrCat("token shard '", path, "': write failed"));
}

absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern) {
  glob_t g;
  std::memset(&g, 0, sizeof(g));
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (out.empty()) return absl::NotFoundError(absl::StrCat("token shards: no file matches '", pattern, "'"));
  std::sort(out.begin(), out.end());
  return out;
}

// ---- dataset ---------------------------------------------------------------------------------

absl::StatusOr<TokenDataset> TokenDataset::FromShardFiles(const std::vector<std::string>& paths, int64_t vocab_size) {
  if (paths.empty()) return absl::InvalidArgumentError("token dataset: no shard files given");
  if (vocab_size < 1 || vocab_size > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("token dataset: vocab size ", vocab_size, " is not in [1, 65536]"));
  }
  TokenDataset d;
  d.vocab_size_ = vocab_size;
  for (const std::string& p : paths) {
    absl::StatusOr<int64_t> ntok = ReadTokenShardHeader(p);
    if (!ntok.ok()) return ntok.status();
    d.shards_.push_back({p, *ntok, nullptr});
  }
  return d;
}

absl::StatusOr<TokenDataset> TokenDataset::FromTokens(std::vector<uint16_t> tokens, int64_t vocab_size,
                                                      std::string name) {
  if (vocab_size < 1 || vocab_size > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("token dataset: vocab size ", vocab_size, " is not in [1, 65536]"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError(absl::StrCat("token dataset '", name, "': no tokens"));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token dataset '", name, "': token id ", tokens[i], " at index ",
                                                     i, " is >= the vocab size ", vocab_size));
    }
  }
  TokenDataset d;
  d.vocab_size_ = vocab_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  d.shards_.push_back({std::move(name), n, std::make_shared<const std::vector<uint16_t>>(std::move(tokens))});
  return d;
}

absl::StatusOr<std::shared_ptr<const std::vector<uint16_t>>> TokenDataset::LoadShard(int64_t i) const {
  if (i < 0 || i >= num_shards()) {
    return absl::OutOfRangeError(absl::StrCat("token dataset: shard ", i, " of ", num_shards()));
  }
  const Shard& s = shards_[i];
  if (s.tokens) return s.tokens;
  absl::StatusOr<std::vector<uint16_t>> tokens = ReadTokenShard(s.name, vocab_size_);
  if (!tokens.ok()) return tokens.status();
  if (static_cast<int64_t>(tokens->size()) != s.num_tokens) {
    return absl::DataLossError(absl::StrCat("token shard '", s.name, "': changed since it was opened (",
                                            s.num_tokens, " tokens then, ", tokens->size(), " now)"));
  }
  return std::make_shared<const std::vector<uint16_t>>(std::move(*tokens));
}

// ---- positions ---------------------------------------------------------------------------------

void PositionToMetadata(const DataPosition& pos, std::map<std::string, std::string>* metadata,
                        const std::string& prefix) {
  (*metadata)[prefix + "epoch"] = std::to_string(pos.epoch);
  (*metadata)[prefix + "shard"] = std::to_string(pos.shard);
  (*metadata)[prefix + "offset"] = std::to_string(pos.offset);
}

absl::StatusOr<DataPosition> PositionFromMetadata(const std::map<std::string, std::string>& metadata,
                                                  const std::string& prefix) {
  DataPosition pos;
  using Field = std::pair<const char*, int64_t*>;
  for (const auto& [key, field] : std::initializer_list<Field>{{"epoch", &pos.epoch}, {"shard", &pos.shard}, {"offset", &pos.offset}}) {
    auto it = metadata.find(prefix + key);
    if (it == metadata.end()) {
      return absl::NotFoundError(absl::StrCat("data position: metadata has no '", prefix, key, "'"));
    }
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || errno != 0 || *end != '\0' || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data position: '", prefix, key, "' = '", it->second, "' is not a non-negative integer"));
    }
    *field = v;
  }
  return pos;
}

// ---- batch sampler --------------------------------------------------------------------------------

BatchSampler::BatchSampler(std::shared_ptr<const TokenDataset> data, const Options& options)
    : data_(std::move(data)), options_(options) {}

absl::StatusOr<BatchSampler> BatchSampler::Create(std::shared_ptr<const TokenDataset> data, const Options& o) {
  if (!data || data->num_shards() == 0) return absl::InvalidArgumentError("batch sampler: no data");
  if (o.batch_size < 1 || o.seq_len < 1 || o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("batch sampler: bad options B=", o.batch_size, " T=", o.seq_len,
                                                   " rank=", o.rank, " world_size=", o.world_size));
  }
  const int64_t need = o.world_size * o.batch_size * o.seq_len + 1;
  for (int64_t i = 0; i < data->num_shards(); ++i) {
    const int64_t n = data->shard_tokens(i);
    if (o.seq_len + 1 > n) {
      return absl::InvalidArgumentError(absl::StrCat("batch sampler: sequence length T=", o.seq_len,
                                                     " is longer than the data: shard '", data->shard_name(i),
                                                     "' has ", n, " tokens (a sequence needs T+1)"));
    }
    if (need > n) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch sampler: shard '", data->shard_name(i), "' has ", n, " tokens, fewer than the ", need,
                       " one batch needs (world_size*B*T+1 with B=", o.batch_size, ", T=", o.seq_len,
                       ", world_size=", o.world_size, "); use a smaller batch or sequence"));
    }
  }
  return BatchSampler(std::move(data), o);
}

int64_t BatchSampler::batches_in_shard(int64_t shard_index) const {
  return (data_->shard_tokens(shard_index) - 1) / (options_.world_size * options_.batch_size * options_.seq_len);
}

int64_t BatchSampler::batches_per_epoch() const {
  int64_t n = 0;
  for (int64_t i = 0; i < data_->num_shards(); ++i) n += batches_in_shard(i);
  return n;
}

int64_t BatchSampler::ShardAt(int64_t epoch, int64_t shard) const {
  if (!options_.shuffle || data_->num_shards() == 1) return shard;
  return Permutation(data_->num_shards(), options_.seed, static_cast<uint64_t>(epoch), ~0ull)[shard];
}

int64_t BatchSampler::SampleAt(int64_t epoch, int64_t shard_index, int64_t offset) {
  if (!options_.shuffle) return offset;
  if (perm_epoch_ != epoch || perm_shard_ != shard_index) {
    perm_ = Permutation(batches_in_shard(shard_index), options_.seed, static_cast<uint64_t>(epoch),
                        static_cast<uint64_t>(shard_index));
    perm_epoch_ = epoch;
    perm_shard_ = shard_index;
  }
  return perm_[offset];
}

absl::Status BatchSampler::SetPosition(const DataPosition& pos) {
  if (pos.epoch < 0 || pos.shard < 0 || pos.shard >= data_->num_shards() || pos.offset < 0 ||
      pos.offset >= batches_in_shard(ShardAt(pos.epoch, pos.shard))) {
    return absl::OutOfRangeError(absl::StrCat("batch sampler: position (epoch ", pos.epoch, ", shard ", pos.shard,
                                              ", offset ", pos.offset, ") is outside the dataset (",
                                              data_->num_shards(), " shards)"));
  }
  position_ = pos;
  return absl::OkStatus();
}

absl::StatusOr<Batch> BatchSampler::Next() {
  const Options& o = options_;
  const int64_t shard_index = ShardAt(position_.epoch, position_.shard);
  if (loaded_index_ != shard_index) {
    absl::StatusOr<std::shared_ptr<const std::vector<uint16_t>>> tokens = data_->LoadShard(shard_index);
    if (!tokens.ok()) return tokens.status();
    loaded_ = std::move(*tokens);
    loaded_index_ = shard_index;
  }
  const int64_t bt = o.batch_size * o.seq_len;
  const int64_t sample = SampleAt(position_.epoch, shard_index, position_.offset);
  const int64_t start = sample * o.world_size * bt + o.rank * bt;
  const uint16_t* x = loaded_->data() + start;  // B*T+1 tokens, inside the shard by construction
  std::vector<int64_t> in(bt), tgt(bt);
  for (int64_t i = 0; i < bt; ++i) {
    in[i] = x[i];
    tgt[i] = x[i + 1];
  }
  Batch b;
  b.inputs = FromVector(in, {o.batch_size, o.seq_len});
  b.targets = FromVector(tgt, {o.batch_size, o.seq_len});
  b.position = position_;
  b.shard_index = shard_index;
  b.token_offset = start;
  // Advance (the position always names a valid next batch).
  if (++position_.offset >= batches_in_shard(shard_index)) {
    position_.offset = 0;
    if (++position_.shard >= data_->num_shards()) {
      position_.shard = 0;
      ++position_.epoch;
    }
  }
  return b;
}

}  // namespace octet::gpt
