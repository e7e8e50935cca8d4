#include <octet/distributed/cuda/nccl_group.h>

#include <absl/strings/str_cat.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <thread>
#include <vector>

#include <octet/core/error.h>
#include <octet/core/scaling.h>
#include <octet/core/scaling_math.h>
#include <octet/distributed/cuda/nccl_bootstrap.h>
#include <octet/ops/cast.h>
#include <octet/ops/cuda/cuda_check.h>
#include <octet/ops/cuda/device_context.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>

namespace octet::dist {
namespace internal {

ncclDataType_t NcclMoveType(DType dt) {
  const int t = Info(dt).nccl_type;
  OCTET_CHECK(t >= 0, "NcclProcessGroup: NCCL cannot move ", Name(dt), " tensors");
  return static_cast<ncclDataType_t>(t);
}

ncclRedOp_t NcclReduceOp(ReduceOp op, DType dt) {
  OCTET_CHECK(dt == DType::kFloat32, "NcclProcessGroup: NCCL reduces only float32 here (", Name(dt),
              " sums run in FP32: NOTE [nccl fp8])");
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  OCTET_FAIL("NcclProcessGroup: unknown reduce op");
}

}  // namespace internal

namespace {

static_assert(static_cast<int>(ncclFloat8e4m3) == 10 && static_cast<int>(ncclFloat8e5m2) == 11,
              "core/dtype.cc's NCCL ids must match nccl.h");

void CheckCuda(const char* op, const Tensor& t, int device) {
  OCTET_CHECK(t.defined() && t.device().type == DeviceType::kCUDA && t.device().index == device,
              "NcclProcessGroup::", op, ": ", t.defined() ? Describe(t) : std::string("undefined tensor"),
              " is not on cuda:", device);
  OCTET_CHECK(t.is_contiguous(), "NcclProcessGroup::", op, ": ", Describe(t), " must be contiguous");
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, ncclComm_t comm, const NcclGroupOptions& options)
      : ProcessGroup(rank, size), comm_(comm), options_(options) {}
  ~NcclProcessGroup() override {
    StopWorker();
    if (comm_ != nullptr) {
      if (aborted_) return;
      ncclCommDestroy(comm_);
    }
  }
  std::string backend() const override { return "nccl"; }

  WorkPtr AllReduce(const Tensor& t, ReduceOp op) override {
    CheckCuda("AllReduce", t, options_.device);
    return Enqueue(std::string("AllReduce(") + Name(op) + ", " + Describe(t) + ")", [this, t, op] {
      if (t.dtype() == DType::kFloat32) {
        Run([&](cudaStream_t s) {
          return ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), ncclFloat32, internal::NcclReduceOp(op, t.dtype()),
                               comm_, s);
        });
        CountSent(2 * (size() - 1) * static_cast<int64_t>(t.nbytes()) / size());
      } else if (t.dtype() == DType::kBFloat16) {
        Tensor wide = t.To(DType::kFloat32);  // NOTE [nccl fp8]: sum in FP32, round once
        Run([&](cudaStream_t s) {
          return ncclAllReduce(wide.raw_data(), wide.raw_data(), wide.numel(), ncclFloat32,
                               internal::NcclReduceOp(op, DType::kFloat32), comm_, s);
        });
        Tensor(t).CopyFrom_(wide);
      } else {
        OCTET_CHECK(IsFp8(t.dtype()), "NcclProcessGroup::AllReduce: cannot reduce ", Describe(t));
        Fp8AllReduce(t, op);
      }
    });
  }

  WorkPtr AllGather(const Tensor& in, const Tensor& out) override {
    CheckCuda("AllGather", in, options_.device);
    CheckCuda("AllGather", out, options_.device);
    OCTET_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * size(), "NcclProcessGroup::AllGather: ",
                Describe(in), " -> ", Describe(out));
    return Enqueue("AllGather(" + Describe(in) + ")", [this, in, out] {
      Run([&](cudaStream_t s) {
        return ncclAllGather(in.raw_data(), out.raw_data(), in.numel(), internal::NcclMoveType(in.dtype()), comm_, s);
      });
      if (IsFp8(in.dtype())) out.impl()->set_scale_meta(in.scale_meta_ptr());
      CountSent((size() - 1) * static_cast<int64_t>(in.nbytes()));
    });
  }

  WorkPtr Broadcast(const Tensor& t, int root) override {
    CheckCuda("Broadcast", t, options_.device);
    return Enqueue("Broadcast(" + Describe(t) + ")", [this, t, root] {
      Run([&](cudaStream_t s) {
        return ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), internal::NcclMoveType(t.dtype()), root, comm_, s);
      });
      if (IsFp8(t.dtype()) && t.scale_meta() != nullptr) {
        Tensor scale = t.scale_meta()->scale.Clone();
        Run([&](cudaStream_t s) {
          return ncclBroadcast(scale.raw_data(), scale.raw_data(), 1, ncclFloat32, root, comm_, s);
        });
        if (rank() != root) t.impl()->set_scale_meta(MakePerTensorScale(static_cast<float>(scale.Item()), 0.0f, t.device()));
      }
    });
  }

  WorkPtr AllToAll(const Tensor& in, const Tensor& out) override {
    CheckCuda("AllToAll", in, options_.device);
    CheckCuda("AllToAll", out, options_.device);
    OCTET_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() && in.numel() % size() == 0,
                "NcclProcessGroup::AllToAll: ", Describe(in), " -> ", Describe(out));
    return Enqueue("AllToAll(" + Describe(in) + ")", [this, in, out] {
      const int64_t k = in.numel() / size();
      const size_t esize = SizeOf(in.dtype());
      const ncclDataType_t type = internal::NcclMoveType(in.dtype());
      Run([&](cudaStream_t s) {
        ncclResult_t r = ncclGroupStart();
        for (int peer = 0; peer < size() && r == ncclSuccess; ++peer) {
          r = ncclSend(static_cast<const char*>(in.raw_data()) + peer * k * esize, k, type, peer, comm_, s);
          if (r == ncclSuccess) r = ncclRecv(static_cast<char*>(out.raw_data()) + peer * k * esize, k, type, peer, comm_, s);
        }
        const ncclResult_t end = ncclGroupEnd();
        return r != ncclSuccess ? r : end;
      });
      if (IsFp8(in.dtype())) out.impl()->set_scale_meta(in.scale_meta_ptr());
      CountSent((size() - 1) * k * static_cast<int64_t>(esize));
    });
  }

  WorkPtr ReduceScatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    CheckCuda("ReduceScatter", in, options_.device);
    CheckCuda("ReduceScatter", out, options_.device);
    OCTET_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * size(), "NcclProcessGroup::ReduceScatter: ",
                Describe(in), " -> ", Describe(out));
    return Enqueue("ReduceScatter(" + Describe(in) + ")", [this, in, out, op] {
      Tensor wide_in = in.dtype() == DType::kFloat32 ? in : in.To(DType::kFloat32);  // FP8: dequantized
      Tensor wide_out = out.dtype() == DType::kFloat32 ? out : Empty(out.shape(), {.device = out.device()});
      Run([&](cudaStream_t s) {
        return ncclReduceScatter(wide_in.raw_data(), wide_out.raw_data(), wide_out.numel(), ncclFloat32,
                                 internal::NcclReduceOp(op, DType::kFloat32), comm_, s);
      });
      if (IsFp8(out.dtype())) {
        // A deliberate host read: the output's current scale.
        const float amax = static_cast<float>(Amax(wide_out).Item());
        const float scale = ComputeScale(amax, static_cast<float>(Info(out.dtype()).max_finite), 0, 1.0f, false);
        Tensor q = Quantize(wide_out, out.dtype(), scale);
        out.WithScaleMeta(nullptr).CopyFrom_(q.WithScaleMeta(nullptr));  // codes; the scale follows
        out.impl()->set_scale_meta(q.scale_meta_ptr());
      } else if (out.dtype() != DType::kFloat32) {
        Tensor(out).CopyFrom_(wide_out);
      }
    });
  }

  WorkPtr Barrier() override {
    return Enqueue("Barrier", [this] {
      Tensor one = Ones({1}, {.device = Device{DeviceType::kCUDA, options_.device}});
      Run([&](cudaStream_t s) { return ncclAllReduce(one.raw_data(), one.raw_data(), 1, ncclFloat32, ncclSum, comm_, s); });
    });
  }

 protected:
  // Host byte primitives (the base class's CPU-tensor collectives): staged
  // through device buffers.
  void AllToAllBytes(const void* in, void* out, size_t chunk) override {
    Tensor din = Staged(in, chunk * size()), dout = Empty({static_cast<int64_t>(chunk * size())}, DevBytes());
    AllToAll(din, dout)->Wait();
    Unstage(dout, out);
  }
  void AllGatherBytes(const void* in, void* out, size_t chunk) override {
    Tensor din = Staged(in, chunk), dout = Empty({static_cast<int64_t>(chunk * size())}, DevBytes());
    Run([&](cudaStream_t s) { return ncclAllGather(din.raw_data(), dout.raw_data(), chunk, ncclUint8, comm_, s); });
    Unstage(dout, out);
  }
  void BroadcastBytes(void* buf, size_t n, int root) override {
    Tensor d = Staged(buf, n);
    Run([&](cudaStream_t s) { return ncclBroadcast(d.raw_data(), d.raw_data(), n, ncclUint8, root, comm_, s); });
    Unstage(d, buf);
  }
  void BarrierNow() override {
    Tensor one = Ones({1}, {.device = Device{DeviceType::kCUDA, options_.device}});
    Run([&](cudaStream_t s) { return ncclAllReduce(one.raw_data(), one.raw_data(), 1, ncclFloat32, ncclSum, comm_, s); });
  }

 private:
  TensorOptions DevBytes() const { return {.dtype = DType::kUInt8, .device = Device{DeviceType::kCUDA, options_.device}}; }
  Tensor Staged(const void* host, size_t n) {
    Tensor h = FromBlob(const_cast<void*>(host), {static_cast<int64_t>(n)}, DType::kUInt8);
    return h.To(Device{DeviceType::kCUDA, options_.device});
  }
  void Unstage(const Tensor& dev, void* host) {
    Tensor h = dev.To(kCPU);
    std::memcpy(host, h.raw_data(), h.nbytes());
  }

  // NOTE [nccl fp8]: gather every rank's FP8 bytes and scale_inv, sum in FP32.
  void Fp8AllReduce(const Tensor& t, ReduceOp op) {
    const Device dev = t.device();
    Tensor gathered = Empty({size() * t.numel()}, {.dtype = DType::kUInt8, .device = dev});
    Run([&](cudaStream_t s) {
      return ncclAllGather(t.raw_data(), gathered.raw_data(), t.numel(), internal::NcclMoveType(t.dtype()), comm_, s);
    });
    Tensor inv = Full({1}, ScaleInvValue(t), {.device = dev});
    Tensor invs = Empty({size()}, {.device = dev});
    Run([&](cudaStream_t s) { return ncclAllGather(inv.raw_data(), invs.raw_data(), 1, ncclFloat32, comm_, s); });
    const std::vector<float> host_invs = invs.ToFloats();  // a deliberate host read of N floats
    Tensor acc;
    for (int r = 0; r < size(); ++r) {
      Tensor slice = gathered.Narrow(0, r * t.numel(), t.numel()).View(t.shape());
      Tensor as_fp8(std::make_shared<TensorImpl>(slice.storage(), t.shape(), t.strides(), slice.offset(), t.dtype()));
      Tensor x = Dequantize(as_fp8.WithScaleMeta(MakePerTensorScale(1.0f / host_invs[r], 0.0f, dev)));
      acc = !acc.defined() ? x : op == ReduceOp::kSum ? Add(acc, x) : op == ReduceOp::kMax ? Maximum(acc, x) : Minimum(acc, x);
    }
    const float amax = static_cast<float>(Amax(acc).Item());  // a deliberate host read
    const float scale = ComputeScale(amax, static_cast<float>(Info(t.dtype()).max_finite), 0, 1.0f, false);
    Tensor q = Quantize(acc, t.dtype(), scale);
    t.WithScaleMeta(nullptr).CopyFrom_(q.WithScaleMeta(nullptr));  // codes; the scale follows
    t.impl()->set_scale_meta(q.scale_meta_ptr());
    CountSent((size() - 1) * static_cast<int64_t>(t.nbytes() + 4));
  }

  // Enqueues `issue` on the device's current stream and waits for it with
  // the watchdog (see the header).
  template <typename Issue>
  void Run(Issue&& issue) {
    OCTET_CHECK(!aborted_, "NcclProcessGroup: the communicator was aborted after an earlier failure");
    cuda::DeviceGuard guard(options_.device);
    cudaStream_t stream = cuda::CurrentStream(options_.device);
    const ncclResult_t r = issue(stream);
    if (r != ncclSuccess && r != ncclInProgress) Abort(absl::StrCat("NCCL call failed: ", ncclGetErrorString(r)));
    cudaEvent_t done;
    OCTET_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    OCTET_CUDA_CHECK(cudaEventRecord(done, stream));
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (true) {
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        cudaEventDestroy(done);
        Abort(absl::StrCat("CUDA error while waiting: ", cudaGetErrorString(q)));
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        cudaEventDestroy(done);
        Abort(absl::StrCat("NCCL reported ", ncclGetErrorString(async), ": ", ncclGetLastError(comm_),
                           " (a peer died or its connection broke)"));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        cudaEventDestroy(done);
        Abort(absl::StrCat("no progress within ", options_.timeout.count(), " ms (a peer is dead or stuck)"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    cudaEventDestroy(done);
  }

  [[noreturn]] void Abort(const std::string& why) {
    if (!aborted_) {
      ncclCommAbort(comm_);  // never ncclCommDestroy here: it can hang on a dead peer
      aborted_ = true;
    }
    throw std::runtime_error(why + "; the NCCL communicator was aborted");
  }

  ncclComm_t comm_;
  NcclGroupOptions options_;
  bool aborted_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(Store& store, int rank, int size,
                                                                     const NcclGroupOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL group: rank ", rank, " is not in [0, ", size, ")"));
  }
  if (!cuda::IsAvailable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL group: no CUDA device on this machine (", cuda::UnavailableReason(), ")"));
  }
  absl::StatusOr<ncclComm_t> comm = BootstrapNcclComm(
      store, options.key, rank, size, NcclCommOptions{.device = options.device, .timeout = options.timeout, .name = "octet"});
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<ProcessGroup>(new NcclProcessGroup(rank, size, *comm, options));
}

}  // namespace octet::dist
