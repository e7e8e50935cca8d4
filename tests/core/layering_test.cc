// The layers point one way (README "Layout", issue 13); each includes only
// the layers below it:
//   core <- autograd <- ops (front ends, kernel tables) <- backends (ops/cpu,
//   ops/cuda)          and nn, optim, distributed above ops
// (NOTE [autograd below ops] in octet/autograd/grad_sum_internal.h).
// This test reads every source file under octet/ and fails, naming the file
// and the line, when
//   - a file in core/ includes an octet header outside core/;
//   - a file in autograd/ includes anything outside core/ and autograd/;
//   - an ops front end (ops/, not ops/cpu or ops/cuda) includes nn/, optim/
//     or distributed/;
//   - a backend file (ops/cpu, ops/cuda) includes nn/, optim/, distributed/
//     or autograd/;
//   - a file outside the backends (ops/cpu, ops/cuda, distributed/cuda)
//     includes a backend header (ops/cpu, ops/cuda);
//   - a file outside the backends calls is_cpu() / is_cuda() (a backend
//     difference is a kernel-table entry), except the argument checks and
//     data movement of ALLOWED_DEVICE_TESTS.
// The rules run on the text of the files (OCTET_SOURCE_DIR): no build of
// the scanned code is needed, and a new violation fails here before review.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace octet {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// ---- the explicit exceptions ---------------------------------------------------

struct AllowedDeviceTest {
  const char* file;
  // A line calling is_cpu()/is_cuda() is allowed when it contains this text
  // (empty: every line of the file).
  const char* line_contains;
  const char* why;
};

constexpr AllowedDeviceTest kAllowedDeviceTests[] = {
    // core's device layer defines the predicates, names devices and routes
    // device control to the registered backend.
    {"octet/core/device.h", "", "defines is_cpu() / is_cuda()"},
    {"octet/core/device.cc", "", "the device layer: names devices, routes device control to the backend"},
    {"octet/core/allocator.cc", "const DeviceType t = dst_device.is_cpu()",
     "data movement: picks the backend whose copy routine moves the bytes"},
    // Element access for tests and printing reads device memory on the host.
    {"octet/core/tensor.cc", "return To(kCPU).At(idx)", "data movement: At() copies a device tensor to the host"},
    {"octet/core/tensor.cc", "return To(kCPU).ToDoubles()", "data movement: ToDoubles() copies to the host"},
    {"octet/core/tensor.cc", "s.append(\" \").append(ToString(t.device()))", "Describe() names a non-CPU device"},
    {"octet/autograd/engine.cc", "if (!m.device.is_cpu()) target.append(\" \").append(ToString(m.device));",
     "a hook's error names a non-CPU device, as Describe() does"},
    {"octet/core/tensor.cc", "return *t.data<float>()",
     "data movement: a CPU scale is a plain load, a device one a counted host read"},
    {"octet/core/tensor.cc", "!src.device().is_cpu()) return;",
     "argument check: CheckIntegerConvertible reads CPU tensors (NOTE [float to integer])"},
    {"octet/ops/shape.cc", "internal::CountHostRead()", "NOTE [host reads]: a copy to the CPU is counted"},
    {"octet/ops/registry.h", "this build has no CUDA backend", "an error message names what is missing"},
    // The checkpoint writer serialises host bytes.
    {"octet/nn/safetensors.cc", "c = c.To(kCPU)", "data movement: safetensors writes host bytes"},
    // Argument checks: these run on CPU tensors only.
    {"octet/autograd/gradcheck.cc", "OCTET_CHECK(x.device().is_cpu()", "argument check: gradcheck runs on the CPU"},
    {"octet/distributed/amax_sync.cc", "OCTET_CHECK(", "argument check: the Gloo group moves CPU tensors"},
    {"octet/distributed/process_group.cc", "OCTET_CHECK(", "argument check: the Gloo group moves CPU tensors"},
    {"octet/distributed/zero.cc", "OCTET_CHECK(", "argument check: the Gloo group moves CPU tensors"},
    {"octet/distributed/ddp.cc", "OCTET_CHECK(", "argument check: the Gloo group moves CPU tensors"},
};

// ---- the rules -------------------------------------------------------------------

enum class Layer { kCore, kOps, kBackend, kAutograd, kNn, kOptim, kDistributed, kOther };

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

Layer LayerOf(std::string_view path) {
  if (StartsWith(path, "octet/ops/cpu/") || StartsWith(path, "octet/ops/cuda/")) return Layer::kBackend;
  if (StartsWith(path, "octet/core/")) return Layer::kCore;
  if (StartsWith(path, "octet/ops/")) return Layer::kOps;
  if (StartsWith(path, "octet/autograd/")) return Layer::kAutograd;
  if (StartsWith(path, "octet/nn/")) return Layer::kNn;
  if (StartsWith(path, "octet/optim/")) return Layer::kOptim;
  if (StartsWith(path, "octet/distributed/")) return Layer::kDistributed;
  return Layer::kOther;  // octet/octet.h, the umbrella
}

// The CPU and CUDA kernels, and the NCCL process group (a CUDA backend of distributed/).
bool InBackendDir(std::string_view path) {
  return StartsWith(path, "octet/ops/cpu/") || StartsWith(path, "octet/ops/cuda/") ||
         StartsWith(path, "octet/distributed/cuda/");
}

bool IsAbove(Layer included, std::initializer_list<Layer> forbidden) {
  return std::find(forbidden.begin(), forbidden.end(), included) != forbidden.end();
}

bool DeviceTestAllowed(std::string_view file, std::string_view line) {
  for (const AllowedDeviceTest& a : kAllowedDeviceTests) {
    if (file == a.file && line.find(a.line_contains) != std::string_view::npos) return true;
  }
  return false;
}

// The code of one line: the line without its comments (string literals
// kept, so a "//" inside one is not a comment). *in_block carries a /* */
// comment from one line to the next.
std::string CodeOf(const std::string& line, bool* in_block) {
  std::string code;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (*in_block) {
      if (line.compare(i, 2, "*/") == 0) {
        *in_block = false;
        ++i;
      }
      continue;
    }
    const char c = line[i];
    if (in_string) {
      code += c;
      if (c == '\\' && i + 1 < line.size()) {
        code += line[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '\'' && i + 2 < line.size() && line[i + 2] == '\'') {  // a char literal such as '"'
      code += line.substr(i, 3);
      i += 2;
      continue;
    }
    if (c == '"') in_string = true;
    if (line.compare(i, 2, "//") == 0) break;
    if (line.compare(i, 2, "/*") == 0) {
      *in_block = true;
      ++i;
      continue;
    }
    code += c;
  }
  return code;
}

// code with the contents of its string literals blanked (a message that
// names is_cpu() is not a call).
std::string WithoutStrings(const std::string& code) {
  std::string out = code;
  bool in_string = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!in_string && out[i] == '\'' && i + 2 < out.size() && out[i + 2] == '\'') {
      i += 2;  // a char literal such as '"'
    } else if (in_string && out[i] == '\\' && i + 1 < out.size()) {
      out[i] = out[i + 1] = ' ';
      ++i;
    } else if (out[i] == '"') {
      in_string = !in_string;
    } else if (in_string) {
      out[i] = ' ';
    }
  }
  return out;
}

// One message per violation in `text`, the file at `path` (relative to the
// source root, '/'-separated): "path:line: what (the line)".
std::vector<std::string> Violations(const std::string& path, const std::string& text) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*[<"](octet/[^>"]+)[>"])");
  static const std::regex kDeviceTest(R"(\bis_(cpu|cuda)\s*\(\s*\))");
  const Layer layer = LayerOf(path);
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  bool in_block_comment = false;
  for (int number = 1; std::getline(in, line); ++number) {
    auto report = [&](const std::string& what) {
      out.push_back(path + ":" + std::to_string(number) + ": " + what + " (" + line + ")");
    };
    const std::string code = CodeOf(line, &in_block_comment);
    std::smatch m;
    if (std::regex_search(code, m, kInclude)) {
      const std::string inc = m[1];
      const Layer to = LayerOf(inc);
      if (to == Layer::kBackend && !InBackendDir(path)) {
        report("includes the backend header " + inc + " (above the backends, go through the kernel table)");
        continue;
      }
      switch (layer) {
        case Layer::kCore:
          if (to != Layer::kCore) report("core/ includes " + inc + ", outside core/");
          break;
        case Layer::kOps:
          if (IsAbove(to, {Layer::kNn, Layer::kOptim, Layer::kDistributed}))
            report("ops/ includes " + inc + " (ops know no nn, optim or distributed)");
          break;
        case Layer::kBackend:
          if (IsAbove(to, {Layer::kAutograd, Layer::kNn, Layer::kOptim, Layer::kDistributed}))
            report("a backend (ops/cpu, ops/cuda) includes " + inc + " (kernels know tensors, nothing above ops)");
          break;
        case Layer::kAutograd:
          if (to != Layer::kCore && to != Layer::kAutograd)
            report("autograd/ includes " + inc + " (autograd knows only core: NOTE [autograd below ops])");
          break;
        default:
          break;
      }
      continue;
    }
    if (layer == Layer::kBackend) continue;
    if (std::regex_search(WithoutStrings(code), kDeviceTest) && !DeviceTestAllowed(path, code)) {
      report("is_cpu()/is_cuda() outside the backends: a backend difference is a kernel-table entry");
    }
  }
  return out;
}

// ---- the rules on made-up files (so the scan below cannot pass vacuously) ----------

TEST(Layering, FlagsEachKindOfViolation) {
  EXPECT_THAT(Violations("octet/core/tensor.cc", "#include <octet/autograd/node.h>\n"),
              ElementsAre(HasSubstr("octet/core/tensor.cc:1: core/ includes octet/autograd/node.h")));
  EXPECT_THAT(Violations("octet/core/x.h", "#include <octet/ops/registry.h>\n#include <octet/core/dtype.h>\n"),
              ElementsAre(HasSubstr("x.h:1: core/ includes octet/ops/registry.h")));
  EXPECT_THAT(Violations("octet/ops/new_op.cc", "#include <octet/optim/sgd.h>\n"),
              ElementsAre(HasSubstr("ops/ includes octet/optim/sgd.h")));
  EXPECT_THAT(Violations("octet/autograd/engine.cc", "#include <octet/ops/pointwise.h>\n"),
              ElementsAre(HasSubstr("autograd/ includes octet/ops/pointwise.h (autograd knows only core")));
  EXPECT_THAT(Violations("octet/autograd/node.cc", "#include <octet/optim/sgd.h>\n"),
              ElementsAre(HasSubstr("autograd/ includes octet/optim/sgd.h")));
  EXPECT_THAT(Violations("octet/ops/cuda/adamw.cu", "#include \"octet/optim/adamw_kernels.h\"\n"),
              ElementsAre(HasSubstr("a backend (ops/cpu, ops/cuda) includes octet/optim/adamw_kernels.h")));
  EXPECT_THAT(Violations("octet/ops/cpu/x_cpu.cc", "  #  include <octet/autograd/grad_mode.h>\n"),
              ElementsAre(HasSubstr("includes octet/autograd/grad_mode.h")));
  EXPECT_THAT(Violations("octet/nn/linear.cc", "#include <octet/ops/cuda/device_context.h>\n"),
              ElementsAre(HasSubstr("linear.cc:1: includes the backend header octet/ops/cuda/device_context.h")));
  EXPECT_THAT(Violations("octet/autograd/engine.cc", "#include <octet/nn/module.h>\n"),
              ElementsAre(HasSubstr("autograd/ includes octet/nn/module.h")));
  EXPECT_THAT(Violations("octet/optim/sgd.cc", "  if (!p.device().is_cpu()) {\n"),
              ElementsAre(HasSubstr("octet/optim/sgd.cc:1: is_cpu()/is_cuda() outside the backends")));
  EXPECT_THAT(Violations("octet/nn/fp8_scaling.cc", "x\n  Tensor y = x.device().is_cuda () ? x : x;\n"),
              ElementsAre(HasSubstr("fp8_scaling.cc:2: is_cpu()/is_cuda()")));
  EXPECT_THAT(Violations("octet/nn/a.cc", "/* is_cpu() */ if (d.is_cuda()) Log(\"is_cpu()\");\n"),
              ElementsAre(HasSubstr("a.cc:1: is_cpu()/is_cuda()")));
  // An allow-listed file only has its named lines allowed.
  EXPECT_THAT(Violations("octet/core/tensor.cc", "  if (t.device().is_cpu()) Foo();\n"),
              ElementsAre(HasSubstr("tensor.cc:1: is_cpu()")));
}

TEST(Layering, AllowsWhatPointsDownAndTheListedExceptions) {
  EXPECT_THAT(Violations("octet/core/tensor.cc", "#include <octet/core/scaling.h>\n#include <vector>\n"), IsEmpty());
  EXPECT_THAT(Violations("octet/ops/cpu/optim_cpu.cc", "#include <octet/ops/optim_kernels.h>\n"
                                                       "  if (x.device().is_cpu()) {}\n"),
              IsEmpty());
  EXPECT_THAT(Violations("octet/ops/shape.cc", "#include <octet/autograd/function.h>\n"), IsEmpty());
  EXPECT_THAT(Violations("octet/distributed/cuda/nccl_group.cc", "#include <octet/ops/cuda/cuda_check.h>\n"),
              IsEmpty());
  EXPECT_THAT(Violations("octet/optim/adamw.cc", "#include <octet/ops/optim_kernels.h>\n"
                                                 "// no is_cpu() dispatch here\n"
                                                 "/* nor is_cuda()\n   is_cpu() */ int x;\n"
                                                 "  Log(\"// is_cpu()\");  /* is_cuda() */\n"),
              IsEmpty());
  EXPECT_THAT(Violations("octet/distributed/zero.cc", "    OCTET_CHECK(p.device().is_cpu(), \"x\");\n"), IsEmpty());
}

// ---- the tree ----------------------------------------------------------------------

TEST(Layering, EveryFileUnderOctetPointsOneWay) {
  const fs::path root(OCTET_SOURCE_DIR);
  ASSERT_TRUE(fs::is_directory(root / "octet")) << root / "octet" << " is not a directory";
  int files = 0;
  bool saw_tensor_cc = false;
  std::vector<std::string> all;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / "octet")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
    const std::string rel = fs::relative(e.path(), root).generic_string();
    std::ifstream f(e.path(), std::ios::binary);
    ASSERT_TRUE(f) << "cannot read " << e.path();
    std::stringstream text;
    text << f.rdbuf();
    for (std::string& v : Violations(rel, text.str())) all.push_back(std::move(v));
    ++files;
    saw_tensor_cc |= rel == "octet/core/tensor.cc";
  }
  EXPECT_GT(files, 100) << "found only " << files << " source files under " << root / "octet";
  EXPECT_TRUE(saw_tensor_cc) << "the scan did not reach octet/core/tensor.cc";
  std::sort(all.begin(), all.end());
  for (const std::string& v : all) ADD_FAILURE() << v;
}

}  // namespace
}  // namespace octet
