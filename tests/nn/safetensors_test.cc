// safetensors: round trip of every dtype (FP8 with scales), a hand-made file
// checked byte for byte, every corrupt-file rule of FORMATS.md §1, atomic
// writes, checksums (NOTE [safetensors checksums]), FIFOs and unreadable files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <octet/core/crc32c.h>
#include <octet/core/scaling.h>
#include <octet/nn/file_util_internal.h>
#include <octet/nn/safetensors.h>
#include <octet/nn/safetensors_internal.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

namespace fs = std::filesystem;
using ::octet::testing::ReadFile;
using ::octet::testing::WriteFile;
using ::octet::testing::ErrorOf;
using ::octet::testing::RandomValues;
// The detailed checks call the absl::Status forms (internal::,
// nn/safetensors_internal.h), which also carry the status code;
// PublicApiThrowsWhatTheStatusSays covers the public, throwing functions.

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ::octet::testing::FreshTestDir("safetensors_test"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};



std::string U64(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

// A file from a header text and data bytes; header_len overrides N.
std::string RawFile(const std::string& header, const std::string& data, int64_t header_len = -1) {
  return U64(header_len < 0 ? header.size() : static_cast<uint64_t>(header_len)) + header + data;
}

std::string TensorBytes(const Tensor& t) {
  const Tensor c = t.Contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

std::shared_ptr<const ScaleMeta> Scale(float scale_inv, float amax) {
  auto m = std::make_shared<ScaleMeta>();
  m->scale_inv = Full({1}, scale_inv);
  m->scale = Full({1}, 1.0f / scale_inv);
  m->amax = Full({1}, amax);
  return m;
}

TEST_F(SafetensorsTest, RoundTripEveryDtype) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  const DType all[] = {DType::kFloat64, DType::kFloat32,    DType::kFloat16,    DType::kBFloat16, DType::kFloat8E4M3,
                       DType::kFloat8E5M2, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBool};
  for (DType d : all) {
    const std::vector<double> v = RandomValues(12, static_cast<uint64_t>(d), IsFloat(d) ? -3 : 0, IsFloat(d) ? 3 : 2);
    std::vector<double> r = v;
    if (!IsFloat(d)) for (double& x : r) x = std::floor(x);
    Tensor t = FromVector(r, {3, 4}, {.dtype = d});
    tensors.emplace_back(std::string("t_") + Info(d).safetensors_name, t);
  }
  // FP8 with scales (the real value is code * scale_inv); one FP8 tensor without.
  tensors[4].second = tensors[4].second.WithScaleMeta(Scale(0.0078125f, 2.75f));
  tensors[5].second = tensors[5].second.WithScaleMeta(Scale(3.0f / 7.0f, 100.5f));
  tensors.emplace_back("fp8_unscaled", FromVector(std::vector<double>{1, 2}, {2}, {.dtype = DType::kFloat8E4M3}));
  tensors.emplace_back("empty", Zeros({0, 3}));
  tensors.emplace_back("scalar", Scalar(2.5, {.dtype = DType::kFloat64}));
  tensors.emplace_back("transposed", FromVector(RandomValues(6, 9), {2, 3}).T());  // non-contiguous
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode ✓"}};
  const std::string path = Path("all.safetensors");
  ASSERT_TRUE(internal::SaveSafetensors(path, tensors, meta).ok());

  absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metadata, meta);
  ASSERT_EQ(f->tensors.size(), tensors.size());  // companions are folded back into ScaleMeta
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(f->tensors[i].first, name);  // saved order is kept
    const Tensor& u = f->tensors[i].second;
    EXPECT_EQ(u.dtype(), t.dtype());
    EXPECT_EQ(u.shape(), t.shape());
    EXPECT_EQ(TensorBytes(u), TensorBytes(t));
    if (t.scale_meta() != nullptr) {
      ASSERT_NE(u.scale_meta(), nullptr);
      EXPECT_EQ(ScaleInvValue(u), ScaleInvValue(t));  // bit-exact
      EXPECT_EQ(u.scale_meta()->amax.Item(), t.scale_meta()->amax.Item());
      EXPECT_EQ(ScaleValue(u), 1.0f / ScaleInvValue(t));
      EXPECT_EQ(u.ToDoubles(), t.ToDoubles());  // dequantized values agree
    } else if (IsFp8(t.dtype())) {
      EXPECT_EQ(u.scale_meta(), nullptr);
    }
  }
  EXPECT_NE(f->Find("t_BF16"), nullptr);
  EXPECT_EQ(f->Find("t_F8_E4M3.scale_inv"), nullptr);
}

TEST_F(SafetensorsTest, HandMadeFileByteForByte) {
  const std::string path = Path("hand.safetensors");
  Tensor a = FromVector(std::vector<float>{1.0f, -2.0f}, {2});
  Tensor b = FromVector(std::vector<int32_t>{7, 8, 9}, {3}).To(DType::kUInt8);
  uint32_t digest = 0;
  ASSERT_TRUE(internal::SaveSafetensors(path, {{"a", a}, {"b", b}}, {{"format", "pt"}}, &digest).ok());

  const float fa[2] = {1.0f, -2.0f};
  const std::string data_a(reinterpret_cast<const char*>(fa), 8), data_b("\x07\x08\x09", 3);
  // NOTE [safetensors checksums], computed here from the definition.
  const std::string crc_a = Crc32cHex(Crc32c("F32[2]" + data_a));
  const std::string crc_b = Crc32cHex(Crc32c("U8[3]" + data_b));
  const std::string crc_meta = Crc32cHex(Crc32c(std::string("format\0pt\0", 10)));
  const std::string json = R"({"__metadata__":{"format":"pt","octet.crc32c.__metadata__":")" + crc_meta +
                           R"(","octet.crc32c.a":")" + crc_a + R"(","octet.crc32c.b":")" + crc_b + R"("},)" +
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::string header = json;
  while (header.size() % 8 != 0) header += ' ';  // pad with spaces to 8 bytes
  const std::string expected = U64(header.size()) + header + data_a + data_b;
  const std::string actual = ReadFile(path);
  EXPECT_EQ(actual.size(), 8 + header.size() + 11);
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_EQ(actual[8], '{');
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(digest, Crc32c("octet.crc32c.__metadata__=" + crc_meta + "\noctet.crc32c.a=" + crc_a +
                           "\noctet.crc32c.b=" + crc_b + "\n"));
  absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->checksummed);
  EXPECT_EQ(f->digest, digest);
  EXPECT_EQ(f->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));  // checksum keys hidden
}

// The byte offset of tensor `name`'s data in a file SaveSafetensors wrote.
size_t DataOffset(const std::string& bytes, const std::string& name) {
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  const std::string header = bytes.substr(8, n);
  const size_t at = header.find("\"" + name + "\":{\"dtype\"");
  const size_t offsets = header.find("\"data_offsets\":[", at) + 16;
  return 8 + n + std::stoull(header.substr(offsets));
}

TEST_F(SafetensorsTest, ChecksumsCatchFlippedBytesZeroedDataAndEditedMetadata) {
  const std::string path = Path("w.safetensors");
  Tensor fp8 = FromVector(std::vector<double>{1, -2, 3, 4}, {4}, {.dtype = DType::kFloat8E4M3})
                   .WithScaleMeta(Scale(0.5f, 2.0f));
  ASSERT_TRUE(internal::SaveSafetensors(path, {{"a", Full({64}, 0.25)}, {"w", FromVector(RandomValues(32, 3), {4, 8})},
                                     {"q", fp8}},
                              {{"step", "100"}})
                  .ok());
  const std::string good = ReadFile(path);
  auto expect_error = [&](const std::string& bytes, const std::string& problem) {
    WriteFile(path, bytes);
    absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
    ASSERT_FALSE(f.ok()) << problem;
    const std::string msg(f.status().message());
    EXPECT_TRUE(absl::IsDataLoss(f.status())) << msg;
    EXPECT_NE(msg.find("safetensors file '" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(problem), std::string::npos) << msg;
  };
  for (int bit = 0; bit < 8; ++bit) {  // any single bit of a data byte
    std::string b = good;
    b[DataOffset(good, "w") + 37] ^= static_cast<char>(1 << bit);
    expect_error(b, "checksum mismatch in tensor 'w'");
  }
  std::string zeroed = good;  // all-zero weights
  std::fill(zeroed.begin() + DataOffset(good, "w"), zeroed.begin() + DataOffset(good, "w") + 128, '\0');
  expect_error(zeroed, "checksum mismatch in tensor 'w'");
  std::string scale = good;  // the FP8 companion's bytes: scale_inv 0.5 -> 0
  std::fill(scale.begin() + DataOffset(good, "q.scale_inv"), scale.begin() + DataOffset(good, "q.scale_inv") + 4, '\0');
  expect_error(scale, "checksum mismatch in tensor 'q.scale_inv'");
  std::string last = good;  // the very last byte of the file
  last.back() ^= 1;
  expect_error(last, "checksum mismatch in tensor 'q.amax'");
  std::string meta = good;  // a metadata value of the same length
  meta.replace(meta.find("\"step\":\"100\""), 12, "\"step\":\"900\"");
  expect_error(meta, "checksum mismatch in the metadata");
  std::string dtype = good;  // a same-size dtype: F8_E4M3 -> F8_E5M2
  dtype.replace(dtype.find("F8_E4M3"), 7, "F8_E5M2");
  expect_error(dtype, "checksum mismatch in tensor 'q'");
  std::string renamed = good;  // a checksum key naming no tensor
  renamed.replace(renamed.find("\"octet.crc32c.a\""), 16, "\"octet.crc32c.z\"");
  expect_error(renamed, "tensor 'a' has no checksum");

  WriteFile(path, good);
  absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->checksummed);
  EXPECT_EQ(f->metadata, (std::map<std::string, std::string>{{"step", "100"}}));
  // Reserved keys are refused on save.
  const absl::Status st = internal::SaveSafetensors(Path("x.safetensors"), {{"a", Zeros({1})}}, {{"octet.crc32c.a", "0"}});
  EXPECT_NE(st.message().find("metadata key 'octet.crc32c.a' is reserved"), std::string::npos) << st;
}

TEST_F(SafetensorsTest, RejectsFp8ScalesThatCannotBeRight) {
  const std::string path = Path("s.safetensors");
  Tensor codes = FromVector(std::vector<double>{1, 2}, {2}, {.dtype = DType::kFloat8E4M3});
  struct Case {
    float scale_inv, amax;
    const char* problem;
  };
  for (const Case& c : {Case{0.0f, 1.0f, "q.scale_inv = 0; a scale must be finite and > 0"},
                        Case{-1.0f, 1.0f, "q.scale_inv = -1; a scale must be finite"},
                        Case{std::numeric_limits<float>::infinity(), 1.0f, "q.scale_inv = inf"},
                        Case{1.0f, -3.0f, "q.amax = -3; an amax must be finite and >= 0"},
                        Case{1.0f, std::numeric_limits<float>::quiet_NaN(), "q.amax = nan"}}) {
    // Correct checksums: the values themselves are refused.
    ASSERT_TRUE(internal::SaveSafetensors(path, {{"q", codes.WithScaleMeta(Scale(c.scale_inv, c.amax))}}).ok());
    absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
    ASSERT_FALSE(f.ok()) << c.problem;
    EXPECT_NE(f.status().message().find(c.problem), std::string::npos) << f.status();
  }
}

// Opening a FIFO for reading blocks until a writer comes; the loader must
// refuse it instead. Should it block (a regression), the guard opens the FIFO
// for writing, which releases the reader, and the test fails instead of hanging.
template <typename Fn>
auto WithFifoGuard(const std::string& fifo, Fn fn) {
  auto result = std::async(std::launch::async, fn);
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "loading '" << fifo << "' blocked";
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

TEST_F(SafetensorsTest, FifoAndUnreadableFilesAreErrorsNotHangs) {
  const std::string fifo = Path("fifo.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  absl::StatusOr<SafetensorsFile> f = WithFifoGuard(fifo, [&] { return internal::LoadSafetensors(fifo); });
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("safetensors file '" + fifo + "': not a regular file (it is a FIFO)"),
            std::string::npos)
      << f.status();
  // A read that fails (EACCES; root ignores chmod, so the failure is injected).
  const std::string path = Path("ok.safetensors");
  ASSERT_TRUE(internal::SaveSafetensors(path, {{"a", Zeros({2})}}).ok());
  SetFileFaultHookForTesting([&](std::string_view op, const std::string& p) { return op == "open" && p == path ? EACCES : 0; });
  f = internal::LoadSafetensors(path);
  SetFileFaultHookForTesting(nullptr);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(f.status())) << f.status();
  EXPECT_NE(f.status().message().find("safetensors file '" + path + "': cannot open: Permission denied"),
            std::string::npos)
      << f.status();
  // A read that fails with an I/O error (a bad disk): an error, not a SIGBUS.
  SetFileFaultHookForTesting([&](std::string_view op, const std::string& p) { return op == "read" && p == path ? EIO : 0; });
  f = internal::LoadSafetensors(path);
  SetFileFaultHookForTesting(nullptr);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("safetensors file '" + path + "': cannot read: Input/output error"),
            std::string::npos)
      << f.status();
  EXPECT_TRUE(internal::LoadSafetensors(path).ok());
}

TEST_F(SafetensorsTest, ReadsFilesOfOtherWriters) {
  // Leading/trailing whitespace, keys in another order, data order different
  // from the header order, an empty tensor sharing an offset, an empty header.
  const std::string path = Path("other.safetensors");
  const std::string header =
      R"(  {"z":{"data_offsets":[4,8],"shape":[2],"dtype":"BF16"},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
      R"("y":{"shape":[],"dtype":"I32","data_offsets":[0,4]}}   )";
  const int32_t y = -5;
  const uint16_t z[2] = {0x3F80, 0xC000};  // bf16 1.0, -2.0
  WriteFile(path, RawFile(header, std::string(reinterpret_cast<const char*>(&y), 4) +
                                       std::string(reinterpret_cast<const char*>(z), 4)));
  absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 3u);
  EXPECT_EQ(f->tensors[0].first, "y");  // data order
  EXPECT_EQ(f->Find("y")->Item(), -5);
  EXPECT_EQ(f->Find("z")->ToDoubles(), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(f->Find("e")->numel(), 0);

  WriteFile(path, RawFile("{}      ", ""));
  f = internal::LoadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->tensors.empty());
}

struct CorruptCase {
  const char* name;
  std::string bytes;
  const char* problem;
};

TEST_F(SafetensorsTest, EveryCorruptFileGivesAnErrorNamingFileAndProblem) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  const std::string good_header = R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  std::vector<CorruptCase> cases = {
      {"too_small", std::string("\x01\x00\x00", 3), "header too small"},
      {"too_large", RawFile("{}", "", 200'000'000), "header too large"},
      {"header_past_eof", RawFile("{}", "", 64), "invalid header length"},
      {"truncated", RawFile(good_header, std::string(7, '\0')), "truncated"},
      {"trailing", RawFile(good_header, std::string(9, '\0')), "trailing bytes"},
      {"bad_json", RawFile("{\"a\": [1, 2", ""), "not valid JSON"},
      {"bad_utf8", RawFile("{\"\xff\":1}", ""), "not valid UTF-8"},
      {"not_object", RawFile("[1,2]", ""), "bad schema: the header is a JSON array"},
      {"missing_dtype", RawFile(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight), "has no 'dtype'"},
      {"extra_key", RawFile(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8],"x":1}})", eight), "unexpected key 'x'"},
      {"negative_dim", RawFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "must hold non-negative integers"},
      {"bad_offsets", RawFile(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0]}})", eight), "must be [begin, end]"},
      {"metadata_not_strings", RawFile(R"({"__metadata__":{"k":1}})", ""), "__metadata__ value of 'k'"},
      {"duplicate_key",
       RawFile(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", eight),
       "duplicate key 'a'"},
      {"duplicate_nested_key", RawFile(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight),
       "duplicate key 'dtype' (nested"},
      {"hole",
       RawFile(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[12,20]}})",
               std::string(20, '\0')),
       "a hole of 4 bytes before tensor 'b'"},
      {"overlap",
       RawFile(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[4,12]}})",
               std::string(12, '\0')),
       "tensor 'b' (begins at 4) overlaps tensor 'a' (ends at 8)"},
      {"end_before_begin", RawFile(R"({"a":{)" + f32x2 + R"(,"data_offsets":[8,0]}})", eight), "end before begin"},
      {"wrong_byte_size", RawFile(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,4]}})", std::string(4, '\0')),
       "wrong byte size: tensor 'a' (F32 [2]) needs 8 bytes"},
      {"overflow", RawFile(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "byte size overflows"},
      {"unknown_dtype", RawFile(R"({"a":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", eight),
       "unknown dtype 'F7'"},
      {"unsupported_dtype", RawFile(R"({"a":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", eight),
       "dtype I8, which octet does not support"},
      {"bad_companion",
       RawFile(R"({"w":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]},)"
               R"("w.scale_inv":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
               std::string(16, '\0')),
       "scale companion 'w.scale_inv' of FP8 tensor 'w'"},
  };
  for (const CorruptCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Path(std::string(c.name) + ".safetensors");
    WriteFile(path, c.bytes);
    absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
    ASSERT_FALSE(f.ok());
    const std::string msg(f.status().message());
    EXPECT_NE(msg.find("safetensors file '" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.problem), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, PublicApiThrowsWhatTheStatusSays) {
  const std::string path = Path("public.safetensors");
  uint32_t digest = 0;
  nn::SaveSafetensors(path, {{"a", Full({3}, 1.5)}}, {{"k", "v"}}, &digest);
  const SafetensorsFile f = nn::LoadSafetensors(path);
  EXPECT_EQ(f.digest, digest);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"k", "v"}}));
  ASSERT_NE(f.Find("a"), nullptr);
  EXPECT_EQ(f.Find("a")->ToDoubles(), (std::vector<double>{1.5, 1.5, 1.5}));
  const std::string missing = Path("missing.safetensors");
  EXPECT_EQ(ErrorOf([&] { nn::LoadSafetensors(missing); }), std::string(internal::LoadSafetensors(missing).status().message()));
  EXPECT_THROW(nn::LoadSafetensors(missing), Error);
  const std::string bad = ErrorOf([&] { nn::SaveSafetensors(path, {{"", Zeros({1})}}); });
  EXPECT_NE(bad.find("empty name"), std::string::npos) << bad;
}

TEST_F(SafetensorsTest, MissingFile) {
  const std::string path = Path("nope.safetensors");
  absl::StatusOr<SafetensorsFile> f = internal::LoadSafetensors(path);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(absl::IsNotFound(f.status())) << f.status();
  EXPECT_NE(f.status().message().find("safetensors file '" + path + "': cannot open"), std::string::npos);
  EXPECT_NE(f.status().message().find("No such file"), std::string::npos);
}

TEST_F(SafetensorsTest, SaveRejectsBadNames) {
  const std::string path = Path("bad.safetensors");
  Tensor t = Zeros({1});
  auto msg = [&](const std::vector<std::pair<std::string, Tensor>>& ts) {
    return std::string(internal::SaveSafetensors(path, ts).message());
  };
  EXPECT_NE(msg({{"__metadata__", t}}).find("may not be named '__metadata__'"), std::string::npos);
  EXPECT_NE(msg({{"", t}}).find("empty name"), std::string::npos);
  EXPECT_NE(msg({{"x", t}, {"x", t}}).find("the name 'x' is used twice"), std::string::npos);
  Tensor fp8 = Zeros({2}, {.dtype = DType::kFloat8E4M3}).WithScaleMeta(Scale(1.0f, 0.0f));
  EXPECT_NE(msg({{"w", fp8}, {"w.scale_inv", t}}).find("collides with an FP8 scale companion"), std::string::npos);
  EXPECT_NE(msg({{"u", Tensor()}}).find("tensor 'u' is undefined"), std::string::npos);
  // An FP8 tensor without ScaleMeta beside a tensor named like its companion
  // (either order): a load would read that tensor as the FP8 tensor's scale.
  const Tensor q = Ones({2}, {.dtype = DType::kFloat8E4M3});
  ASSERT_EQ(q.scale_meta(), nullptr);
  EXPECT_NE(msg({{"q", q}, {"q.scale_inv", Full({1}, 2.0f)}})
                .find("the name 'q.scale_inv' collides with the FP8 scale companion of the FP8 tensor 'q'"),
            std::string::npos);
  EXPECT_NE(msg({{"q.amax", t}, {"q", q}}).find("the name 'q.amax' collides with the FP8 scale companion"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(internal::SaveSafetensors(path, {{"q", q}, {"p.scale_inv", t}}).ok());  // not q's companion
  const std::string empty = std::string(internal::SaveSafetensors("", {{"x", t}}).message());
  EXPECT_EQ(empty, "safetensors file '': the path is empty");
}

TEST_F(SafetensorsTest, FailedWriteLeavesTheOldFileIntact) {
  const std::string path = Path("model.safetensors");
  ASSERT_TRUE(internal::SaveSafetensors(path, {{"a", Full({4}, 1.0)}}).ok());
  const std::string before = ReadFile(path);
  // The temp file "<path>.tmp.<pid>" cannot be created: a directory is in the way.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  fs::create_directories(tmp);
  const absl::Status st = internal::SaveSafetensors(path, {{"a", Full({4}, 2.0)}, {"b", Full({100}, 3.0)}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot create temporary file '" + tmp + "'"), std::string::npos) << st;
  EXPECT_EQ(ReadFile(path), before);
  fs::remove_all(tmp);
  // A directory that does not exist.
  const absl::Status st2 = internal::SaveSafetensors(Path("no/such/dir/x.safetensors"), {{"a", Full({1}, 1.0)}});
  EXPECT_FALSE(st2.ok());
  // Success replaces the file and leaves no temp file behind.
  ASSERT_TRUE(internal::SaveSafetensors(path, {{"a", Full({4}, 2.0)}}).ok());
  EXPECT_NE(ReadFile(path), before);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace octet::nn
