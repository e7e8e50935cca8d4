// octet-device-info: what the CUDA backend sees on this machine — the CUDA
// devices, their compute capability and FP8 GEMM paths (NOTE [fp8
// capabilities]), and the versions of the CUDA runtime, driver, cuBLASLt,
// cuDNN and NCCL. Without a GPU (or without a CUDA build) it says so and
// exits 0; it exits 1 only when a query that should work fails. It also
// prints the CPU GEMM path for BF16/FP8 operands (NOTE [CPU GEMM path] in
// ops/cpu_gemm_path.h) with the two rates it was chosen from, whether the
// CPU cache is on, and how bf16 GELU is evaluated (NOTE [bf16 gelu tables]
// in ops/cpu_gelu_path.h).
#include <cstdio>
#include <exception>
#include <string>

#include <octet/core/allocator.h>
#include <octet/core/version.h>
#include <octet/ops/cpu_gelu_path.h>
#include <octet/ops/cpu_gemm_path.h>
#include <octet/ops/cuda/fp8_capabilities.h>

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>
#if OCTET_WITH_CUDNN
#include <cudnn.h>
#endif
#if OCTET_WITH_NCCL
#include <nccl.h>
#endif

#include <octet/core/caching_allocator.h>
#include <octet/core/device.h>
#include <octet/ops/cuda/cublaslt_api.h>
#include <octet/ops/cuda/device_context.h>
#endif

namespace {

// "13.1.0" from major*10000 + minor*100 + patch (cuBLASLt, cuDNN 9, NCCL >= 2.9).
[[maybe_unused]] std::string Version10000(long v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// "13.0" from major*1000 + minor*10 (CUDA runtime and driver).
[[maybe_unused]] std::string Version1000(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// The CPU GEMM path (measured at this call unless OCTET_CPU_GEMM forces it).
void PrintCpu() {
  const octet::CpuGemmPathInfo info = octet::GetCpuGemmPath();
  std::printf("CPU GEMM path for bf16/fp8 operands: %s (%s)\n", octet::Name(info.path), info.reason.c_str());
  std::printf("  single-thread peaks: FP32 FMA %.1f GFLOP/s, BF16 dot product %.1f GFLOP/s%s, "
              "AMX BF16 %.1f GFLOP/s%s\n",
              info.fp32_fma_gflops, info.bf16_dot_gflops, info.bf16_dot_gflops == 0.0 ? " (not available)" : "",
              info.amx_bf16_gflops, info.amx_bf16_gflops == 0.0 ? " (not available)" : "");
  std::printf("  override with OCTET_CPU_GEMM=bf16|fp32|auto\n");
  std::printf("  BF16 GEMMs with a packed B and N <= 3K: %s\n",
              octet::ActiveCpuAmxGemm() ? "octet's AMX kernel (OCTET_CPU_AMX_GEMM=0: oneDNN's matmul)"
                                        : "oneDNN's matmul (no AMX, OCTET_CPU_AMX_GEMM=0, or "
                                          "OCTET_DISABLE_AVX512 or OCTET_DISABLE_AVX512_BF16 set to 1)");
  std::printf("CPU f32 GEMMs whose B would be packed: %s\n",
              octet::ActiveCpuF32Sgemm() ? "oneDNN's sgemm (OCTET_CPU_F32_GEMM=sgemm)"
              : octet::CpuF32GemmPacksB()
                  ? "oneDNN's matmul, B packed by octet (OCTET_CPU_F32_GEMM=sgemm: oneDNN's sgemm)"
                  : "oneDNN's matmul, B read as it is: this CPU's oneDNN kernel takes no packed f32 B "
                    "(OCTET_CPU_F32_GEMM=sgemm: oneDNN's sgemm)");
  // Read once a process (NOTE [environment switches] in core/env.h):
  // printing it also reports a bad OCTET_CPU_CACHING.
  std::printf("CPU memory: %s\n", octet::GetCpuMemoryStats().caching_enabled
                                      ? "blocks of 64 KiB or more cached for reuse (OCTET_CPU_CACHING=0: not)"
                                      : "every block from the system and back (OCTET_CPU_CACHING=0)");
  const octet::CpuGeluPathInfo gelu = octet::GetCpuGeluPath();
  std::printf("CPU GELU on bf16: forward %s (%s), backward %s (%s)\n", octet::Name(gelu.path), gelu.reason.c_str(),
              octet::Name(gelu.backward_path), gelu.backward_reason.c_str());
  std::printf("  one thread, ns a value: forward table %.3f, computed %.3f; backward table %.3f, computed %.3f;"
              " override with OCTET_CPU_GELU=table|compute|auto\n",
              gelu.table_ns, gelu.compute_ns, gelu.backward_table_ns, gelu.backward_compute_ns);
}

#if OCTET_WITH_CUDA

int Run() {
  int runtime = 0, driver = 0;
  const cudaError_t rt_err = cudaRuntimeGetVersion(&runtime);
  const cudaError_t drv_err = cudaDriverGetVersion(&driver);
  // Loads cuBLASLt (NOTE [lazy cuBLASLt] in ops/cuda/cublaslt_api.h): the
  // CUDA backend cannot run without it, so failing to load it is an error.
  size_t cublaslt = 0;
  std::string cublaslt_error, cublaslt_path;
  try {
    cublaslt = octet::cuda::Lt().version;
    cublaslt_path = octet::cuda::Lt().path;
  } catch (const std::exception& e) {
    cublaslt_error = e.what();
  }

  std::printf("octet CUDA backend: built\n");
  std::printf("libraries:\n");
  std::printf("  CUDA runtime  %s\n", rt_err == cudaSuccess ? Version1000(runtime).c_str() : cudaGetErrorName(rt_err));
  if (drv_err != cudaSuccess)
    std::printf("  CUDA driver   %s\n", cudaGetErrorName(drv_err));
  else if (driver == 0)
    std::printf("  CUDA driver   none installed\n");
  else
    std::printf("  CUDA driver   %s (supports CUDA up to this version)\n", Version1000(driver).c_str());
  if (cublaslt_error.empty())
    std::printf("  cuBLASLt      %s (%zu), loaded from %s\n", Version10000(static_cast<long>(cublaslt)).c_str(), cublaslt,
                cublaslt_path.c_str());
  else
    std::printf("  cuBLASLt      not loaded: %s\n", cublaslt_error.c_str());
#if OCTET_WITH_CUDNN
  const size_t cudnn = cudnnGetVersion();
  std::printf("  cuDNN         %s (%zu)\n", Version10000(static_cast<long>(cudnn)).c_str(), cudnn);
#else
  std::printf("  cuDNN         not in this build (attention runs the flash kernels or the unfused fallback)\n");
#endif
#if OCTET_WITH_NCCL
  int nccl = 0;
  const ncclResult_t nccl_err = ncclGetVersion(&nccl);
  if (nccl_err == ncclSuccess)
    std::printf("  NCCL          %s (%d)\n", Version10000(nccl).c_str(), nccl);
  else
    std::printf("  NCCL          %s\n", ncclGetErrorString(nccl_err));
#else
  std::printf("  NCCL          not in this build (no NCCL process group)\n");
#endif

  const int n = octet::DeviceCount(octet::DeviceType::kCUDA);
  if (n == 0) {
    std::printf("devices: no CUDA device (%s); octet runs on the CPU only\n",
                octet::DeviceUnavailableReason(octet::DeviceType::kCUDA).c_str());
    return cublaslt_error.empty() ? 0 : 1;
  }
  std::printf("devices: %d\n", n);
  for (int d = 0; d < n; ++d) {
    const octet::cuda::DeviceProps& p = octet::cuda::Props(d);
    const octet::cuda::Fp8GemmCaps caps = octet::cuda::Fp8CapsFor(p.major, p.minor, static_cast<int>(cublaslt));
    std::printf("  cuda:%d  %s  compute capability %d.%d (sm_%d%d)  %d SMs  %s\n", d, p.name.c_str(), p.major,
                p.minor, p.major, p.minor, p.sm_count, octet::FormatBytes(p.total_mem).c_str());
    std::printf("          %s\n", octet::cuda::Describe(caps).c_str());
    if (p.major == 9 && !caps.block_scaling)
      std::printf("          (block scaling needs cuBLASLt >= %s)\n",
                  Version10000(octet::cuda::kCublasLtBlockScalingVersion).c_str());
  }
  return cublaslt_error.empty() ? 0 : 1;
}

#else

int Run() {
  std::printf("octet CUDA backend: not built (configure with -DOCTET_CUDA=ON on a machine with nvcc)\n");
  std::printf("devices: no CUDA device; octet runs on the CPU only\n");
  return 0;
}

#endif

}  // namespace

int main() {
  try {
    std::printf("octet %s\n", octet::LibraryVersionString());
    PrintCpu();
    return Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet-device-info: %s\n", e.what());
    return 1;
  }
}
