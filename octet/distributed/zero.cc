#include <octet/distributed/zero.h>

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <octet/autograd/grad_mode.h>
#include <octet/core/convert.h>
#include <octet/core/error.h>
#include <octet/core/scaling.h>
#include <octet/core/scaling_math.h>

namespace octet::dist {

ZeroAdamW::ZeroAdamW(ProcessGroup& pg, NamedTensors params, optim::AdamW::Options options, ZeroOptions zero)
    : pg_(pg), params_(std::move(params)), options_(std::move(options)), zero_(zero) {
  OCTET_CHECK(zero_.gather_dtype == DType::kFloat32 || zero_.gather_dtype == DType::kBFloat16 ||
                  zero_.gather_dtype == DType::kFloat8E4M3,
              "ZeroAdamW: gather_dtype ", Name(zero_.gather_dtype), " is not float32, bfloat16 or fp8_e4m3");
  OCTET_CHECK(options_.state_dtype == optim::StateDType::kFloat32,
              "ZeroAdamW: only float32 optimizer state is sharded (got ", optim::Name(options_.state_dtype), ")");
  for (const auto& [name, p] : params_) {
    OCTET_CHECK(p.defined() && p.dtype() == DType::kFloat32 && p.is_contiguous() && p.device().is_cpu(),
                "ZeroAdamW: parameter '", name, "' is ", p.defined() ? Describe(p) : std::string("undefined"),
                "; expected a contiguous float32 CPU tensor");
    offsets_.push_back(total_);
    total_ += p.numel();
  }
  const int world = pg_.size();
  shard_ = (total_ + world - 1) / world;
  shard_lo_ = std::min(total_, shard_ * pg_.rank());
  shard_hi_ = std::min(total_, shard_lo_ + shard_);
  // NOTE [zero-1 layout]: the pieces of this rank's range.
  NamedTensors piece_params;
  std::map<std::string, bool> decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t lo = std::max(shard_lo_, offsets_[i]);
    const int64_t hi = std::min(shard_hi_, offsets_[i] + params_[i].second.numel());
    if (lo >= hi) continue;
    Piece piece{.param = static_cast<int>(i), .begin = lo - offsets_[i], .length = hi - lo, .master = Tensor()};
    if (zero_.gather_dtype == DType::kFloat32) {
      // The gathered weights are the masters bit for bit: the piece is a view
      // of the parameter's own storage, so there is no second copy.
      piece.master = params_[i].second.detach().View({-1}).Narrow(0, piece.begin, piece.length).detach();
    } else {
      // Rounded weights come back from the gather: the owner keeps an FP32 master.
      const float* src = params_[i].second.data<float>() + piece.begin;
      piece.master = FromVector(std::vector<float>(src, src + piece.length), {piece.length});
    }
    piece.master.requires_grad_();
    const std::string name = absl::StrCat(params_[i].first, "@", piece.begin);
    bool decayed = params_[i].second.dim() >= 2;
    if (options_.decay_filter) decayed = options_.decay_filter(params_[i].first, params_[i].second);
    for (const std::string& nd : options_.no_decay) decayed &= nd != params_[i].first;
    decay[name] = decayed;
    piece_params.emplace_back(name, piece.master);
    pieces_.push_back(std::move(piece));
  }
  optim::AdamW::Options shard_options = options_;
  shard_options.no_decay.clear();
  shard_options.decay_filter = [decay](const std::string& name, const Tensor&) { return decay.at(name); };
  opt_ = std::make_unique<optim::AdamW>(std::move(piece_params), shard_options);
}

void ZeroAdamW::Flatten(bool grads, float* flat) const {
  std::fill(flat, flat + shard_ * pg_.size(), 0.0f);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor t = grads ? params_[i].second.grad() : params_[i].second;
    if (!t.defined()) continue;
    OCTET_CHECK(t.dtype() == DType::kFloat32 && t.is_contiguous() && t.numel() == params_[i].second.numel(),
                "ZeroAdamW: ", grads ? "gradient" : "value", " of '", params_[i].first, "' is ", Describe(t));
    std::memcpy(flat + offsets_[i], t.raw_data(), static_cast<size_t>(t.numel()) * 4);
  }
}

void ZeroAdamW::ReduceGradients() {
  const int world = pg_.size();
  Tensor flat = Empty({shard_ * world});
  Flatten(/*grads=*/true, flat.data<float>());
  std::vector<float> mine(static_cast<size_t>(shard_));
  switch (zero_.grad_sync) {
    case GradSync::kFp32: {
      Tensor out = Empty({shard_});
      pg_.ReduceScatter(flat, out)->Wait();
      std::memcpy(mine.data(), out.raw_data(), mine.size() * 4);
      break;
    }
    case GradSync::kBf16: {
      Tensor in = flat.To(DType::kBFloat16), out = Empty({shard_}, {.dtype = DType::kBFloat16});
      pg_.ReduceScatter(in, out)->Wait();
      Bf16ToFloatRow(static_cast<const uint16_t*>(out.raw_data()), mine.data(), shard_);
      break;
    }
    default: {  // FP8 with this rank's own current scale; the group sums in FP32
      const DType dt = zero_.grad_sync == GradSync::kFp8E4M3 ? DType::kFloat8E4M3 : DType::kFloat8E5M2;
      const float amax = AmaxRow(flat.data<float>(), flat.numel());
      const float scale = ComputeScale(amax, static_cast<float>(Info(dt).max_finite), 0, 1.0f, false);
      Tensor in = Empty({flat.numel()}, {.dtype = dt});
      QuantizeRow(flat.data<float>(), scale, dt, Fp8Saturation::kSatFinite, static_cast<uint8_t*>(in.raw_data()),
                  flat.numel());
      in.impl()->set_scale_meta(MakePerTensorScale(scale, amax));
      Tensor out = Empty({shard_}, {.dtype = dt});
      pg_.ReduceScatter(in, out)->Wait();
      DequantizeRow(static_cast<const uint8_t*>(out.raw_data()), dt, ScaleInvValue(out), mine.data(), shard_);
      break;
    }
  }
  const float inv_n = 1.0f / static_cast<float>(world);
  for (Piece& piece : pieces_) {
    const float* src = mine.data() + (offsets_[piece.param] + piece.begin - shard_lo_);
    std::vector<float> g(src, src + piece.length);
    for (float& v : g) v *= inv_n;
    piece.master.set_grad(FromVector(g, {piece.length}));
  }
}

double ZeroAdamW::ClipGradNorm(double max_norm) {
  double sq = 0.0;
  for (const Piece& piece : pieces_) {
    Tensor g = piece.master.grad();
    if (!g.defined()) continue;
    const float* d = g.data<float>();
    for (int64_t i = 0; i < piece.length; ++i) sq += static_cast<double>(d[i]) * d[i];
  }
  Tensor total = Full({1}, static_cast<float>(sq));
  pg_.AllReduce(total)->Wait();
  const double norm = std::sqrt(static_cast<double>(total.data<float>()[0]));
  if (max_norm > 0 && norm > max_norm) {
    const float factor = static_cast<float>(max_norm / (norm + 1e-6));
    for (Piece& piece : pieces_) {
      Tensor g = piece.master.grad();
      if (!g.defined()) continue;
      float* d = g.data<float>();
      for (int64_t i = 0; i < piece.length; ++i) d[i] *= factor;
    }
  }
  return norm;
}

void ZeroAdamW::Step() {
  opt_->Step();
  GatherWeights();
}

std::vector<float> ZeroAdamW::MasterShard() const {
  std::vector<float> mine(static_cast<size_t>(shard_), 0.0f);
  for (const Piece& piece : pieces_) {
    std::memcpy(mine.data() + (offsets_[piece.param] + piece.begin - shard_lo_), piece.master.raw_data(),
                static_cast<size_t>(piece.length) * 4);
  }
  return mine;
}

void ZeroAdamW::GatherWeights() {
  const int world = pg_.size();
  // This rank's updated shard, then every rank's.
  std::vector<float> mine = MasterShard();
  Tensor flat = Empty({shard_ * world});
  if (zero_.gather_dtype == DType::kFloat32) {
    pg_.AllGather(FromBlob(mine.data(), {shard_}, DType::kFloat32), flat)->Wait();
  } else if (zero_.gather_dtype == DType::kBFloat16) {
    Tensor in = Empty({shard_}, {.dtype = DType::kBFloat16}), out = Empty({shard_ * world}, {.dtype = DType::kBFloat16});
    FloatToBf16Row(mine.data(), static_cast<uint16_t*>(in.raw_data()), shard_);
    pg_.AllGather(in, out)->Wait();
    Bf16ToFloatRow(static_cast<const uint16_t*>(out.raw_data()), flat.data<float>(), flat.numel());
  } else {
    // FP8: one shared scale (MAX-reduced amax) so one gathered tensor holds every shard.
    const DType dt = zero_.gather_dtype;
    Tensor amax = Full({1}, AmaxRow(mine.data(), shard_));
    pg_.AllReduce(amax, ReduceOp::kMax)->Wait();
    const float scale = ComputeScale(amax.data<float>()[0], static_cast<float>(Info(dt).max_finite), 0, 1.0f, false);
    Tensor in = Empty({shard_}, {.dtype = DType::kUInt8}), out = Empty({shard_ * world}, {.dtype = DType::kUInt8});
    QuantizeRow(mine.data(), scale, dt, Fp8Saturation::kSatFinite, in.data<uint8_t>(), shard_);
    pg_.AllGather(in, out)->Wait();
    DequantizeRow(out.data<uint8_t>(), dt, 1.0f / scale, flat.data<float>(), flat.numel());
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    std::memmove(p.raw_data(), flat.data<float>() + offsets_[i], p.nbytes());
    p.storage()->BumpVersion();  // cached FP8 weight copies are per version
  }
}

optim::OptimizerState ZeroAdamW::FullStateDict() {
  const int world = pg_.size();
  optim::OptimizerState shard = opt_->StateDict();
  optim::OptimizerState full;
  full.scalars = shard.scalars;
  std::vector<Tensor> flats;  // m, v: [N·S] each
  for (const char* slot : {"m", "v"}) {
    std::vector<float> mine(static_cast<size_t>(shard_), 0.0f);
    for (const Piece& piece : pieces_) {
      const std::string name = absl::StrCat("adamw.", slot, ".", params_[piece.param].first, "@", piece.begin);
      auto it = std::find_if(shard.tensors.begin(), shard.tensors.end(), [&](const auto& e) { return e.first == name; });
      OCTET_CHECK(it != shard.tensors.end(), "ZeroAdamW: no optimizer state '", name, "'");
      const std::vector<float> v = it->second.ToFloats();
      std::copy(v.begin(), v.end(), mine.begin() + (offsets_[piece.param] + piece.begin - shard_lo_));
    }
    Tensor flat = Empty({shard_ * world});
    pg_.AllGather(FromBlob(mine.data(), {shard_}, DType::kFloat32), flat)->Wait();
    flats.push_back(flat);
  }
  // Plain AdamW's names and order: m and v of each parameter in turn.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    for (int k = 0; k < 2; ++k) {
      full.tensors.emplace_back(absl::StrCat("adamw.", k == 0 ? "m" : "v", ".", params_[i].first),
                                flats[k].Narrow(0, offsets_[i], p.numel()).Clone().View(p.shape()));
    }
  }
  return full;
}

void ZeroAdamW::LoadFullStateDict(const optim::OptimizerState& state) {
  optim::OptimizerState shard;
  shard.scalars = state.scalars;
  for (const Piece& piece : pieces_) {
    const std::string& pname = params_[piece.param].first;
    for (const char* slot : {"m", "v"}) {
      const std::string want = absl::StrCat("adamw.", slot, ".", pname);
      auto it = std::find_if(state.tensors.begin(), state.tensors.end(), [&](const auto& e) { return e.first == want; });
      if (it == state.tensors.end()) {
        OCTET_FAIL(absl::StrCat("ZeroAdamW: the optimizer state has no '", want, "'"));
      }
      if (it->second.numel() != params_[piece.param].second.numel()) {
        OCTET_FAIL(absl::StrCat("ZeroAdamW: '", want, "' is ", Describe(it->second),
                                                       " but the parameter has ",
                                                       params_[piece.param].second.numel(), " elements"));
      }
      shard.tensors.emplace_back(absl::StrCat("adamw.", slot, ".", pname, "@", piece.begin),
                                 it->second.Contiguous().View({-1}).Narrow(0, piece.begin, piece.length).Contiguous());
    }
  }
  opt_->LoadStateDict(shard);
  if (zero_.gather_dtype == DType::kFloat32) return;  // the pieces are views of the parameters
  // The masters follow the model's (already loaded, FP32: MasterWeights())
  // parameters, which then hold the rounded weights as after a Step. The
  // parameters are identical on every rank, so this is rank-local until the
  // gather.
  for (Piece& piece : pieces_) {
    const float* src = params_[piece.param].second.data<float>() + piece.begin;
    std::memcpy(piece.master.raw_data(), src, static_cast<size_t>(piece.length) * 4);
    piece.master.storage()->BumpVersion();
  }
  GatherWeights();
}

ZeroAdamW::NamedTensors ZeroAdamW::MasterWeights() {
  std::vector<float> mine = MasterShard();
  Tensor flat = Empty({shard_ * pg_.size()});
  pg_.AllGather(FromBlob(mine.data(), {shard_}, DType::kFloat32), flat)->Wait();
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    out.emplace_back(params_[i].first, flat.Narrow(0, offsets_[i], p.numel()).Clone().View(p.shape()));
  }
  return out;
}

}  // namespace octet::dist

namespace octet::dist {
int64_t ZeroAdamW::state_bytes() const {
  // m and v, the pieces' gradients, and a separate master unless pieces are views.
  const int64_t per = zero_.gather_dtype == DType::kFloat32 ? 12 : 16;
  return per * shard_elements();
}
}  // namespace octet::dist
