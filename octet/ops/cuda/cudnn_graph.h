// A thin C++ layer over cuDNN's backend graph API (cudnn_graph.h; the
// cudnn-frontend headers are not available): RAII descriptors, a graph
// builder whose every finalize is checked with the op's name and cuDNN's own
// error text (cudnnGetLastErrorString), heuristics -> execution plan, and
// execution through a variant pack. Graph construction needs no GPU and no
// handle (CUDA_NOTES §5), so tests/cuda/cudnn_graph_test.cc runs it for real;
// engine selection, plans and execution need a device, and a graph that is to
// run must be finalized with the device's handle (NOTE [cudnn graph handle]).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace octet::cuda {

// Throws octet::Error "cuDNN: <context>: <call> failed: <status> (<cuDNN's
// last error text>)" unless st is CUDNN_STATUS_SUCCESS.
void CheckCudnn(cudnnStatus_t st, const char* call, const std::string& context);

// Owns one backend descriptor (destroyed with cudnnBackendDestroyDescriptor).
class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  BackendDescriptor(cudnnBackendDescriptorType_t type, const std::string& what);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept : desc_(other.desc_) { other.desc_ = nullptr; }
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  // cudnnBackendSetAttribute, checked.
  void Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values,
           const std::string& what);
  // One descriptor-valued attribute (CUDNN_TYPE_BACKEND_DESCRIPTOR, count 1).
  void SetDesc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value, const std::string& what) {
    Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
  }
  void Finalize(const std::string& what);

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// What a graph tensor is (kept for error messages and tests).
struct CudnnTensorInfo {
  std::string name;
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  bool is_virtual = false;
  bool by_value = false;
};

class CudnnGraph {
 public:
  // `name` prefixes every error of this graph.
  explicit CudnnGraph(std::string name) : name_(std::move(name)) {}

  // A device tensor with a caller-chosen UID (the variant pack key); returns it.
  int64_t Tensor(const std::string& name, int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims,
                 std::vector<int64_t> strides);
  // An intermediate (never in memory); UIDs from 1000 on.
  int64_t Virtual(const std::string& name, cudnnDataType_t type, std::vector<int64_t> dims,
                  std::vector<int64_t> strides);
  // A float32 scalar passed by value (host pointer in the variant pack),
  // dims and strides {1,1,1,1}.
  int64_t Scalar(const std::string& name, int64_t uid);

  // Operations; inputs/outputs are UIDs returned above.
  void Matmul(const std::string& name, int64_t a, int64_t b, int64_t c);
  // mode with x (and b, t when >= 0) -> y; math precision `prec`; `axis` for GEN_INDEX.
  void Pointwise(const std::string& name, cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void Reduction(const std::string& name, cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  void Reshape(const std::string& name, int64_t x, int64_t y);

  // Finalizes the operation graph for the GPU of `handle` (CudnnHandle(device)).
  // NOTE [cudnn graph handle]: cuDNN 9.19 lets a graph finalize without a
  // handle, but then no engine knows the GPU (smVersion 0 in its log) and every
  // one refuses with NOT_SUPPORTED_ARCH_MISMATCH: measured on an H100
  // (shared/gpu/H100-2026-11-23.md). nullptr is accepted only to check a
  // graph's construction on a machine without a GPU; BuildPlan refuses such a
  // graph when a device exists.
  void Finalize(cudnnHandle_t handle);
  // The handle the graph was finalized with (nullptr: none).
  cudnnHandle_t handle() const { return handle_; }
  bool finalized() const { return finalized_; }
  cudnnBackendDescriptor_t graph() const { return graph_.get(); }
  int op_count() const { return static_cast<int>(ops_.size()); }
  const std::vector<std::string>& op_names() const { return op_names_; }
  const CudnnTensorInfo& info(int64_t uid) const;
  const std::string& name() const { return name_; }
  // CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT of the finalized graph.
  int64_t EngineGlobalCount() const;

 private:
  const BackendDescriptor& Desc(int64_t uid, const std::string& op) const;
  std::string Where(const std::string& op) const { return name_ + " graph, op '" + op + "'"; }
  // Finalizes op and appends it (and the descriptor it points at, if any).
  void AddOperation(const std::string& name, BackendDescriptor op, BackendDescriptor sub, const std::string& what);

  std::string name_;
  std::vector<CudnnTensorInfo> infos_;
  std::vector<BackendDescriptor> tensors_;   // parallel to infos_
  std::vector<BackendDescriptor> op_descs_;  // pointwise/matmul/reduction descriptors
  std::vector<BackendDescriptor> ops_;       // operation descriptors, in graph order
  std::vector<std::string> op_names_;
  BackendDescriptor graph_;
  int64_t next_virtual_uid_ = 1000;
  cudnnHandle_t handle_ = nullptr;
  bool finalized_ = false;
};

// A finalized execution plan and its workspace size.
struct CudnnPlan {
  BackendDescriptor plan;
  int64_t workspace_bytes = 0;
  std::string description;  // which heuristic mode / config index won
};

// Number of engine configs heuristic `mode` offers for the graph.
int64_t HeuristicConfigCount(const CudnnGraph& graph, cudnnBackendHeurMode_t mode);

// Runs the heuristics in `modes` order and finalizes plans from their
// configs until one succeeds. Throws an octet::Error that starts with
// "cuDNN: no engine for <graph>" and lists, per mode, how many configs were
// offered and the last cuDNN error, when none works.
std::unique_ptr<CudnnPlan> BuildPlan(const CudnnGraph& graph, std::initializer_list<cudnnBackendHeurMode_t> modes);

// Executes `plan` with the tensors (uids[i] -> pointers[i]) and workspace.
void ExecutePlan(cudnnHandle_t handle, const CudnnPlan& plan, const std::vector<int64_t>& uids,
                 const std::vector<void*>& pointers, void* workspace, const std::string& what);

}  // namespace octet::cuda
