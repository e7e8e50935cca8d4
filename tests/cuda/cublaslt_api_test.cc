// cuBLASLt is loaded on first use (NOTE [lazy cuBLASLt] in
// ops/cuda/cublaslt_api.h), without a GPU: this program does not link
// libcublasLt, so CPU work must leave it unloaded (/proc/self/maps), and the
// first Lt() call loads it. cuBLASLt's version and status-name functions need
// no device. The error paths run on candidate lists the test chooses.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <octet/core/device.h>
#include <octet/ops/matmul.h>
#include <octet/ops/reduce.h>
#include <octet/optim/sgd.h>
#include "tests/test_util.h"

#if OCTET_WITH_CUDA
#include <octet/ops/cuda/cublaslt_api.h>
#endif

namespace octet {
namespace {

#if !OCTET_WITH_CUDA

TEST(CublasLtApi, NotBuilt) { GTEST_SKIP() << "octet was built without the CUDA backend"; }

#else

using ::octet::testing::AllClose;
using ::octet::testing::ErrorOf;

// The lines of /proc/self/maps that map a libcublasLt file.
std::vector<std::string> CublasLtMappings() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> out;
  for (std::string line; std::getline(maps, line);)
    if (line.find("libcublasLt") != std::string::npos) out.push_back(line);
  return out;
}

// Must be the first test of its process to load the real library: ctest runs
// each test in a process of its own, and a plain run of the program runs it
// first (declaration order).
TEST(CublasLtApi, CpuWorkLeavesItUnloadedAndTheFirstCallLoadsIt) {
  ASSERT_TRUE(CublasLtMappings().empty()) << "libcublasLt is mapped at start-up:\n" << CublasLtMappings()[0];

  // CPU work: a device query, a matmul and one SGD step of a tiny model.
  (void)DeviceCount(DeviceType::kCUDA);
  const Tensor x = FromVector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = FromVector(std::vector<double>{1, 0, -1, 2, 0.5, 0.25}, {3, 2}, {.requires_grad = true});
  EXPECT_TRUE(AllClose(Matmul(x, w), {1 + 2 * -1 + 3 * 0.5, 0 + 2 * 2 + 3 * 0.25,  //
                                      4 + 5 * -1 + 6 * 0.5, 0 + 5 * 2 + 6 * 0.25},
                       0, 1e-6));
  optim::SGD opt({{"w", w}}, {.lr = 0.5});
  Sum(Matmul(x, w)).Backward();
  opt.Step();
  // d sum(x w) / d w[k][j] = sum_i x[i][k] = {5, 7, 9} for every column j.
  EXPECT_TRUE(AllClose(w, {1 - 2.5, 0 - 2.5, -1 - 3.5, 2 - 3.5, 0.5 - 4.5, 0.25 - 4.5}, 0, 1e-6));
  EXPECT_TRUE(CublasLtMappings().empty()) << "CPU work loaded libcublasLt:\n" << CublasLtMappings()[0];

  const cuda::CublasLtApi& lt = cuda::Lt();
  EXPECT_FALSE(CublasLtMappings().empty()) << "Lt() returned but no libcublasLt is mapped";
  EXPECT_EQ(&cuda::Lt(), &lt);  // loaded once
  const size_t version = lt.GetVersion();
  EXPECT_EQ(version, lt.version);
  // This program was built against the toolkit whose library it loads here.
  EXPECT_EQ(version / 10000, size_t{CUBLAS_VER_MAJOR});
  EXPECT_EQ(version / 100 % 100, size_t{CUBLAS_VER_MINOR});
  EXPECT_STREQ(lt.GetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(lt.GetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_NE(std::string(lt.GetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)), "");
  // The file the dynamic loader chose, by its full name.
  EXPECT_EQ(lt.path.front(), '/') << lt.path;
  EXPECT_NE(lt.path.find("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)), std::string::npos) << lt.path;
}

TEST(CublasLtApi, CandidatesStartWithTheSonameAndHaveNoDuplicates) {
  const std::vector<std::string> c = cuda::CublasLtCandidates();
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  ASSERT_GE(c.size(), 2u);  // the soname, then at least libcudart's directory
  EXPECT_EQ(c[0], soname);
  for (size_t i = 1; i < c.size(); ++i) {
    EXPECT_EQ(c[i].front(), '/') << c[i];
    EXPECT_EQ(c[i].substr(c[i].size() - soname.size() - 1), "/" + soname);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(c[i], c[j]);
  }
}

// The fallbacks after the soname (libcudart's directory, the toolkit's) name
// a real cuBLASLt: the first that exists loads by its full path, behind a
// candidate that does not, and is the same library Lt() finds.
TEST(CublasLtApi, FullPathCandidatesLoadTheSameLibrary) {
  const std::vector<std::string> c = cuda::CublasLtCandidates();
  std::string full;
  for (size_t i = 1; i < c.size() && full.empty(); ++i)
    if (std::ifstream(c[i]).good()) full = c[i];
  if (full.empty()) GTEST_SKIP() << "no fallback candidate exists on this machine";
  const cuda::CublasLtApi api = cuda::LoadCublasLt({"/nonexistent/dir/libcublasLt.so.13", full});
  EXPECT_EQ(api.version, cuda::Lt().version);
  EXPECT_STREQ(api.GetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_NE(api.path.find("libcublasLt.so."), std::string::npos) << api.path;
}

TEST(CublasLtApi, MissingLibraryNamesEveryCandidateAndDlerror) {
  const std::string msg = ErrorOf([] {
    (void)cuda::LoadCublasLt({"libnot_a_cublaslt_octet.so.13", "/nonexistent/dir/libcublasLt.so.13"});
  });
  EXPECT_NE(msg.find("cannot load cuBLASLt (libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR) + ")"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("CUDA " + std::to_string(CUBLAS_VER_MAJOR) + " toolkit's cuBLASLt"), std::string::npos) << msg;
  // Each candidate with dlopen's own reason.
  EXPECT_NE(msg.find("libnot_a_cublaslt_octet.so.13: libnot_a_cublaslt_octet.so.13: cannot open shared object file"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("/nonexistent/dir/libcublasLt.so.13: /nonexistent/dir/libcublasLt.so.13: cannot open"),
            std::string::npos)
      << msg;
}

TEST(CublasLtApi, LibraryWithoutTheFunctionsNamesTheMissingSymbol) {
  // libc loads fine but has no cublasLtGetVersion (the first one looked up).
  const std::string msg = ErrorOf([] { (void)cuda::LoadCublasLt({"libc.so.6"}); });
  EXPECT_NE(msg.find("cuBLASLt library libc.so.6 has no function cublasLtGetVersion"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undefined symbol: cublasLtGetVersion"), std::string::npos) << msg;
}

TEST(CublasLtApi, EmptyCandidateListIsRejected) {
  EXPECT_NE(ErrorOf([] { (void)cuda::LoadCublasLt({}); }).find("no candidate file names"), std::string::npos);
}

TEST(CublasLtApi, VersionCheckRejectsAnotherMajor) {
  EXPECT_EQ(ErrorOf([] { cuda::CheckCublasLtVersion(130100, 13, "x.so"); }), "");
  EXPECT_EQ(ErrorOf([] { cuda::CheckCublasLtVersion(139999, 13, "x.so"); }), "");
  const std::string msg = ErrorOf([] { cuda::CheckCublasLtVersion(120903, 13, "/opt/old/libcublasLt.so.13"); });
  EXPECT_NE(msg.find("cuBLASLt library /opt/old/libcublasLt.so.13 is version 12.9.3 (cublasLtGetVersion() = 120903)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("against the CUDA 13 toolkit's cuBLASLt"), std::string::npos) << msg;
  EXPECT_NE(ErrorOf([] { cuda::CheckCublasLtVersion(140000, 13, "y.so"); }).find("is version 14.0.0"),
            std::string::npos);
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
