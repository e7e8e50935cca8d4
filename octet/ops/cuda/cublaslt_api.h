// cuBLASLt, loaded on first use (NOTE [lazy cuBLASLt]). The CUDA backend
// calls every cuBLASLt function through Lt(): `Lt().Matmul(handle, ...)`.
// Host code only; private to the library (not installed).
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <string>
#include <vector>

namespace octet::cuda {

// NOTE [lazy cuBLASLt]: octet does not link libcublasLt. Merely loading it
// costs about 150 MB of resident memory (measured: a process's RSS went from
// 1.8 MB to 153 MB on dlopen of libcublasLt.so.13; libcudart, libcudnn and
// libnccl add about 1 MB each), so a CPU-only run of a CUDA-enabled build paid
// for it for nothing (train_gpt on the CPU: 274 MB peak RSS against 127 MB for
// a CPU-only build). Instead the library is dlopen'ed the first time Lt() is
// called, which only the CUDA GEMM (its handle and descriptors) and version
// queries do; nothing calls Lt() at static-initialisation time or on a CPU
// path. <cublasLt.h> is still included, for the types and to type the
// function pointers, so a signature change in the headers is a compile error.
//
// The file is libcublasLt.so.<CUBLAS_VER_MAJOR of the headers>, searched in
// this order (CublasLtCandidates):
//   1. the plain soname: LD_LIBRARY_PATH, the RUNPATH of liboctet (the object
//      that calls dlopen), ld.so.cache, the default directories;
//   2. the directory of the libcudart this process has loaded (the toolkit
//      ships cuBLASLt beside it; found with dladdr on cudaGetDeviceCount);
//   3. the toolkit's library directory CMake found at configure time.
// The library must have the headers' major version: another major is another
// ABI (checked with cublasLtGetVersion before any other call).

// The cuBLASLt functions octet uses. Each member is named after the function
// without its `cublasLt` prefix and has its exact type.
struct CublasLtApi {
  decltype(&::cublasLtCreate) Create = nullptr;
  decltype(&::cublasLtDestroy) Destroy = nullptr;
  decltype(&::cublasLtGetVersion) GetVersion = nullptr;
  decltype(&::cublasLtGetStatusName) GetStatusName = nullptr;
  decltype(&::cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&::cublasLtMatmul) Matmul = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatmulDescGetAttribute) MatmulDescGetAttribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceGetAttribute) MatmulPreferenceGetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutGetAttribute) MatrixLayoutGetAttribute = nullptr;

  std::string path;  // the file loaded (dladdr's name for it, else the candidate)
  size_t version = 0;  // GetVersion() of the loaded library
};

// The process's cuBLASLt: loaded by the first call (thread-safe; a failed load
// throws octet::Error and the next call tries again), never unloaded.
const CublasLtApi& Lt();

// The file names Lt() tries, in order (NOTE [lazy cuBLASLt]).
std::vector<std::string> CublasLtCandidates();

// dlopen's the first of `candidates` that loads, resolves every function of
// CublasLtApi and checks the version. Throws octet::Error naming the library,
// every candidate tried with dlerror()'s text, or the missing symbol, or the
// version. Lt() is LoadCublasLt(CublasLtCandidates()), once; tests pass their
// own lists. The handle is never closed.
CublasLtApi LoadCublasLt(const std::vector<std::string>& candidates);

// Throws octet::Error unless `version` (cublasLtGetVersion's major*10000 +
// minor*100 + patch) has the major version `header_major`; `path` names the
// library in the message.
void CheckCublasLtVersion(size_t version, int header_major, const std::string& path);

}  // namespace octet::cuda
