#include <octet/ops/cuda/cudnn_graph.h>

#include <sstream>

#include <octet/core/error.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>

namespace octet::cuda {

void CheckCudnn(cudnnStatus_t st, const char* call, const std::string& context) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char text[1024] = {0};
  cudnnGetLastErrorString(text, sizeof(text));
  OCTET_FAIL("cuDNN: ", context, ": ", call, " failed: ", cudnnGetErrorString(st), " (",
             text[0] != '\0' ? text : "no further text from cuDNN", ")");
}

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type, const std::string& what) {
  CheckCudnn(cudnnBackendCreateDescriptor(type, &desc_), "cudnnBackendCreateDescriptor", what);
}

BackendDescriptor::~BackendDescriptor() {
  // Destroying a descriptor we created cannot fail in a way we could report here.
  if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
    desc_ = other.desc_;
    other.desc_ = nullptr;
  }
  return *this;
}

void BackendDescriptor::Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                            const void* values, const std::string& what) {
  CheckCudnn(cudnnBackendSetAttribute(desc_, name, type, count, values), "cudnnBackendSetAttribute", what);
}

void BackendDescriptor::Finalize(const std::string& what) {
  CheckCudnn(cudnnBackendFinalize(desc_), "cudnnBackendFinalize", what);
}

namespace {

std::string DimsStr(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << "]";
  return os.str();
}

const char* TypeName(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT:
      return "float32";
    case CUDNN_DATA_HALF:
      return "float16";
    case CUDNN_DATA_BFLOAT16:
      return "bfloat16";
    case CUDNN_DATA_INT32:
      return "int32";
    case CUDNN_DATA_BOOLEAN:
      return "bool";
    default:
      return "other";
  }
}

}  // namespace

int64_t CudnnGraph::Tensor(const std::string& name, int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims,
                           std::vector<int64_t> strides) {
  OCTET_CHECK(uid > 0 && uid < 1000, name_, " graph: tensor '", name, "' needs a UID in [1, 1000), got ", uid);
  for (const CudnnTensorInfo& i : infos_) {
    OCTET_CHECK(i.uid != uid, name_, " graph: tensor '", name, "' reuses UID ", uid, " of '", i.name, "'");
  }
  CudnnTensorInfo info{name, uid, type, std::move(dims), std::move(strides), false, false};
  const std::string what = name_ + " graph, tensor '" + name + "' " + DimsStr(info.dims) + " strides " +
                           DimsStr(info.strides) + " " + TypeName(type);
  OCTET_CHECK(info.dims.size() == info.strides.size(), what, ": dims and strides differ in rank");
  BackendDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
  const int64_t alignment = 16;
  d.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &info.type, what);
  d.Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(info.dims.size()), info.dims.data(), what);
  d.Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(info.strides.size()), info.strides.data(),
        what);
  d.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &info.uid, what);
  d.Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
  d.Finalize(what);
  infos_.push_back(std::move(info));
  tensors_.push_back(std::move(d));
  return uid;
}

int64_t CudnnGraph::Virtual(const std::string& name, cudnnDataType_t type, std::vector<int64_t> dims,
                            std::vector<int64_t> strides) {
  CudnnTensorInfo info{name, next_virtual_uid_++, type, std::move(dims), std::move(strides), true, false};
  const std::string what = name_ + " graph, virtual tensor '" + name + "' " + DimsStr(info.dims) + " " + TypeName(type);
  OCTET_CHECK(info.dims.size() == info.strides.size(), what, ": dims and strides differ in rank");
  BackendDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
  const int64_t alignment = 16;
  const bool is_virtual = true;
  d.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &info.type, what);
  d.Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(info.dims.size()), info.dims.data(), what);
  d.Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(info.strides.size()), info.strides.data(),
        what);
  d.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &info.uid, what);
  d.Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
  d.Set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
  d.Finalize(what);
  const int64_t uid = info.uid;
  infos_.push_back(std::move(info));
  tensors_.push_back(std::move(d));
  return uid;
}

int64_t CudnnGraph::Scalar(const std::string& name, int64_t uid) {
  OCTET_CHECK(uid > 0 && uid < 1000, name_, " graph: scalar '", name, "' needs a UID in [1, 1000), got ", uid);
  CudnnTensorInfo info{name, uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true};
  const std::string what = name_ + " graph, scalar '" + name + "'";
  BackendDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
  const int64_t alignment = 16;
  const bool by_value = true;
  d.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &info.type, what);
  d.Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, info.dims.data(), what);
  d.Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, info.strides.data(), what);
  d.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &info.uid, what);
  d.Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
  d.Set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
  d.Finalize(what);
  infos_.push_back(std::move(info));
  tensors_.push_back(std::move(d));
  return uid;
}

const CudnnTensorInfo& CudnnGraph::info(int64_t uid) const {
  for (const CudnnTensorInfo& i : infos_) {
    if (i.uid == uid) return i;
  }
  OCTET_FAIL(name_, " graph: no tensor with UID ", uid);
}

const BackendDescriptor& CudnnGraph::Desc(int64_t uid, const std::string& op) const {
  for (size_t i = 0; i < infos_.size(); ++i) {
    if (infos_[i].uid == uid) return tensors_[i];
  }
  OCTET_FAIL(Where(op), ": no tensor with UID ", uid);
}

void CudnnGraph::Matmul(const std::string& name, int64_t a, int64_t b, int64_t c) {
  OCTET_CHECK(!finalized_, Where(name), ": the graph is already finalized");
  const std::string what = Where(name) + " (matmul " + info(a).name + DimsStr(info(a).dims) + " x " + info(b).name +
                           DimsStr(info(b).dims) + " -> " + info(c).name + DimsStr(info(c).dims) + ")";
  BackendDescriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  mm.Set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
  mm.Finalize(what);
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
  cudnnBackendDescriptor_t da = Desc(a, name).get(), db = Desc(b, name).get(), dc = Desc(c, name).get(), dm = mm.get();
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, da, what);
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, db, what);
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, dc, what);
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_DESC, dm, what);
  AddOperation(name, std::move(op), std::move(mm), what);
}

void CudnnGraph::Pointwise(const std::string& name, cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t,
                           int64_t y, cudnnDataType_t prec, int64_t axis) {
  OCTET_CHECK(!finalized_, Where(name), ": the graph is already finalized");
  std::string what = Where(name) + " (pointwise mode " + std::to_string(static_cast<int>(mode)) + " " + info(x).name +
                     DimsStr(info(x).dims);
  if (b >= 0) what += ", " + info(b).name + DimsStr(info(b).dims);
  if (t >= 0) what += ", cond " + info(t).name;
  what += " -> " + info(y).name + DimsStr(info(y).dims) + ")";
  BackendDescriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
  pw.Set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
  pw.Set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
  if (axis >= 0) pw.Set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
  pw.Finalize(what);
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
  cudnnBackendDescriptor_t dpw = pw.get(), dx = Desc(x, name).get(), dy = Desc(y, name).get();
  op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, dpw, what);
  op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, dx, what);
  if (b >= 0) {
    cudnnBackendDescriptor_t db = Desc(b, name).get();
    op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, db, what);
  }
  if (t >= 0) {
    cudnnBackendDescriptor_t dt = Desc(t, name).get();
    op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, dt, what);
  }
  op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, dy, what);
  AddOperation(name, std::move(op), std::move(pw), what);
}

void CudnnGraph::Reduction(const std::string& name, cudnnReduceTensorOp_t reduce_op, int64_t x, int64_t y) {
  OCTET_CHECK(!finalized_, Where(name), ": the graph is already finalized");
  const std::string what = Where(name) + " (reduction " + info(x).name + DimsStr(info(x).dims) + " -> " + info(y).name +
                           DimsStr(info(y).dims) + ")";
  BackendDescriptor red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  red.Set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce_op, what);
  red.Set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
  red.Finalize(what);
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
  cudnnBackendDescriptor_t dr = red.get(), dx = Desc(x, name).get(), dy = Desc(y, name).get();
  op.SetDesc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, dx, what);
  op.SetDesc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, dy, what);
  op.SetDesc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, dr, what);
  AddOperation(name, std::move(op), std::move(red), what);
}

void CudnnGraph::Reshape(const std::string& name, int64_t x, int64_t y) {
  OCTET_CHECK(!finalized_, Where(name), ": the graph is already finalized");
  const std::string what = Where(name) + " (reshape " + info(x).name + DimsStr(info(x).dims) + " -> " + info(y).name +
                           DimsStr(info(y).dims) + ")";
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
  cudnnBackendDescriptor_t dx = Desc(x, name).get(), dy = Desc(y, name).get();
  op.SetDesc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, dx, what);
  op.SetDesc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, dy, what);
  AddOperation(name, std::move(op), BackendDescriptor(), what);
}

void CudnnGraph::AddOperation(const std::string& name, BackendDescriptor op, BackendDescriptor sub,
                              const std::string& what) {
  op.Finalize(what);
  if (sub.get() != nullptr) op_descs_.push_back(std::move(sub));
  ops_.push_back(std::move(op));
  op_names_.push_back(name);
}

void CudnnGraph::Finalize(cudnnHandle_t handle) {
  OCTET_CHECK(!finalized_, name_, " graph: already finalized");
  OCTET_CHECK(!ops_.empty(), name_, " graph: no operations");
  const std::string what = name_ + " graph (" + std::to_string(ops_.size()) + " ops)";
  std::vector<cudnnBackendDescriptor_t> ops;
  ops.reserve(ops_.size());
  for (const BackendDescriptor& op : ops_) ops.push_back(op.get());
  graph_ = BackendDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what);
  graph_.Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data(),
             what);
  if (handle != nullptr) {
    // Deprecated in the header since 9.8, yet required by 9.19's engines (NOTE [cudnn graph handle]).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    graph_.Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, what);
#pragma GCC diagnostic pop
  }
  graph_.Finalize(what);
  handle_ = handle;
  finalized_ = true;
}

int64_t CudnnGraph::EngineGlobalCount() const {
  OCTET_CHECK(finalized_, name_, " graph: not finalized");
  int64_t count = 0, returned = 0;
  CheckCudnn(cudnnBackendGetAttribute(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1,
                                      &returned, &count),
             "cudnnBackendGetAttribute(ENGINE_GLOBAL_COUNT)", name_ + " graph");
  return count;
}

namespace {

const char* HeurName(cudnnBackendHeurMode_t mode) {
  switch (mode) {
    case CUDNN_HEUR_MODE_INSTANT:
      return "INSTANT";
    case CUDNN_HEUR_MODE_B:
      return "B";
    case CUDNN_HEUR_MODE_FALLBACK:
      return "FALLBACK";
    case CUDNN_HEUR_MODE_A:
      return "A";
    default:
      return "?";
  }
}

BackendDescriptor MakeHeuristics(const CudnnGraph& g, cudnnBackendHeurMode_t mode, const std::string& what) {
  OCTET_CHECK(g.finalized(), what, ": the graph is not finalized");
  BackendDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what);
  cudnnBackendDescriptor_t graph = g.graph();
  heur.SetDesc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, what);
  heur.Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, what);
  heur.Finalize(what);
  return heur;
}

int64_t ConfigCount(const BackendDescriptor& heur, const std::string& what) {
  int64_t n = 0;
  CheckCudnn(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                      nullptr),
             "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)", what);
  return n;
}

}  // namespace

int64_t HeuristicConfigCount(const CudnnGraph& graph, cudnnBackendHeurMode_t mode) {
  const std::string what = graph.name() + " graph, heuristics mode " + HeurName(mode);
  return ConfigCount(MakeHeuristics(graph, mode, what), what);
}

std::unique_ptr<CudnnPlan> BuildPlan(const CudnnGraph& graph, std::initializer_list<cudnnBackendHeurMode_t> modes) {
  // Without a device no engine exists anyway (the host tests rely on that);
  // with one, a handle-less graph would make every engine refuse and look
  // like "cuDNN cannot do this" instead of the bug it is.
  OCTET_CHECK(graph.handle() != nullptr || DeviceCount() == 0, "cuDNN: the ", graph.name(),
              " graph was finalized without a cuDNN handle, so no engine can know which GPU it is for; finalize it "
              "with CudnnHandle(device) (NOTE [cudnn graph handle])");
  std::ostringstream tried;
  for (cudnnBackendHeurMode_t mode : modes) {
    const std::string what = graph.name() + " graph, heuristics mode " + HeurName(mode);
    BackendDescriptor heur = MakeHeuristics(graph, mode, what);
    const int64_t n = ConfigCount(heur, what);
    tried << " mode " << HeurName(mode) << ": " << n << " config" << (n == 1 ? "" : "s");
    if (n == 0) {
      tried << ";";
      continue;
    }
    std::vector<BackendDescriptor> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < n; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what);
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    CheckCudnn(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n,
                                        &got, raw.data()),
               "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)", what);
    std::string last_error = got == 0 ? "cuDNN returned none of them" : "";
    for (int64_t i = 0; i < got; ++i) {
      auto plan = std::make_unique<CudnnPlan>();
      plan->plan = BackendDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, what);
      cudnnBackendDescriptor_t cfg = raw[i];
      cudnnStatus_t st = cudnnBackendSetAttribute(plan->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
      if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(plan->plan.get());
      if (st != CUDNN_STATUS_SUCCESS) {
        char text[512] = {0};
        cudnnGetLastErrorString(text, sizeof(text));
        last_error = "config " + std::to_string(i) + ": " + cudnnGetErrorString(st) +
                     (text[0] ? std::string(" (") + text + ")" : "");
        continue;
      }
      int64_t returned = 0;
      CheckCudnn(cudnnBackendGetAttribute(plan->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                          1, &returned, &plan->workspace_bytes),
                 "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)", what);
      plan->description = std::string("heuristics mode ") + HeurName(mode) + ", config " + std::to_string(i) + " of " +
                          std::to_string(got);
      return plan;
    }
    tried << ", none finalized (last: " << last_error << ");";
  }
  OCTET_FAIL("cuDNN: no engine for the ", graph.name(), " graph (", graph.op_count(), " ops):", tried.str(),
             " a fused attention engine needs a supported GPU (e.g. sm_80/sm_90) and cuDNN >= 9");
}

void ExecutePlan(cudnnHandle_t handle, const CudnnPlan& plan, const std::vector<int64_t>& uids,
                 const std::vector<void*>& pointers, void* workspace, const std::string& what) {
  OCTET_CHECK(uids.size() == pointers.size(), what, ": ", uids.size(), " UIDs but ", pointers.size(), " pointers");
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what);
  pack.Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data(), what);
  pack.Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
           pointers.data(), what);
  pack.Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, what);
  pack.Finalize(what);
  CheckCudnn(cudnnBackendExecute(handle, plan.plan.get(), pack.get()), "cudnnBackendExecute", what);
  OCTET_CUDA_SYNC_CHECK_AFTER("cudnnBackendExecute (" + what + ")");
}

}  // namespace octet::cuda
