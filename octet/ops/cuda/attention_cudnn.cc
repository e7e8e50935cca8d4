#include <octet/ops/cuda/attention_cudnn.h>

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/cudnn_handle.h>
#include <octet/ops/cuda/device_context.h>

namespace octet::cuda {

Strides4 BhsdStrides(int64_t b, int64_t h, int64_t s, int64_t d) { return {h * s * d, s * d, d, 1}; }
Strides4 BshdStrides(int64_t b, int64_t h, int64_t s, int64_t d) { return {s * h * d, d, h * d, 1}; }

SdpaConfig ContiguousSdpaConfig(int64_t b, int64_t h, int64_t s, int64_t d, DType dtype, bool backward) {
  SdpaConfig c;
  c.b = b;
  c.h = h;
  c.s = s;
  c.d = d;
  c.dtype = dtype;
  c.backward = backward;
  c.q = c.k = c.v = c.o = BhsdStrides(b, h, s, d);
  if (backward) c.dout = c.dq = c.dk = c.dv = BhsdStrides(b, h, s, d);
  return c;
}

namespace {

std::string Describe(const SdpaConfig& c) {
  std::ostringstream os;
  os << "causal attention " << (c.backward ? "backward" : "forward") << " B=" << c.b << " H=" << c.h << " T=" << c.s
     << " D=" << c.d << " " << Name(c.dtype);
  return os.str();
}

void ValidateConfig(const SdpaConfig& c) {
  OCTET_CHECK(c.dtype == DType::kBFloat16 || c.dtype == DType::kFloat16, Describe(c),
              ": the cuDNN attention graphs take bfloat16 or float16 (other dtypes run the unfused fallback, "
              "NOTE [attention fallback])");
  OCTET_CHECK(c.b > 0 && c.h > 0 && c.s > 0 && c.d > 0, Describe(c), ": every size must be positive");
  OCTET_CHECK(c.d % 8 == 0 && c.d <= 256, Describe(c),
              ": cuDNN fused attention needs a head dim that is a "
              "multiple of 8 and at most 256, got ",
              c.d);
  for (const Strides4* st : {&c.q, &c.k, &c.v, &c.o}) {
    OCTET_CHECK((*st)[3] == 1, Describe(c), ": the head dim must have unit stride");
  }
  if (c.backward) {
    for (const Strides4* st : {&c.dout, &c.dq, &c.dk, &c.dv}) {
      OCTET_CHECK((*st)[3] == 1, Describe(c), ": the head dim must have unit stride");
    }
  }
}

cudnnDataType_t IoType(DType d) { return d == DType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

std::vector<int64_t> Vec(const Strides4& s) { return {s[0], s[1], s[2], s[3]}; }
// Strides of the transposed view (last two dims swapped).
std::vector<int64_t> VecT(const Strides4& s) { return {s[0], s[1], s[3], s[2]}; }

// The four ops of the top-left causal mask (right bound 0): keep S where
// row >= column, else -inf. Returns the masked tensor.
int64_t CausalMask(CudnnGraph& g, int64_t s_in, int64_t neg_inf, const std::vector<int64_t>& dims,
                   const std::vector<int64_t>& strides) {
  const int64_t row = g.Virtual("row_index", CUDNN_DATA_INT32, dims, strides);
  g.Pointwise("gen_row_index", CUDNN_POINTWISE_GEN_INDEX, s_in, -1, -1, row, CUDNN_DATA_FLOAT, 2);
  const int64_t col = g.Virtual("col_index", CUDNN_DATA_INT32, dims, strides);
  g.Pointwise("gen_col_index", CUDNN_POINTWISE_GEN_INDEX, s_in, -1, -1, col, CUDNN_DATA_FLOAT, 3);
  const int64_t keep = g.Virtual("row_ge_col", CUDNN_DATA_BOOLEAN, dims, strides);
  g.Pointwise("row_ge_col", CUDNN_POINTWISE_CMP_GE, row, col, -1, keep, CUDNN_DATA_BOOLEAN);
  const int64_t out = g.Virtual("masked_scores", CUDNN_DATA_FLOAT, dims, strides);
  g.Pointwise("causal_select", CUDNN_POINTWISE_BINARY_SELECT, s_in, neg_inf, keep, out);
  return out;
}

}  // namespace

std::unique_ptr<CudnnGraph> BuildSdpaForwardGraph(const SdpaConfig& c, cudnnHandle_t handle) {
  OCTET_CHECK(!c.backward, Describe(c), ": BuildSdpaForwardGraph needs a forward config");
  ValidateConfig(c);
  auto g = std::make_unique<CudnnGraph>(Describe(c));
  const cudnnDataType_t io = IoType(c.dtype), f32 = CUDNN_DATA_FLOAT;
  const int64_t b = c.b, h = c.h, s = c.s, d = c.d;
  const std::vector<int64_t> qdims{b, h, s, d}, kt_dims{b, h, d, s};
  const std::vector<int64_t> sdims{b, h, s, s}, sstr{h * s * s, s * s, s, 1};
  const std::vector<int64_t> rdims{b, h, s, 1}, rstr{h * s, s, 1, 1};

  const int64_t q = g->Tensor("Q", kSdpaQ, io, qdims, Vec(c.q));
  const int64_t kt = g->Tensor("K^T", kSdpaK, io, kt_dims, VecT(c.k));
  const int64_t v = g->Tensor("V", kSdpaV, io, qdims, Vec(c.v));
  const int64_t scale = g->Scalar("attn_scale", kSdpaScale);
  const int64_t neg_inf = g->Scalar("-inf", kSdpaNegInf);

  const int64_t s1 = g->Virtual("S", f32, sdims, sstr);
  g->Matmul("bmm1", q, kt, s1);
  const int64_t s2 = g->Virtual("S_scaled", f32, sdims, sstr);
  g->Pointwise("attn_scale", CUDNN_POINTWISE_MUL, s1, scale, -1, s2);
  const int64_t s3 = CausalMask(*g, s2, neg_inf, sdims, sstr);
  // Softmax (CompositeSoftmaxNode order).
  const int64_t mx = g->Virtual("Max", f32, rdims, rstr);
  g->Reduction("max", CUDNN_REDUCE_TENSOR_MAX, s3, mx);
  const int64_t sub = g->Virtual("sub_M", f32, sdims, sstr);
  g->Pointwise("sub", CUDNN_POINTWISE_SUB, s3, mx, -1, sub);
  const int64_t ex = g->Virtual("exp_sub_M", f32, sdims, sstr);
  g->Pointwise("exp", CUDNN_POINTWISE_EXP, sub, -1, -1, ex);
  const int64_t sum = g->Virtual("SumExp", f32, rdims, rstr);
  g->Reduction("sum", CUDNN_REDUCE_TENSOR_ADD, ex, sum);
  const int64_t lg = g->Virtual("log_SumExp", f32, rdims, rstr);
  g->Pointwise("log", CUDNN_POINTWISE_LOG, sum, -1, -1, lg);
  const int64_t stats = g->Tensor("Stats", kSdpaStats, f32, rdims, rstr);
  g->Pointwise("add", CUDNN_POINTWISE_ADD, mx, lg, -1, stats);
  const int64_t p = g->Virtual("P", io, sdims, sstr);  // bmm2's A in the I/O type
  g->Pointwise("div", CUDNN_POINTWISE_DIV, ex, sum, -1, p);
  const int64_t o = g->Tensor("O", kSdpaO, io, qdims, Vec(c.o));
  g->Matmul("bmm2", p, v, o);
  g->Finalize(handle);
  return g;
}

std::unique_ptr<CudnnGraph> BuildSdpaBackwardGraph(const SdpaConfig& c, cudnnHandle_t handle) {
  OCTET_CHECK(c.backward, Describe(c), ": BuildSdpaBackwardGraph needs a backward config");
  ValidateConfig(c);
  auto g = std::make_unique<CudnnGraph>(Describe(c));
  const cudnnDataType_t io = IoType(c.dtype), f32 = CUDNN_DATA_FLOAT;
  const int64_t b = c.b, h = c.h, s = c.s, d = c.d;
  const std::vector<int64_t> qdims{b, h, s, d}, t_dims{b, h, d, s};
  const std::vector<int64_t> sdims{b, h, s, s}, sstr{h * s * s, s * s, s, 1}, st_str{h * s * s, s * s, 1, s};
  const std::vector<int64_t> rdims{b, h, s, 1}, rstr{h * s, s, 1, 1};

  const int64_t q = g->Tensor("Q", kSdpaQ, io, qdims, Vec(c.q));
  const int64_t kt = g->Tensor("K^T", kSdpaK, io, t_dims, VecT(c.k));
  const int64_t vt = g->Tensor("V^T", kSdpaV, io, t_dims, VecT(c.v));
  const int64_t o = g->Tensor("O", kSdpaO, io, qdims, Vec(c.o));
  const int64_t dout = g->Tensor("dO", kSdpaDO, io, qdims, Vec(c.dout));
  const int64_t stats = g->Tensor("Stats", kSdpaStats, f32, rdims, rstr);
  const int64_t scale = g->Scalar("attn_scale", kSdpaScale);
  const int64_t neg_inf = g->Scalar("-inf", kSdpaNegInf);
  const int64_t one = g->Scalar("one", kSdpaOne);

  // softmax_sum = sum_d(dO * O) * 1 (non-virtual float32 scratch).
  const int64_t doo = g->Virtual("dO*O", f32, qdims, {h * s * d, s * d, h * d, 1});
  g->Pointwise("mul_dO_O", CUDNN_POINTWISE_MUL, dout, o, -1, doo);
  const int64_t red = g->Virtual("sum_dO*O", f32, rdims, rstr);
  g->Reduction("reduce_dO_o", CUDNN_REDUCE_TENSOR_ADD, doo, red);
  const int64_t softmax_sum = g->Tensor("softmax_sum", kSdpaSoftmaxSum, f32, rdims, rstr);
  g->Pointwise("scale_dropout_inv", CUDNN_POINTWISE_MUL, red, one, -1, softmax_sum);

  // P = exp(Q·Kᵀ·scale - stats), causal mask.
  const int64_t s1 = g->Virtual("S", f32, sdims, sstr);
  g->Matmul("matmul_Q_KT", q, kt, s1);
  const int64_t s2 = g->Virtual("S_scaled", f32, sdims, sstr);
  g->Pointwise("mul_s_attn_scale", CUDNN_POINTWISE_MUL, s1, scale, -1, s2);
  const int64_t s3 = g->Virtual("S_minus_stats", f32, sdims, sstr);
  g->Pointwise("sub_s_m", CUDNN_POINTWISE_SUB, s2, stats, -1, s3);
  const int64_t s4 = CausalMask(*g, s3, neg_inf, sdims, sstr);
  const int64_t p = g->Virtual("P", f32, sdims, sstr);
  g->Pointwise("exp_s", CUDNN_POINTWISE_EXP, s4, -1, -1, p);

  // dV = Pᵀ·dO.
  const int64_t pt = g->Virtual("P^T", io, sdims, st_str);
  g->Reshape("reshape_p", p, pt);
  const int64_t dv = g->Tensor("dV", kSdpaDV, io, qdims, Vec(c.dv));
  g->Matmul("matmul_pT_dO", pt, dout, dv);

  // dS = (dO·Vᵀ - softmax_sum) * P * scale.
  const int64_t dp = g->Virtual("dP", f32, sdims, sstr);
  g->Matmul("matmul_dO_VT", dout, vt, dp);
  const int64_t dp2 = g->Virtual("dP_minus_sum", f32, sdims, sstr);
  g->Pointwise("sub_dP_softmax_sum", CUDNN_POINTWISE_SUB, dp, softmax_sum, -1, dp2);
  const int64_t dp3 = g->Virtual("dP_times_P", f32, sdims, sstr);
  g->Pointwise("mul_dP_exp_s", CUDNN_POINTWISE_MUL, dp2, p, -1, dp3);
  const int64_t ds = g->Virtual("dS", f32, sdims, sstr);
  g->Pointwise("mul_dS_attn_scale", CUDNN_POINTWISE_MUL, dp3, scale, -1, ds);

  // dK = dSᵀ·Q.
  const int64_t dst = g->Virtual("dS^T", io, sdims, st_str);
  g->Reshape("reshape_dS", ds, dst);
  const int64_t dk = g->Tensor("dK", kSdpaDK, io, qdims, Vec(c.dk));
  g->Matmul("matmul_dST_Q", dst, q, dk);

  // dQ = identity(dS·K) through a float32 accumulator.
  const int64_t kk = g->Virtual("K", io, qdims, Vec(c.k));
  g->Reshape("reshape_k", kt, kk);
  const int64_t dq_accum = g->Tensor("dQ_accum", kSdpaDQAccum, f32, qdims, {h * s * d, s * d, d, 1});
  g->Matmul("matmul_dS_K", ds, kk, dq_accum);
  const int64_t dq = g->Tensor("dQ", kSdpaDQ, io, qdims, Vec(c.dq));
  g->Pointwise("identity_dQ", CUDNN_POINTWISE_IDENTITY, dq_accum, -1, -1, dq);
  g->Finalize(handle);
  return g;
}

// ---- execution ----
namespace {

struct CachedSdpa {
  std::unique_ptr<CudnnGraph> graph;  // must outlive the plan
  std::unique_ptr<CudnnPlan> plan;
  std::string error;  // non-empty: no engine; rethrown without rebuilding
};

absl::flat_hash_map<SdpaConfig, std::unique_ptr<CachedSdpa>>& PlanCache() {
  thread_local absl::flat_hash_map<SdpaConfig, std::unique_ptr<CachedSdpa>> cache;
  return cache;
}

// The plan for c, or nullptr (with the reason in *why) when cuDNN has no
// engine for it; the answer is cached either way. Other errors propagate.
const CudnnPlan* TryPlanFor(const SdpaConfig& c, std::string* why) {
  auto& cache = PlanCache();
  auto it = cache.find(c);
  if (it == cache.end()) {
    auto entry = std::make_unique<CachedSdpa>();
    // The graph cache is per thread, like the handle it is finalized with.
    const cudnnHandle_t handle = CudnnHandle(c.device);
    entry->graph = c.backward ? BuildSdpaBackwardGraph(c, handle) : BuildSdpaForwardGraph(c, handle);
    try {
      // Mode A is what Transformer Engine uses for SDPA; FALLBACK as a second chance.
      entry->plan = BuildPlan(*entry->graph, {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK});
    } catch (const Error& e) {
      // Only "no engine for this graph" means cuDNN cannot take the call;
      // anything else is a real error, raised and not cached.
      if (!IsCudnnNoEngineError(e.what())) throw;
      entry->error = e.what();
    }
    it = cache.emplace(c, std::move(entry)).first;
  }
  if (!it->second->error.empty()) {
    *why = it->second->error;
    return nullptr;
  }
  return it->second->plan.get();
}

Strides4 StridesOf(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// A (B,H,T,D) input as cuDNN can read it: unit last stride and 16-byte
// aligned (the graph declares BYTE_ALIGNMENT 16), else a contiguous copy.
Tensor Readable(const Tensor& t) {
  const bool ok = t.stride(3) == 1 && reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 &&
                  (t.stride(0) * SizeOf(t.dtype())) % 16 == 0 && (t.stride(1) * SizeOf(t.dtype())) % 16 == 0 &&
                  (t.stride(2) * SizeOf(t.dtype())) % 16 == 0;
  return ok ? t : t.Contiguous();
}

void CheckOutput(const Tensor& t, const char* what) {
  OCTET_CHECK(t.is_contiguous() && reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0,
              "causal attention (cuDNN): ", what, " must be contiguous and 16-byte aligned, got ", Describe(t));
}

}  // namespace

bool RunCausalAttentionFwdCudnn(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, double scale,
                                const Tensor& out, const Tensor& lse, std::string* why) {
  const Tensor q = Readable(q_in), k = Readable(k_in), v = Readable(v_in);
  CheckOutput(out, "out");
  CheckOutput(lse, "lse");
  OCTET_CHECK(lse.dtype() == DType::kFloat32, "causal attention (cuDNN): lse must be float32, got ", Describe(lse));
  SdpaConfig c;
  c.device = q.device().index;
  c.b = q.size(0);
  c.h = q.size(1);
  c.s = q.size(2);
  c.d = q.size(3);
  c.dtype = q.dtype();
  c.q = StridesOf(q);
  c.k = StridesOf(k);
  c.v = StridesOf(v);
  c.o = StridesOf(out);
  DeviceGuard guard(c.device);
  const CudnnPlan* found = TryPlanFor(c, why);
  if (found == nullptr) return false;
  const CudnnPlan& plan = *found;
  void* ws = Workspace(c.device, static_cast<size_t>(plan.workspace_bytes));
  float scale_f = static_cast<float>(scale);
  float neg_inf = -std::numeric_limits<float>::infinity();
  const std::vector<int64_t> uids{kSdpaQ, kSdpaK, kSdpaV, kSdpaO, kSdpaStats, kSdpaScale, kSdpaNegInf};
  const std::vector<void*> ptrs{q.raw_data(),   k.raw_data(), v.raw_data(), out.raw_data(),
                                lse.raw_data(), &scale_f,     &neg_inf};
  ExecutePlan(CudnnHandle(c.device), plan, uids, ptrs, ws, "causal attention forward (" + plan.description + ")");
  return true;
}

bool RunCausalAttentionBwdCudnn(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out_in,
                                const Tensor& dout_in, const Tensor& lse, double scale, const Tensor& dq_in,
                                const Tensor& dk_in, const Tensor& dv_in, std::string* why) {
  const Tensor q = Readable(q_in), k = Readable(k_in), v = Readable(v_in), out = Readable(out_in),
               dout = Readable(dout_in);
  CheckOutput(lse, "lse");
  const Device device = q.device();
  const TensorOptions io{.dtype = q.dtype(), .device = device};
  // The graph always writes dQ, dK and dV: scratch for the ones not wanted.
  const Tensor dq = dq_in.defined() ? dq_in : Empty(q.shape(), io);
  const Tensor dk = dk_in.defined() ? dk_in : Empty(q.shape(), io);
  const Tensor dv = dv_in.defined() ? dv_in : Empty(q.shape(), io);
  CheckOutput(dq, "dq");
  CheckOutput(dk, "dk");
  CheckOutput(dv, "dv");
  SdpaConfig c;
  c.device = device.index;
  c.b = q.size(0);
  c.h = q.size(1);
  c.s = q.size(2);
  c.d = q.size(3);
  c.dtype = q.dtype();
  c.backward = true;
  c.q = StridesOf(q);
  c.k = StridesOf(k);
  c.v = StridesOf(v);
  c.o = StridesOf(out);
  c.dout = StridesOf(dout);
  c.dq = StridesOf(dq);
  c.dk = StridesOf(dk);
  c.dv = StridesOf(dv);
  DeviceGuard guard(c.device);
  const CudnnPlan* found = TryPlanFor(c, why);
  if (found == nullptr) return false;
  const CudnnPlan& plan = *found;
  const Tensor softmax_sum = Empty({c.b, c.h, c.s, 1}, {.dtype = DType::kFloat32, .device = device});
  const Tensor dq_accum = Empty({c.b, c.h, c.s, c.d}, {.dtype = DType::kFloat32, .device = device});
  // cuDNN >= 9.6 clears dQ_accum itself; zeroing it keeps older engines right too.
  OCTET_CUDA_CHECK(cudaMemsetAsync(dq_accum.raw_data(), 0, dq_accum.nbytes(), CurrentStream(c.device)));
  void* ws = Workspace(c.device, static_cast<size_t>(plan.workspace_bytes));
  float scale_f = static_cast<float>(scale);
  float neg_inf = -std::numeric_limits<float>::infinity();
  float one = 1.0f;
  const std::vector<int64_t> uids{kSdpaQ,      kSdpaK,   kSdpaV,  kSdpaO,  kSdpaDO, kSdpaStats,      kSdpaScale,
                                  kSdpaNegInf, kSdpaOne, kSdpaDQ, kSdpaDK, kSdpaDV, kSdpaSoftmaxSum, kSdpaDQAccum};
  const std::vector<void*> ptrs{q.raw_data(),
                                k.raw_data(),
                                v.raw_data(),
                                out.raw_data(),
                                dout.raw_data(),
                                lse.raw_data(),
                                &scale_f,
                                &neg_inf,
                                &one,
                                dq.raw_data(),
                                dk.raw_data(),
                                dv.raw_data(),
                                softmax_sum.raw_data(),
                                dq_accum.raw_data()};
  ExecutePlan(CudnnHandle(c.device), plan, uids, ptrs, ws, "causal attention backward (" + plan.description + ")");
  return true;
}

size_t SdpaPlanCacheSize() { return PlanCache().size(); }

}  // namespace octet::cuda
