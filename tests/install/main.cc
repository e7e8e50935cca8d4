// Built against the installed octet the way an application would be: its own
// core/tensor.h on the include path, octet only through <octet/...>.
//   - a two-layer model trains on the CPU (the loss falls by 10x);
//   - autograd and an FP8 round trip give closed-form numbers;
//   - an own log sink receives the library's messages; bad input is an octet::Error;
//   - a FileStore round trip, and a Get timeout is a dist::StoreTimeoutError
//     naming the key (the distributed API needs no Abseil either);
//   - octet::Synchronize works for the CPU, and for CUDA when a device is there;
//   - the installed headers' version macros are the installed library's version.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"  // the consumer's own (tests/install/core/tensor.h)

#include <octet/distributed/store.h>
#include <octet/octet.h>

namespace {

int failures = 0;
void Expect(bool ok, const char* what) {
  std::printf("consumer: %-48s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

// y = sin(x0) + 0.5 x1 on 64 fixed points; a Linear-GELU-Linear fits it.
double TrainTwoLayerModel() {
  using namespace octet;
  Generator gen(7);
  nn::Linear fc1({.in = 2, .out = 32, .gen = &gen});
  nn::Linear fc2({.in = 32, .out = 1, .gen = &gen});
  nn::NamedTensors params = fc1.NamedParameters();
  for (auto& p : fc2.NamedParameters()) params.push_back({"fc2." + p.first, p.second});
  optim::AdamW opt(params, {.lr = 1e-2, .weight_decay = 0.0});
  std::vector<double> xs, ys;
  for (int i = 0; i < 64; ++i) {
    const double a = -2.0 + 4.0 * i / 63.0, b = std::cos(1.7 * i);
    xs.push_back(a);
    xs.push_back(b);
    ys.push_back(std::sin(a) + 0.5 * b);
  }
  const Tensor x = FromVector(xs, {64, 2}), y = FromVector(ys, {64, 1});
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt.ZeroGrad();
    const Tensor d = Sub(fc2(Gelu(fc1(x))), y);
    const Tensor loss = Mean(Mul(d, d));
    loss.Backward();
    opt.Step();
    last = loss.Item();
    if (step == 0) first = last;
  }
  std::printf("consumer: two-layer model loss %.5f -> %.5f\n", first, last);
  return last / first;
}

// The application's own log sink receives octet's messages: the CPU GEMM
// path is reported at debug level the first time an FP8 GEMM runs.
bool LogSinkReceivesLibraryMessages() {
  using namespace octet;
  std::vector<std::string> got;
  SetLogSink([&got](LogLevel level, std::string_view msg) {
    if (level == LogLevel::kDebug) got.emplace_back(msg);
  });
  SetLogLevel(LogLevel::kDebug);
  Generator gen(3);
  nn::Linear fc({.in = 16, .out = 16, .gen = &gen});
  fc.SetAmp(nn::amp::Level::kO1);
  const Tensor y = fc(Ones({4, 16}));
  SetLogSink(nullptr);
  SetLogLevel(LogLevel::kInfo);
  for (const std::string& m : got) std::printf("consumer: log sink got \"%s\"\n", m.c_str());
  return !got.empty() && got[0].find("CPU BF16/FP8 GEMMs compute with") != std::string::npos;
}

// Bad input is an octet::Error naming what is wrong.
bool WrongShapeIsAnOctetError() {
  using namespace octet;
  nn::Linear a({.in = 4, .out = 3}), b({.in = 5, .out = 3});
  try {
    b.LoadStateDict(a.StateDict());
  } catch (const Error& e) {
    std::printf("consumer: octet::Error: %s\n", e.what());
    return std::string(e.what()).find("weight") != std::string::npos;
  }
  return false;
}

// The rendezvous store: values round-trip, a missing key times out with an
// exception of the store's own type that names the key.
bool FileStoreRoundTripAndTimeout() {
  using namespace octet;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("octet_consumer_store_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  bool ok = false;
  try {
    std::unique_ptr<dist::FileStore> store = dist::FileStore::Open(dir.string());
    store->Set("greeting", "hello");
    ok = store->Get("greeting", std::chrono::milliseconds(0)) == "hello" && store->Add("n", 3) == 3 &&
         store->Check({"greeting", "n"});
    try {
      store->Get("absent", std::chrono::milliseconds(10));
      ok = false;
    } catch (const dist::StoreTimeoutError& e) {
      std::printf("consumer: dist::StoreTimeoutError: %s\n", e.what());
      ok = ok && std::string(e.what()).find("'absent'") != std::string::npos;
    }
  } catch (const Error& e) {
    std::printf("consumer: unexpected octet::Error: %s\n", e.what());
    ok = false;
  }
  std::filesystem::remove_all(dir);
  return ok;
}

}  // namespace

int main() {
  using namespace octet;
  consumer::Tensor mine{.rows = 2, .cols = 3};
  Expect(mine.rows * mine.cols == 6, "own core/tensor.h is the consumer's");

  Tensor x = FromVector(std::vector<double>{1.0, -2.0, 3.0}, {3}, {.requires_grad = true});
  Tensor y = Sum(Mul(x, x));
  y.Backward();
  const std::vector<double> g = x.grad().ToDoubles();
  Expect(g[0] == 2.0 && g[1] == -4.0 && g[2] == 6.0 && y.Item() == 14.0, "autograd of sum(x*x)");
  Tensor q = x.detach().To(DType::kFloat8E4M3);
  Expect(q.At({2}) == 3.0, "fp8_e4m3 round trip of 3");

  Expect(TrainTwoLayerModel() < 0.1, "two-layer model trains (loss / 10)");
  Expect(LogSinkReceivesLibraryMessages(), "own log sink receives octet's messages");
  Expect(WrongShapeIsAnOctetError(), "a wrong shape is an octet::Error naming it");
  Expect(FileStoreRoundTripAndTimeout(), "FileStore round trip; a timeout names the key");
  Expect(GetMemoryStats(kCPU).peak_allocated_bytes > 0, "CPU memory statistics");
  const VersionInfo v = LibraryVersion();
  std::printf("consumer: built with octet %d.%d.%d headers, running liboctet %s\n", OCTET_VERSION_MAJOR,
              OCTET_VERSION_MINOR, OCTET_VERSION_PATCH, LibraryVersionString());
  Expect(v.major == OCTET_VERSION_MAJOR && v.minor == OCTET_VERSION_MINOR && v.patch == OCTET_VERSION_PATCH,
         "the headers' version is the library's");

  Synchronize(kCPU);
  if (DeviceCount(DeviceType::kCUDA) > 0) {
    const Tensor c = Mul(x.detach().To(CUDA(0)), x.detach().To(CUDA(0)));
    Synchronize(CUDA(0));
    Expect(c.To(kCPU).ToDoubles() == std::vector<double>{1.0, 4.0, 9.0}, "CUDA work finished after Synchronize");
  } else {
    std::printf("consumer: no CUDA device (%s)\n", DeviceUnavailableReason(DeviceType::kCUDA).c_str());
  }
  return failures == 0 ? 0 : 1;
}
