// safetensors: round trip of every dtype (FP8 with scales), a hand-made file
// checked byte for byte, every corrupt-file rule of FORMATS.md §1, atomic
// writes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/scaling.h"
#include "nn/safetensors.h"
#include "tests/test_util.h"

namespace octet::nn {
namespace {

namespace fs = std::filesystem;
using ::octet::testing::RandomValues;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("octet_safetensors_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

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
  ASSERT_TRUE(SaveSafetensors(path, tensors, meta).ok());

  absl::StatusOr<SafetensorsFile> f = LoadSafetensors(path);
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
  ASSERT_TRUE(SaveSafetensors(path, {{"a", a}, {"b", b}}, {{"format", "pt"}}).ok());

  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::string header = json;
  while (header.size() % 8 != 0) header += ' ';  // pad with spaces to 8 bytes
  const float fa[2] = {1.0f, -2.0f};
  const std::string data = std::string(reinterpret_cast<const char*>(fa), 8) + std::string("\x07\x08\x09", 3);
  const std::string expected = U64(header.size()) + header + data;
  const std::string actual = ReadBytes(path);
  EXPECT_EQ(actual.size(), 8 + header.size() + 11);
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_EQ(actual[8], '{');
  EXPECT_EQ(actual, expected);
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
  WriteBytes(path, RawFile(header, std::string(reinterpret_cast<const char*>(&y), 4) +
                                       std::string(reinterpret_cast<const char*>(z), 4)));
  absl::StatusOr<SafetensorsFile> f = LoadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 3u);
  EXPECT_EQ(f->tensors[0].first, "y");  // data order
  EXPECT_EQ(f->Find("y")->Item(), -5);
  EXPECT_EQ(f->Find("z")->ToDoubles(), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(f->Find("e")->numel(), 0);

  WriteBytes(path, RawFile("{}      ", ""));
  f = LoadSafetensors(path);
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
    WriteBytes(path, c.bytes);
    absl::StatusOr<SafetensorsFile> f = LoadSafetensors(path);
    ASSERT_FALSE(f.ok());
    const std::string msg(f.status().message());
    EXPECT_NE(msg.find("safetensors file '" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.problem), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, MissingFile) {
  const std::string path = Path("nope.safetensors");
  absl::StatusOr<SafetensorsFile> f = LoadSafetensors(path);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(absl::IsNotFound(f.status())) << f.status();
  EXPECT_NE(f.status().message().find("safetensors file '" + path + "': cannot open"), std::string::npos);
  EXPECT_NE(f.status().message().find("No such file"), std::string::npos);
}

TEST_F(SafetensorsTest, SaveRejectsBadNames) {
  const std::string path = Path("bad.safetensors");
  Tensor t = Zeros({1});
  auto msg = [&](const std::vector<std::pair<std::string, Tensor>>& ts) {
    return std::string(SaveSafetensors(path, ts).message());
  };
  EXPECT_NE(msg({{"__metadata__", t}}).find("may not be named '__metadata__'"), std::string::npos);
  EXPECT_NE(msg({{"", t}}).find("empty name"), std::string::npos);
  EXPECT_NE(msg({{"x", t}, {"x", t}}).find("the name 'x' is used twice"), std::string::npos);
  Tensor fp8 = Zeros({2}, {.dtype = DType::kFloat8E4M3}).WithScaleMeta(Scale(1.0f, 0.0f));
  EXPECT_NE(msg({{"w", fp8}, {"w.scale_inv", t}}).find("collides with an FP8 scale companion"), std::string::npos);
  EXPECT_NE(msg({{"u", Tensor()}}).find("tensor 'u' is undefined"), std::string::npos);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(SafetensorsTest, FailedWriteLeavesTheOldFileIntact) {
  const std::string path = Path("model.safetensors");
  ASSERT_TRUE(SaveSafetensors(path, {{"a", Full({4}, 1.0)}}).ok());
  const std::string before = ReadBytes(path);
  // The temp file "<path>.tmp.<pid>" cannot be created: a directory is in the way.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  fs::create_directories(tmp);
  const absl::Status st = SaveSafetensors(path, {{"a", Full({4}, 2.0)}, {"b", Full({100}, 3.0)}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot create temporary file '" + tmp + "'"), std::string::npos) << st;
  EXPECT_EQ(ReadBytes(path), before);
  fs::remove_all(tmp);
  // A directory that does not exist.
  const absl::Status st2 = SaveSafetensors(Path("no/such/dir/x.safetensors"), {{"a", Full({1}, 1.0)}});
  EXPECT_FALSE(st2.ok());
  // Success replaces the file and leaves no temp file behind.
  ASSERT_TRUE(SaveSafetensors(path, {{"a", Full({4}, 2.0)}}).ok());
  EXPECT_NE(ReadBytes(path), before);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace octet::nn
