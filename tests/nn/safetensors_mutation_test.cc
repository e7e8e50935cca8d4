// safetensors read back after random damage: thousands of seeded mutations
// (flipped bits, overwritten, inserted and deleted bytes, truncations, a
// changed header length) of an octet-written file and of a foreign one
// without checksums. Each load must either succeed with every tensor whole,
// or fail with an error naming the file; never crash, hang or read outside
// the file (the sanitizer build, scripts/sanitize.sh, checks the last).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <octet/core/scaling.h>
#include <octet/nn/safetensors.h>
#include <octet/nn/safetensors_internal.h>
#include "tests/test_util.h"

namespace octet::nn {
namespace {

namespace fs = std::filesystem;
using ::octet::testing::RandomValues;
using ::octet::testing::ReadFile;
using ::octet::testing::WriteFile;

// Per test; OCTET_MUTATION_TRIALS=100000 for a longer search (~20 s each).
const int kTrials = std::getenv("OCTET_MUTATION_TRIALS") != nullptr ? std::atoi(std::getenv("OCTET_MUTATION_TRIALS"))
                                                                     : 1500;

// One random change of `bytes`; most land in the first `hot` bytes (the
// length and the header), where the parser works.
std::string Mutate(std::string bytes, size_t hot, std::mt19937_64& gen) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(gen() % n); };
  const size_t limit = gen() % 4 == 0 ? bytes.size() : std::min(hot, bytes.size());
  switch (gen() % 7) {
    case 0:  // a flipped bit
      if (!bytes.empty()) bytes[pick(limit)] ^= static_cast<char>(1u << (gen() % 8));
      break;
    case 1: {  // a few bytes overwritten with random or structural ones
      const char structural[] = "{}[],:\"0123456789-eE. ";
      const size_t n = 1 + gen() % 4;
      for (size_t i = 0; i < n && !bytes.empty(); ++i)
        bytes[pick(limit)] = gen() % 2 ? static_cast<char>(gen()) : structural[gen() % (sizeof(structural) - 1)];
      break;
    }
    case 2:  // bytes inserted
      bytes.insert(pick(limit + 1), std::string(1 + gen() % 3, static_cast<char>(gen())));
      break;
    case 3:  // bytes deleted
      if (!bytes.empty()) {
        const size_t at = pick(limit);
        bytes.erase(at, 1 + gen() % 3);
      }
      break;
    case 4:  // truncated
      bytes.resize(pick(bytes.size() + 1));
      break;
    case 5: {  // a digit of the header changed (offsets, shapes, scales)
      std::vector<size_t> digits;
      for (size_t i = 8; i < std::min(hot, bytes.size()); ++i)
        if (bytes[i] >= '0' && bytes[i] <= '9') digits.push_back(i);
      if (!digits.empty()) bytes[digits[pick(digits.size())]] = static_cast<char>('0' + gen() % 10);
      break;
    }
    default: {  // the header length changed
      if (bytes.size() < 8) break;
      uint64_t n;
      std::memcpy(&n, bytes.data(), 8);
      const uint64_t choices[] = {n + 1, n - 1, n + 8, n / 2, n * 2, 0, ~uint64_t{0}, uint64_t{1} << 40,
                                  static_cast<uint64_t>(bytes.size()) - 8};
      n = choices[gen() % (sizeof(choices) / sizeof(choices[0]))];
      std::memcpy(bytes.data(), &n, 8);
      break;
    }
  }
  return bytes;
}

// Loads `bytes` from `path`: a success must give tensors that can be read
// whole (and, with `exact_cover`, whose bytes are the file's data exactly:
// no FP8 scale companions folded into their tensors), a failure an error
// naming the file. Returns whether it loaded.
bool LoadsOrFailsCleanly(const std::string& path, const std::string& bytes, int trial, bool exact_cover,
                         absl::StatusOr<SafetensorsFile>* out = nullptr) {
  WriteFile(path, bytes);
  absl::StatusOr<SafetensorsFile> local;
  absl::StatusOr<SafetensorsFile>& f = out != nullptr ? *out : local;
  f = internal::LoadSafetensors(path);
  if (!f.ok()) {
    EXPECT_NE(std::string(f.status().message()).find(path), std::string::npos)
        << "trial " << trial << ": " << f.status();
    return false;
  }
  size_t total = 0;
  for (const auto& [name, t] : f->tensors) {
    // Every byte copied out (ASan: inside its buffer), as many as the shape says.
    const size_t n = ::octet::testing::Bytes(t).size();
    EXPECT_EQ(n, static_cast<size_t>(t.numel()) * SizeOf(t.dtype())) << "trial " << trial << ": " << name;
    total += n;
  }
  // The tensors cover the data that follows the header exactly (FORMATS.md
  // §1 rule 5: no holes, no overlaps).
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (exact_cover) EXPECT_EQ(total, bytes.size() - 8 - header_len) << "trial " << trial;
  return true;
}

class SafetensorsMutation : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ::octet::testing::FreshTestDir("safetensors_mutation"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(SafetensorsMutation, OctetFilesLoadWholeOrFailNamingTheFile) {
  auto scale = std::make_shared<ScaleMeta>();
  scale->scale_inv = Full({1}, 0.125f);
  scale->scale = Full({1}, 8.0f);
  scale->amax = Full({1}, 30.0f);
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w", FromVector(RandomValues(12, 1), {3, 4})},
      {"b", FromVector(RandomValues(4, 2), {4}, {.dtype = DType::kBFloat16})},
      {"q", FromVector(RandomValues(6, 3, -20, 20), {2, 3}, {.dtype = DType::kFloat8E4M3}).WithScaleMeta(scale)},
      {"ids", FromVector(std::vector<double>{1, 2, 3}, {3}, {.dtype = DType::kInt64})},
      {"none", Zeros({0, 2})}};
  const std::string good_path = Path("good.safetensors");
  ASSERT_TRUE(internal::SaveSafetensors(good_path, tensors, {{"step", "7"}}).ok());
  const std::string good = ReadFile(good_path);
  uint64_t header_len;
  std::memcpy(&header_len, good.data(), 8);

  std::mt19937_64 gen(20261129);
  int loaded = 0;
  const std::string path = Path("mutated.safetensors");
  for (int trial = 0; trial < kTrials; ++trial) {
    std::string bytes = Mutate(good, 8 + header_len, gen);
    if (gen() % 3 == 0) bytes = Mutate(bytes, 8 + header_len, gen);
    if (bytes == good) continue;
    absl::StatusOr<SafetensorsFile> f;
    if (LoadsOrFailsCleanly(path, bytes, trial, /*exact_cover=*/false, &f)) {
      ++loaded;
      // What loads is what was saved: no damage gets past the checksums.
      ASSERT_EQ(f->tensors.size(), tensors.size()) << "trial " << trial;
      for (const auto& [name, t] : tensors) {
        const Tensor* got = f->Find(name);
        ASSERT_NE(got, nullptr) << "trial " << trial << ": " << name;
        EXPECT_EQ(got->dtype(), t.dtype()) << "trial " << trial << ": " << name;
        EXPECT_EQ(got->shape(), t.shape()) << "trial " << trial << ": " << name;
        EXPECT_EQ(::octet::testing::Bytes(*got), ::octet::testing::Bytes(t)) << "trial " << trial << ": " << name;
        ASSERT_EQ(got->scale_meta() != nullptr, t.scale_meta() != nullptr) << "trial " << trial << ": " << name;
        if (t.scale_meta() != nullptr) {
          EXPECT_EQ(got->scale_meta()->scale_inv.Item(), 0.125) << "trial " << trial;
          EXPECT_EQ(got->scale_meta()->amax.Item(), 30.0) << "trial " << trial;
        }
      }
      EXPECT_EQ(f->metadata.at("step"), "7") << "trial " << trial;
    }
    if (::testing::Test::HasFailure()) break;
  }
  // The checksums (NOTE [safetensors checksums]) leave only changes that
  // keep the bytes' meaning (header whitespace) loadable.
  EXPECT_LT(loaded, 150);
}

TEST_F(SafetensorsMutation, ForeignFilesWithoutChecksumsLoadWholeOrFailNamingTheFile) {
  // As another writer would make it: no checksum keys, so every header check
  // is all that stands between a damaged file and a wrong tensor.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
      R"("c":{"dtype":"I64","shape":[1],"data_offsets":[22,30]},)"
      R"("e":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[30,32]}})";
  std::string data(32, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 1);
  uint64_t n = header.size();
  const std::string good = std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
  const std::string path = Path("foreign.safetensors");
  ASSERT_TRUE(LoadsOrFailsCleanly(path, good, -1, /*exact_cover=*/true));

  std::mt19937_64 gen(7);
  int loaded = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::string bytes = Mutate(good, 8 + header.size(), gen);
    if (gen() % 3 == 0) bytes = Mutate(bytes, 8 + header.size(), gen);
    loaded += LoadsOrFailsCleanly(path, bytes, trial, /*exact_cover=*/true);
    if (::testing::Test::HasFailure()) break;
  }
  // Data-only changes load (nothing can tell them apart); the rest must not
  // all be refused, nor all taken.
  EXPECT_GT(loaded, 0);
  EXPECT_LT(loaded, kTrials);
}

}  // namespace
}  // namespace octet::nn
