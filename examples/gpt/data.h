// Data pipeline of the GPT example (library target gpt_data, not part of
// liboctet): a byte-level tokenizer, a plain-text corpus loader (the default
// corpus is Debian's fortunes), llm.c token shards, and a deterministic,
// resumable batch sampler.
//
// Dimension letters: B = batch size, T = sequence length, V = vocab size.
// Every I/O or data error is an absl::Status whose message names the file or
// the offending value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <octet/core/tensor.h>

namespace octet::gpt {

// ---- byte-level tokenizer -------------------------------------------------------

// Token = byte value (0..255); V = 256. Encoding never fails; decoding fails
// on an id outside [0, 256).
class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  static std::vector<uint16_t> Encode(std::string_view text);
  // A prompt for sampling as ids: its last max_tokens bytes; an empty prompt
  // is the start of a fortune, "%\n" (train_gpt's end-of-run sample and
  // sample_gpt's --prompt).
  static std::vector<int64_t> PromptIds(std::string_view prompt, int64_t max_tokens);
  static absl::StatusOr<std::string> Decode(const std::vector<int64_t>& tokens);
  // For printing samples: keeps printable ASCII, newline and tab, shows a
  // backspace overstrike "x\bx" as "x", and every other byte as "\xNN".
  static std::string Printable(std::string_view bytes);
};

// ---- text corpus ----------------------------------------------------------------

inline constexpr const char* kDefaultCorpusPath = "/usr/share/games/fortunes";

struct CorpusOptions {
  // Document i (counting from 0 over the whole corpus) goes to validation
  // when i % validation_every == validation_every - 1 (every 10th fortune).
  int64_t validation_every = 10;
};

// NOTE [text corpus]: LoadTextCorpus(paths) reads each path in order:
//   - a regular file (or a symlink to one) is read whole, as bytes;
//   - a directory is listed in name order, not recursively (Debian's
//     fortunes-off keeps rot13 text in a subdirectory "off/"). Skipped: names
//     starting with '.', "*.dat" (strfile's binary index), "*.u8" symlinks
//     (fortunes' UTF-8 aliases of the same text), other symlinks whose target
//     is a file already read (targets are compared as canonical paths, and a
//     directory's regular files are read before its symlinks), and anything
//     that is not a regular file.
// A file is split into documents at lines holding only "%" (the fortune
// format); a file without such lines is one document. Empty and
// whitespace-only documents are dropped; each document ends with '\n'.
// Train/validation split: by document index (CorpusOptions). The token
// streams are the documents of each split, each followed by "%\n", so a model
// learns where a fortune ends. When the corpus has fewer than
// validation_every documents, validation gets instead the last
// 1/validation_every of the bytes of the train stream.
// Errors: a path that does not exist or cannot be read (NotFound /
// the errno), an empty corpus (no non-empty document in the given paths).
struct TextCorpus {
  std::vector<std::string> files;  // files read, in order
  int64_t num_documents = 0;
  int64_t num_train_documents = 0;
  int64_t num_val_documents = 0;
  int64_t bytes_read = 0;             // total size of the files read
  std::vector<uint16_t> train_tokens;  // byte tokens, V = 256
  std::vector<uint16_t> val_tokens;
};

absl::StatusOr<TextCorpus> LoadTextCorpus(const std::vector<std::string>& paths, const CorpusOptions& options = {});

// ---- llm.c token shards -----------------------------------------------------------

// NOTE [llm.c token shard]: a 1024-byte header of 256 little-endian int32
// (h[0] = 20240520 magic, h[1] = 1 version, h[2] = ntok, the rest 0) followed
// by ntok uint16 tokens. A shard is valid when magic and version match,
// ntok > 0, the file is exactly 1024 + 2*ntok bytes, and (when read) every
// token is < vocab_size. Llama-3 shards (magic 20240801, version 7, uint32
// tokens) are rejected with a message saying so.
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;
inline constexpr int64_t kGpt2VocabSize = 50257;

// Checks the header and the file size; returns ntok.
absl::StatusOr<int64_t> ReadTokenShardHeader(const std::string& path);
// Reads and checks a whole shard (also the token ids against vocab_size).
absl::StatusOr<std::vector<uint16_t>> ReadTokenShard(const std::string& path, int64_t vocab_size = kGpt2VocabSize);
// Writes a shard atomically (temp file + rename). Error for an empty token
// list or more than INT32_MAX tokens.
absl::Status WriteTokenShard(const std::string& path, const std::vector<uint16_t>& tokens);
// Expands a glob pattern (e.g. "data/fineweb_train_*.bin") into sorted file
// names; a pattern without wildcards is returned as is when the file exists.
// Error when nothing matches.
absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern);

// ---- dataset and batch sampler -------------------------------------------------------

// A list of token shards, in memory or on disk (read on demand, one at a time).
class TokenDataset {
 public:
  // Reads and checks each shard's header now (file size included); tokens are
  // read and range-checked when a shard is first used.
  static absl::StatusOr<TokenDataset> FromShardFiles(const std::vector<std::string>& paths,
                                                     int64_t vocab_size = kGpt2VocabSize);
  // One in-memory shard. Error when tokens is empty or holds an id >= vocab_size.
  static absl::StatusOr<TokenDataset> FromTokens(std::vector<uint16_t> tokens, int64_t vocab_size,
                                                 std::string name = "memory");

  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  int64_t shard_tokens(int64_t i) const { return shards_.at(i).num_tokens; }
  const std::string& shard_name(int64_t i) const { return shards_.at(i).name; }
  absl::StatusOr<std::shared_ptr<const std::vector<uint16_t>>> LoadShard(int64_t i) const;

 private:
  struct Shard {
    std::string name;  // the path, or the in-memory name
    int64_t num_tokens = 0;
    std::shared_ptr<const std::vector<uint16_t>> tokens;  // null for on-disk shards
  };
  std::vector<Shard> shards_;
  int64_t vocab_size_ = 0;
};

// Where the next batch comes from: `offset` batches of shard number `shard`
// (in epoch `epoch`'s shard order) have been taken.
struct DataPosition {
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t offset = 0;
  friend bool operator==(const DataPosition&, const DataPosition&) = default;
};

// Checkpoint helpers: "<prefix>epoch", "<prefix>shard", "<prefix>offset".
void PositionToMetadata(const DataPosition& pos, std::map<std::string, std::string>* metadata,
                        const std::string& prefix = "data.");
absl::StatusOr<DataPosition> PositionFromMetadata(const std::map<std::string, std::string>& metadata,
                                                  const std::string& prefix = "data.");

struct Batch {
  Tensor inputs;   // (B,T) int64
  Tensor targets;  // (B,T) int64: inputs shifted by one token
  DataPosition position;  // where this batch came from
  int64_t shard_index = 0;   // the dataset's shard it was read from
  int64_t token_offset = 0;  // index of inputs[0][0] in that shard
};

// NOTE [batch sampler]: llm.c's DataLoader. A shard of ntok tokens holds
// (ntok - 1) / (W*B*T) samples (W = world_size); sample s of rank r is the
// B*T+1 tokens starting at s*W*B*T + r*B*T, viewed as inputs = x[0:B*T] and
// targets = x[1:B*T+1] in (B,T). Without shuffle, shards and samples are taken
// in order; with shuffle, epoch e takes the shards in a permutation seeded by
// (seed, e) and each shard's samples in a permutation seeded by (seed, e,
// shard) (SplitMix64 + Fisher-Yates: the same on every platform and for
// every rank). After the last sample of the last shard, the epoch
// increments. The sampler is a pure function of (dataset, options, position),
// so saving position() and restoring it with SetPosition gives the same
// batches bit for bit.
class BatchSampler {
 public:
  struct Options {
    int64_t batch_size = 4;  // B
    int64_t seq_len = 64;    // T
    bool shuffle = false;
    uint64_t seed = 1337;
    int64_t rank = 0;
    int64_t world_size = 1;
  };
  // Errors: B, T or world_size < 1, rank outside [0, world_size), a shard
  // shorter than T+1 tokens ("sequence length longer than the data") or than
  // W*B*T+1 tokens (one batch per rank).
  static absl::StatusOr<BatchSampler> Create(std::shared_ptr<const TokenDataset> data, const Options& options);

  // The next batch; errors come from reading an on-disk shard.
  absl::StatusOr<Batch> Next();
  DataPosition position() const { return position_; }
  // Error (sampler unchanged) when pos is outside the dataset.
  absl::Status SetPosition(const DataPosition& pos);
  // Samples (batches) per shard for this rank.
  int64_t batches_in_shard(int64_t shard_index) const;
  // Batches in one epoch (all shards).
  int64_t batches_per_epoch() const;
  const Options& options() const { return options_; }

 private:
  BatchSampler(std::shared_ptr<const TokenDataset> data, const Options& options);
  int64_t ShardAt(int64_t epoch, int64_t shard) const;  // dataset shard index
  int64_t SampleAt(int64_t epoch, int64_t shard_index, int64_t offset);

  std::shared_ptr<const TokenDataset> data_;
  Options options_;
  DataPosition position_;
  // Cache: the loaded shard and the sample permutation of (epoch, shard).
  int64_t loaded_index_ = -1;
  std::shared_ptr<const std::vector<uint16_t>> loaded_;
  int64_t perm_epoch_ = -1, perm_shard_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace octet::gpt
