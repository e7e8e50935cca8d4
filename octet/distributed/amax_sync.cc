#include <octet/distributed/amax_sync.h>

#include <absl/strings/match.h>

#include <cstring>
#include <vector>

#include <octet/core/error.h>
#include <octet/nn/amp.h>

namespace octet::dist {

void SyncAmaxesThrough(ProcessGroup& pg, nn::amp::Fp8State& state) {
  state.SetAmaxReduceHook([&pg](Tensor& amax) {
    if (pg.size() > 1 && amax.numel() > 0) pg.AllReduce(amax, ReduceOp::kMax)->Wait();
  });
}

int64_t AllReduceAmaxes(ProcessGroup& pg, nn::Module& model) {
  const nn::NamedTensors state = nn::amp::ScalingState(model);
  int64_t total = 0;
  for (const auto& [name, t] : state) {
    OCTET_CHECK(t.dtype() == DType::kFloat32 && t.device().is_cpu(), "AllReduceAmaxes: '", name, "' is ",
                Describe(t), "; expected float32 CPU scaling state");
    total += t.numel();
  }
  if (total == 0 || pg.size() == 1) return total;
  // NOTE [amax sync]: histories as they are, scales negated, one buffer.
  Tensor buf = Empty({total});
  float* b = buf.data<float>();
  int64_t off = 0;
  std::vector<bool> is_scale;
  for (const auto& [name, t] : state) {
    const bool scale = absl::EndsWith(name, "_scale");
    is_scale.push_back(scale);
    const std::vector<float> v = t.Contiguous().ToFloats();
    for (float x : v) b[off++] = scale ? -x : x;
  }
  pg.AllReduce(buf, ReduceOp::kMax)->Wait();
  off = 0;
  for (size_t k = 0; k < state.size(); ++k) {
    const Tensor& t = state[k].second;
    std::vector<float> v(b + off, b + off + t.numel());
    if (is_scale[k]) {
      for (float& x : v) x = -x;
    }
    Tensor src = FromVector(v, t.shape());
    Tensor(t).CopyFrom_(src);  // bumps the version (cached "initialized" state re-reads)
    off += t.numel();
  }
  return total;
}

}  // namespace octet::dist
