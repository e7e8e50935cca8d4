// The GPT training step of benchmarks/train_step_bench.cc written against the
// libtorch C++ frontend, for a side-by-side comparison in one sitting
// (benchmarks/compare/run_compare.sh builds and runs it; it is not part of
// octet's build and needs libtorch, e.g. Debian's libtorch-dev 1.13).
//
// The same model as octet's nn::GPT: token + position embeddings, n_layer
// pre-LN blocks (LayerNorm, causal self-attention with a fused qkv Linear and
// an output Linear, LayerNorm, MLP Linear(C,4C) - GELU(tanh) - Linear(4C,C)),
// a final LayerNorm and an lm_head tied to the token embedding; mean
// cross-entropy; AdamW (lr 1e-4, weight decay 0.01 as octet's default). The
// attention is spelled out (libtorch 1.13 has no scaled_dot_product_attention):
// softmax(q kᵀ / sqrt(D) + causal mask) v.
//
// Modes: fp32, and bf16 autocast (CPU autocast to bfloat16 around the forward
// and the loss, as torch.autocast("cpu", dtype=torch.bfloat16)).
//
// Output, one line per (config, mode):
//   libtorch <config> <mode> ms_per_step <wall> cpu_ms_per_step <all threads>
//
//   OMP_NUM_THREADS=2 libtorch_gpt [steps] [config: small|wide|all] [mode: fp32|bf16|all]
//   libtorch_gpt --blas-core   prints the OpenBLAS kernel set libtorch's fp32
//                              GEMMs run on ("Haswell", "SkylakeX", ...), or
//                              "none" when its BLAS is not OpenBLAS
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dlfcn.h>
#include <string>
#include <vector>

namespace {

struct Config {
  const char* name;
  int64_t n_layer, n_embd, n_head, T, B;
};
constexpr Config kConfigs[] = {{"small", 4, 256, 4, 128, 8}, {"wide", 2, 768, 12, 256, 4}};
constexpr int64_t kVocab = 256;

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t C, int64_t H, int64_t T) : n_head(H) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
    qkv = register_module("qkv", torch::nn::Linear(C, 3 * C));
    proj = register_module("proj", torch::nn::Linear(C, C));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
    fc = register_module("fc", torch::nn::Linear(C, 4 * C));
    fc_proj = register_module("fc_proj", torch::nn::Linear(4 * C, C));
    mask = register_buffer("mask", torch::ones({T, T}, torch::kBool).triu(1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head;
    auto parts = qkv->forward(ln1->forward(x)).view({B, T, 3, n_head, D}).permute({2, 0, 3, 1, 4});
    torch::Tensor q = parts[0], k = parts[1], v = parts[2];  // (B,H,T,D)
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
    att = att.masked_fill(mask.index({torch::indexing::Slice(0, T), torch::indexing::Slice(0, T)}),
                          -std::numeric_limits<float>::infinity());
    att = torch::softmax(att, -1);
    torch::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, C});
    torch::Tensor h = x + proj->forward(y);
    torch::Tensor m = fc_proj->forward(torch::gelu(fc->forward(ln2->forward(h)), "tanh"));
    return h + m;
  }
  int64_t n_head;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc_proj{nullptr};
  torch::Tensor mask;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const Config& c) {
    wte = register_module("wte", torch::nn::Embedding(kVocab, c.n_embd));
    wpe = register_module("wpe", torch::nn::Embedding(c.T, c.n_embd));
    for (int64_t i = 0; i < c.n_layer; ++i)
      blocks.push_back(register_module("h" + std::to_string(i), Block(c.n_embd, c.n_head, c.T)));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    // GPT-2 initialisation as octet's: N(0, 0.02) matrices and embeddings, zero biases.
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      if (p.value().dim() == 2)
        p.value().normal_(0.0, 0.02);
      else if (p.key().find("bias") != std::string::npos && p.key().find("ln") == std::string::npos)
        p.value().zero_();
    }
  }
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets) {
    const int64_t T = idx.size(1);
    torch::Tensor x = wte->forward(idx) + wpe->forward(torch::arange(T, torch::kLong));
    for (Block& b : blocks) x = b->forward(x);
    torch::Tensor logits = torch::matmul(ln_f->forward(x), wte->weight.t());  // tied lm_head
    return torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}).to(torch::kFloat32),
                                                targets.reshape({-1}));
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void Run(const Config& c, bool bf16, int steps) {
  torch::manual_seed(1);
  Gpt model(c);
  model->train();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
  const torch::Tensor x = torch::randint(kVocab, {c.B, c.T}, torch::kLong);
  const torch::Tensor y = torch::randint(kVocab, {c.B, c.T}, torch::kLong);
  auto step = [&] {
    opt.zero_grad();
    torch::Tensor loss;
    if (bf16) {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      loss = model->loss(x, y);
      at::autocast::set_cpu_enabled(false);
      at::autocast::clear_cache();
    } else {
      loss = model->loss(x, y);
    }
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  float last = 0.0f;
  for (int i = 0; i < steps; ++i) last = step();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = ProcessCpuSeconds() - cpu0;
  std::printf("libtorch %s %s ms_per_step %.2f cpu_ms_per_step %.2f loss %.4f threads %d\n", c.name,
              bf16 ? "bf16" : "fp32", 1e3 * sec / steps, 1e3 * cpu / steps, last, torch::get_num_threads());
  std::fflush(stdout);
}

// OpenBLAS picks its kernels from the CPU model at load time (or from
// OPENBLAS_CORETYPE); run_compare.sh asks which it picked.
const char* OpenBlasCore() {
  using CoreName = char* (*)();
  const auto f = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return f != nullptr ? f() : "none";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--blas-core") {
    torch::zeros({1});  // libtorch (and the BLAS it links) loaded and initialised
    std::printf("%s\n", OpenBlasCore());
    return 0;
  }
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  const std::string which = argc > 2 ? argv[2] : "all";
  const std::string mode = argc > 3 ? argv[3] : "all";
  if (steps < 1 || (which != "all" && which != "small" && which != "wide") ||
      (mode != "all" && mode != "fp32" && mode != "bf16")) {
    std::fprintf(stderr, "usage: libtorch_gpt [steps >= 1] [small|wide|all] [fp32|bf16|all]\n");
    return 2;
  }
  if (std::getenv("OMP_NUM_THREADS") == nullptr) torch::set_num_threads(2);
  for (const Config& c : kConfigs) {
    if (which != "all" && which != c.name) continue;
    if (mode != "bf16") Run(c, false, steps);
    if (mode != "fp32") Run(c, true, steps);
  }
  return 0;
}
