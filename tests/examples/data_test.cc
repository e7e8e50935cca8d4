// The GPT example's data pipeline: byte tokenizer, text corpus rules (on a
// hand-made directory and on the fortunes corpus when installed), llm.c token
// shards (every header/size/token check), the batch sampler (shifted
// targets, llm.c offsets, shuffling, bit-identical resume, errors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "examples/gpt/data.h"
#include "tests/test_util.h"

namespace octet::gpt {
namespace {

namespace fs = std::filesystem;
using ::octet::testing::WriteFile;

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ::octet::testing::FreshTestDir("data_test"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};


std::string Text(const std::vector<uint16_t>& tokens) {
  std::string s;
  for (uint16_t t : tokens) s.push_back(static_cast<char>(t));
  return s;
}

std::vector<int64_t> Ints(const Tensor& t) {
  const std::vector<double> d = t.ToDoubles();
  return std::vector<int64_t>(d.begin(), d.end());
}

// ---- tokenizer ----------------------------------------------------------------

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  const std::vector<uint16_t> t = ByteTokenizer::Encode(all);
  ASSERT_EQ(t.size(), 256u);
  for (int c = 0; c < 256; ++c) EXPECT_EQ(t[c], c);
  const absl::StatusOr<std::string> back = ByteTokenizer::Decode(std::vector<int64_t>(t.begin(), t.end()));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, all);
  const absl::StatusOr<std::string> bad = ByteTokenizer::Decode({65, 256});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token id 256 at position 1 is outside [0, 256)"), std::string::npos);
}

TEST(ByteTokenizer, PromptIdsDefaultToAFortuneStartAndKeepTheLastBytes) {
  EXPECT_EQ(ByteTokenizer::PromptIds("", 128), (std::vector<int64_t>{'%', '\n'}));
  EXPECT_EQ(ByteTokenizer::PromptIds("ab\xFF", 128), (std::vector<int64_t>{97, 98, 255}));  // bytes, not chars
  EXPECT_EQ(ByteTokenizer::PromptIds("ab\xFF", 2), (std::vector<int64_t>{98, 255}));
}

TEST(ByteTokenizer, PrintableEscapesAndResolvesOverstrike) {
  EXPECT_EQ(ByteTokenizer::Printable("a\tb\n"), "a\tb\n");
  EXPECT_EQ(ByteTokenizer::Printable("_\bH_\bi"), "Hi");  // underlined "Hi"
  EXPECT_EQ(ByteTokenizer::Printable(std::string("\x01\xC3\xA9", 3)), "\\x01\\xC3\\xA9");
}

// ---- text corpus ----------------------------------------------------------------

TEST_F(DataTest, CorpusDirectoryRules) {
  fs::create_directories(dir_ / "corpus" / "off");
  const fs::path c = dir_ / "corpus";
  WriteFile((c / "alpha").string(), "one\n%\ntwo\n%\n\n%\nthree\n");  // 3 documents (the blank one is dropped)
  WriteFile((c / "alpha.dat").string(), std::string("\x00\x01\x02", 3));
  fs::create_symlink("alpha", c / "alpha.u8");
  fs::create_symlink("alpha", c / "zz_alias");                 // same file again: skipped
  WriteFile((dir_ / "outside.txt").string(), "four");         // a file outside, no '%': one document
  fs::create_symlink(dir_ / "outside.txt", c / "beta_link");  // a symlink to a new file: read
  WriteFile((c / "off" / "gamma").string(), "hidden in a subdirectory\n");
  WriteFile((c / ".hidden").string(), "dot file\n");
  fs::create_symlink(dir_ / "missing", c / "dangling");

  absl::StatusOr<TextCorpus> corpus = LoadTextCorpus({c.string()}, {.validation_every = 2});
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  ASSERT_EQ(corpus->files.size(), 2u);
  EXPECT_EQ(corpus->files[0], (c / "alpha").string());
  EXPECT_EQ(corpus->files[1], (c / "beta_link").string());
  EXPECT_EQ(corpus->bytes_read, 21 + 4);
  EXPECT_EQ(corpus->num_documents, 4);
  // Documents 1 and 3 (every 2nd) go to validation; each ends with "\n%\n".
  EXPECT_EQ(Text(corpus->train_tokens), "one\n%\nthree\n%\n");
  EXPECT_EQ(Text(corpus->val_tokens), "two\n%\nfour\n%\n");
  EXPECT_EQ(corpus->num_train_documents, 2);
  EXPECT_EQ(corpus->num_val_documents, 2);

  // Explicit files; the same file twice is read once.
  corpus = LoadTextCorpus({(c / "alpha").string(), (c / "alpha.u8").string()});
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->files.size(), 1u);
  // Fewer documents than validation_every: the last 1/10 of the bytes.
  EXPECT_EQ(corpus->num_val_documents, 0);
  const std::string all = "one\n%\ntwo\n%\nthree\n%\n";
  EXPECT_EQ(Text(corpus->train_tokens) + Text(corpus->val_tokens), all);
  EXPECT_EQ(corpus->val_tokens.size(), all.size() / 10);
}

TEST_F(DataTest, CorpusErrors) {
  absl::StatusOr<TextCorpus> c = LoadTextCorpus({Path("nope")});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsNotFound(c.status()));
  EXPECT_NE(c.status().message().find("'" + Path("nope") + "' does not exist"), std::string::npos) << c.status();
  fs::create_directories(dir_ / "empty");
  WriteFile(Path("empty/blank"), "  \n%\n\n");
  c = LoadTextCorpus({Path("empty")});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("empty corpus: no text in '" + Path("empty") + "' (1 files read)"),
            std::string::npos)
      << c.status();
}

TEST(TextCorpus, DefaultFortunesCorpus) {
  if (!fs::exists(kDefaultCorpusPath)) GTEST_SKIP() << "fortunes not installed at " << kDefaultCorpusPath;
  absl::StatusOr<TextCorpus> c = LoadTextCorpus({kDefaultCorpusPath});
  ASSERT_TRUE(c.ok()) << c.status();
  std::set<std::string> seen;
  for (const std::string& f : c->files) {
    EXPECT_FALSE(f.ends_with(".dat")) << f;
    EXPECT_FALSE(f.ends_with(".u8")) << f;
    EXPECT_TRUE(seen.insert(fs::canonical(f).string()).second) << f << " read twice";
  }
  // FORMATS.md §5: about 2.5 MB of text once .dat files and symlinks are left out.
  EXPECT_GT(c->bytes_read, 2'000'000);
  EXPECT_LT(c->bytes_read, 3'500'000);
  EXPECT_GT(c->num_documents, 5000);
  EXPECT_EQ(c->num_val_documents, c->num_documents / 10);
  const double val_frac = static_cast<double>(c->val_tokens.size()) / (c->train_tokens.size() + c->val_tokens.size());
  EXPECT_GT(val_frac, 0.05);
  EXPECT_LT(val_frac, 0.15);
}

// ---- token shards ------------------------------------------------------------------

std::string ShardBytes(int32_t magic, int32_t version, int32_t ntok, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic, h[1] = version, h[2] = ntok;
  return std::string(reinterpret_cast<const char*>(h.data()), 1024) +
         std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

TEST_F(DataTest, ShardRoundTripAndLayout) {
  const std::vector<uint16_t> tokens = {50256, 0, 1, 2, 3, 4, 5};
  ASSERT_TRUE(WriteTokenShard(Path("s.bin"), tokens).ok());
  EXPECT_EQ(fs::file_size(Path("s.bin")), 1024u + 14u);
  std::ifstream in(Path("s.bin"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, ShardBytes(20240520, 1, 7, tokens));
  absl::StatusOr<std::vector<uint16_t>> back = ReadTokenShard(Path("s.bin"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, tokens);
}

TEST_F(DataTest, EveryCorruptShardIsRejected) {
  const std::vector<uint16_t> t = {1, 2, 3};
  const struct {
    const char* name;
    std::string bytes;
    const char* problem;
  } cases[] = {
      {"short", std::string(100, '\0'), "fewer than the 1024-byte header"},
      {"magic", ShardBytes(12345, 1, 3, t), "bad magic 12345 (expected 20240520)"},
      {"llama3", ShardBytes(20240801, 7, 3, t), "Llama-3 format"},
      {"version", ShardBytes(20240520, 2, 3, t), "bad version 2 (expected 1)"},
      {"zero_tokens", ShardBytes(20240520, 1, 0, {}), "the header says 0 tokens"},
      {"truncated", ShardBytes(20240520, 1, 4, t), "should have 1032 bytes, but it has 1030 (truncated)"},
      {"trailing", ShardBytes(20240520, 1, 2, t), "should have 1028 bytes, but it has 1030 (trailing bytes)"},
      {"token_range", ShardBytes(20240520, 1, 3, {1, 50257, 3}), "token id 50257 at index 1 is >= the vocab size 50257"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Path(std::string(c.name) + ".bin");
    WriteFile(path, c.bytes);
    absl::StatusOr<std::vector<uint16_t>> r = ReadTokenShard(path);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("token shard '" + path + "'"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(c.problem), std::string::npos) << r.status();
  }
  absl::StatusOr<std::vector<uint16_t>> missing = ReadTokenShard(Path("missing.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_NE(missing.status().message().find("token shard '" + Path("missing.bin") + "': cannot open"),
            std::string::npos);
  // A smaller vocabulary (the byte tokenizer's) is checked too.
  WriteFile(Path("bytes.bin"), ShardBytes(20240520, 1, 2, {255, 256}));
  EXPECT_NE(ReadTokenShard(Path("bytes.bin"), 256).status().message().find("token id 256 at index 1"),
            std::string::npos);
}

TEST_F(DataTest, ExpandShardPattern) {
  for (const char* n : {"d_train_000002.bin", "d_train_000001.bin", "d_val_000000.bin"})
    ASSERT_TRUE(WriteTokenShard(Path(n), {1, 2}).ok());
  absl::StatusOr<std::vector<std::string>> m = ExpandShardPattern(Path("d_train_*.bin"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, (std::vector<std::string>{Path("d_train_000001.bin"), Path("d_train_000002.bin")}));
  EXPECT_NE(ExpandShardPattern(Path("x_*.bin")).status().message().find("no file matches"), std::string::npos);
}

// ---- batch sampler ---------------------------------------------------------------------

std::shared_ptr<const TokenDataset> Counting(int64_t n, int64_t vocab = 50257) {
  std::vector<uint16_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i % vocab);
  return std::make_shared<const TokenDataset>(*TokenDataset::FromTokens(t, vocab));
}

TEST(BatchSampler, SequentialBatchesAreShiftedByOneLikeLlmc) {
  // 100 tokens 0..99, B=2, T=4: (100-1)/8 = 12 batches per epoch.
  absl::StatusOr<BatchSampler> s = BatchSampler::Create(Counting(100), {.batch_size = 2, .seq_len = 4});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->batches_per_epoch(), 12);
  absl::StatusOr<Batch> b = s->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->inputs.shape(), (Shape{2, 4}));
  EXPECT_EQ(b->inputs.dtype(), DType::kInt64);
  EXPECT_EQ(Ints(b->inputs), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(Ints(b->targets), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  b = s->Next();
  EXPECT_EQ(Ints(b->inputs)[0], 8);
  for (int i = 2; i < 12; ++i) ASSERT_TRUE(s->Next().ok());
  EXPECT_EQ(s->position(), (DataPosition{.epoch = 1, .shard = 0, .offset = 0}));  // wrapped
  EXPECT_EQ(Ints(s->Next()->inputs)[0], 0);
}

TEST(BatchSampler, RanksReadInterleavedChunks) {
  // llm.c: sample s of rank r starts at s*W*B*T + r*B*T.
  auto data = Counting(1000);
  absl::StatusOr<BatchSampler> r0 = BatchSampler::Create(data, {.batch_size = 2, .seq_len = 5, .rank = 0, .world_size = 3});
  absl::StatusOr<BatchSampler> r2 = BatchSampler::Create(data, {.batch_size = 2, .seq_len = 5, .rank = 2, .world_size = 3});
  ASSERT_TRUE(r0.ok() && r2.ok());
  EXPECT_EQ(r0->batches_in_shard(0), 999 / 30);
  ASSERT_TRUE(r0->Next().ok());
  ASSERT_TRUE(r2->Next().ok());
  EXPECT_EQ(r0->Next()->token_offset, 30);
  EXPECT_EQ(r2->Next()->token_offset, 30 + 20);
}

TEST_F(DataTest, ShuffledEpochsAreDeterministicPermutationsAndResumeBitIdentically) {
  for (int i = 0; i < 3; ++i) {
    std::vector<uint16_t> t(1 + 8 * (5 + i));  // shards of 5, 6 and 7 batches (B=2, T=4)
    for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<uint16_t>(1000 * i + k);
    ASSERT_TRUE(WriteTokenShard(Path("shard_" + std::to_string(i) + ".bin"), t).ok());
  }
  absl::StatusOr<TokenDataset> ds =
      TokenDataset::FromShardFiles({Path("shard_0.bin"), Path("shard_1.bin"), Path("shard_2.bin")});
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto data = std::make_shared<const TokenDataset>(*ds);
  const BatchSampler::Options o{.batch_size = 2, .seq_len = 4, .shuffle = true, .seed = 7};
  absl::StatusOr<BatchSampler> a = BatchSampler::Create(data, o);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->batches_per_epoch(), 18);

  // Each epoch visits every (shard, sample) exactly once, in a seed-dependent order.
  std::vector<int64_t> first_epoch;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int i = 0; i < 18; ++i) {
      absl::StatusOr<Batch> b = a->Next();
      ASSERT_TRUE(b.ok());
      EXPECT_EQ(b->position.epoch, epoch);
      seen.insert({b->shard_index, b->token_offset});
      if (epoch == 0) first_epoch.push_back(b->shard_index * 100000 + b->token_offset);
      EXPECT_EQ(Ints(b->inputs)[0], 1000 * b->shard_index + b->token_offset);  // the tokens of that place
    }
    EXPECT_EQ(seen.size(), 18u);
  }
  std::vector<int64_t> sequential;
  for (int s = 0; s < 3; ++s)
    for (int k = 0; k < 5 + s; ++k) sequential.push_back(s * 100000 + 8 * k);
  EXPECT_NE(first_epoch, sequential);  // actually shuffled

  // Same seed: same batches. Another seed: another order.
  absl::StatusOr<BatchSampler> same = BatchSampler::Create(data, o);
  BatchSampler::Options o2 = o;
  o2.seed = 8;
  absl::StatusOr<BatchSampler> other = BatchSampler::Create(data, o2);
  std::vector<int64_t> same_order, other_order;
  for (int i = 0; i < 18; ++i) {
    const Batch b = *same->Next(), c = *other->Next();
    same_order.push_back(b.shard_index * 100000 + b.token_offset);
    other_order.push_back(c.shard_index * 100000 + c.token_offset);
  }
  EXPECT_EQ(same_order, first_epoch);
  EXPECT_NE(other_order, first_epoch);

  // Save the position mid-epoch (via checkpoint metadata), restore into a new
  // sampler: the following batches are bit-identical.
  absl::StatusOr<BatchSampler> run = BatchSampler::Create(data, o);
  for (int i = 0; i < 23; ++i) ASSERT_TRUE(run->Next().ok());
  std::map<std::string, std::string> meta;
  PositionToMetadata(run->position(), &meta);
  EXPECT_EQ(meta.at("data.epoch"), "1");
  absl::StatusOr<BatchSampler> resumed = BatchSampler::Create(data, o);
  absl::StatusOr<DataPosition> pos = PositionFromMetadata(meta);
  ASSERT_TRUE(pos.ok());
  ASSERT_TRUE(resumed->SetPosition(*pos).ok());
  for (int i = 0; i < 20; ++i) {
    const Batch x = *run->Next(), y = *resumed->Next();
    EXPECT_EQ(Ints(x.inputs), Ints(y.inputs));
    EXPECT_EQ(Ints(x.targets), Ints(y.targets));
    EXPECT_EQ(x.position, y.position);
  }
  EXPECT_NE(resumed->SetPosition({.epoch = 0, .shard = 3, .offset = 0}).message().find("outside the dataset"),
            std::string::npos);
}

TEST(BatchSampler, Errors) {
  auto small = Counting(10);
  absl::StatusOr<BatchSampler> s = BatchSampler::Create(small, {.batch_size = 1, .seq_len = 10});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("sequence length T=10 is longer than the data: shard 'memory' has 10 tokens"),
            std::string::npos)
      << s.status();
  s = BatchSampler::Create(small, {.batch_size = 4, .seq_len = 4});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("has 10 tokens, fewer than the 17 one batch needs"), std::string::npos)
      << s.status();
  s = BatchSampler::Create(small, {.batch_size = 0, .seq_len = 4});
  EXPECT_NE(s.status().message().find("bad options B=0"), std::string::npos);
  absl::StatusOr<TokenDataset> bad = TokenDataset::FromTokens({1, 300}, 256, "bytes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token dataset 'bytes': token id 300 at index 1 is >= the vocab size 256"),
            std::string::npos);
  EXPECT_FALSE(TokenDataset::FromTokens({}, 256).ok());
  absl::StatusOr<DataPosition> p = PositionFromMetadata({{"data.epoch", "1"}});
  EXPECT_NE(p.status().message().find("no 'data.shard'"), std::string::npos);
  for (int64_t vocab : {0, 65537}) {
    bad = TokenDataset::FromTokens({1}, vocab);
    ASSERT_FALSE(bad.ok()) << vocab;
    const std::string want = "token dataset: vocab size " + std::to_string(vocab) + " is not in [1, 65536]";
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status();
  }
}

// A data position as a checkpoint's metadata carries it: the round trip, and
// each value that is not a non-negative integer named with its key.
TEST(DataPosition, MetadataRoundTripAndBadValues) {
  std::map<std::string, std::string> meta;
  PositionToMetadata({.epoch = 2, .shard = 1, .offset = 12345}, &meta, "data.");
  absl::StatusOr<DataPosition> p = PositionFromMetadata(meta, "data.");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (DataPosition{.epoch = 2, .shard = 1, .offset = 12345}));
  for (const char* bad : {"-3", "12x", "", "99999999999999999999"}) {
    std::map<std::string, std::string> m = meta;
    m["data.offset"] = bad;
    p = PositionFromMetadata(m, "data.");
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find(std::string("'data.offset' = '") + bad + "' is not a non-negative integer"),
              std::string::npos)
        << p.status();
  }
}

TEST_F(DataTest, ValidationEveryBelowTwoIsAnError) {
  WriteFile(Path("one.txt"), "a fortune\n%\nanother\n");
  const absl::StatusOr<TextCorpus> c = LoadTextCorpus({Path("one.txt")}, {.validation_every = 1});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("text corpus: validation_every must be >= 2, got 1"), std::string::npos)
      << c.status();
}

TEST_F(DataTest, ShardCorruptedAfterOpeningFailsAtNext) {
  ASSERT_TRUE(WriteTokenShard(Path("a.bin"), std::vector<uint16_t>(100, 5)).ok());
  absl::StatusOr<TokenDataset> ds = TokenDataset::FromShardFiles({Path("a.bin")}, 256);
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<BatchSampler> s =
      BatchSampler::Create(std::make_shared<const TokenDataset>(*ds), {.batch_size = 2, .seq_len = 8});
  ASSERT_TRUE(s.ok());
  std::vector<uint16_t> t(100, 5);
  t[50] = 999;
  ASSERT_TRUE(WriteTokenShard(Path("a.bin"), t).ok());  // out of the byte vocabulary
  absl::StatusOr<Batch> b = s->Next();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("token id 999 at index 50 is >= the vocab size 256"), std::string::npos)
      << b.status();
}

TEST(BatchSampler, FortunesEndToEnd) {
  if (!fs::exists(kDefaultCorpusPath)) GTEST_SKIP() << "fortunes not installed";
  absl::StatusOr<TextCorpus> c = LoadTextCorpus({kDefaultCorpusPath});
  ASSERT_TRUE(c.ok());
  absl::StatusOr<TokenDataset> train = TokenDataset::FromTokens(c->train_tokens, ByteTokenizer::kVocabSize, "train");
  ASSERT_TRUE(train.ok());
  absl::StatusOr<BatchSampler> s = BatchSampler::Create(std::make_shared<const TokenDataset>(*train),
                                                        {.batch_size = 4, .seq_len = 64, .shuffle = true});
  ASSERT_TRUE(s.ok());
  absl::StatusOr<Batch> b = s->Next();
  ASSERT_TRUE(b.ok());
  const std::vector<int64_t> in = Ints(b->inputs), tg = Ints(b->targets);
  for (size_t i = 0; i + 1 < in.size(); ++i) EXPECT_EQ(tg[i], in[i + 1]);
  for (int64_t v : in) EXPECT_LT(v, 256);
}

}  // namespace
}  // namespace octet::gpt
