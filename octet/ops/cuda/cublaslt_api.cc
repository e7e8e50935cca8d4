// Loading cuBLASLt on first use (NOTE [lazy cuBLASLt] in cublaslt_api.h).
#include <octet/ops/cuda/cublaslt_api.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <sstream>

#include <octet/core/error.h>

// The toolkit's library directory found at configure time (CMakeLists.txt
// passes CUDAToolkit_LIBRARY_DIR for this file only).
#ifndef OCTET_CUDA_TOOLKIT_LIBRARY_DIR
#define OCTET_CUDA_TOOLKIT_LIBRARY_DIR ""
#endif

namespace octet::cuda {
namespace {

std::string Soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "no error text from dlerror()";
}

// Sets *fn to `name` in `handle`; throws (after closing the handle) if it is
// not there.
template <typename Fn>
void Resolve(void* handle, const char* name, const std::string& path, Fn* fn) {
  (void)dlerror();  // clear a stale error
  void* sym = dlsym(handle, name);
  if (sym == nullptr) {
    const std::string err = DlError();
    dlclose(handle);
    OCTET_FAIL("cuBLASLt library ", path, " has no function ", name, " (", err,
               "); the CUDA backend needs the CUDA ", CUBLAS_VER_MAJOR, " toolkit's cuBLASLt (", Soname(), ")");
  }
  *fn = reinterpret_cast<Fn>(sym);
}

}  // namespace

std::vector<std::string> CublasLtCandidates() {
  const std::string soname = Soname();
  std::vector<std::string> out = {soname};
  auto add_dir = [&](const std::string& dir) {
    if (dir.empty()) return;
    std::string path = dir + "/" + soname;
    if (std::find(out.begin(), out.end(), path) == out.end()) out.push_back(std::move(path));
  };
  // cudart is linked, so it is loaded; where it came from, cuBLASLt is too.
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaGetDeviceCount), &info) != 0 && info.dli_fname != nullptr)
    add_dir(Dirname(info.dli_fname));
  add_dir(OCTET_CUDA_TOOLKIT_LIBRARY_DIR);
  return out;
}

void CheckCublasLtVersion(size_t version, int header_major, const std::string& path) {
  const size_t major = version / 10000;
  OCTET_CHECK(major == static_cast<size_t>(header_major), "cuBLASLt library ", path, " is version ", major, ".",
              version / 100 % 100, ".", version % 100, " (cublasLtGetVersion() = ", version, "), but octet was built ",
              "against the CUDA ", header_major, " toolkit's cuBLASLt (headers ", CUBLAS_VER_MAJOR, ".",
              CUBLAS_VER_MINOR, "): another major version has another ABI; put the CUDA ", header_major,
              " toolkit's libcublasLt first on LD_LIBRARY_PATH");
}

CublasLtApi LoadCublasLt(const std::vector<std::string>& candidates) {
  OCTET_CHECK(!candidates.empty(), "LoadCublasLt: no candidate file names");
  void* handle = nullptr;
  std::string path;
  std::ostringstream tried;
  for (const std::string& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      path = c;
      break;
    }
    tried << "\n  " << c << ": " << DlError();
  }
  if (handle == nullptr) {
    OCTET_FAIL("cannot load cuBLASLt (", Soname(), "): the CUDA backend needs the CUDA ", CUBLAS_VER_MAJOR,
               " toolkit's cuBLASLt; install it or put its directory on LD_LIBRARY_PATH. Tried:", tried.str());
  }

  CublasLtApi api;
  Resolve(handle, "cublasLtGetVersion", path, &api.GetVersion);
  // The file the loader found for a bare soname (for messages and reports).
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(api.GetVersion), &info) != 0 && info.dli_fname != nullptr &&
      info.dli_fname[0] != '\0')
    path = info.dli_fname;
  api.path = path;
  api.version = api.GetVersion();
  try {
    CheckCublasLtVersion(api.version, CUBLAS_VER_MAJOR, path);
  } catch (...) {
    dlclose(handle);
    throw;
  }
  Resolve(handle, "cublasLtCreate", path, &api.Create);
  Resolve(handle, "cublasLtDestroy", path, &api.Destroy);
  Resolve(handle, "cublasLtGetStatusName", path, &api.GetStatusName);
  Resolve(handle, "cublasLtGetStatusString", path, &api.GetStatusString);
  Resolve(handle, "cublasLtMatmul", path, &api.Matmul);
  Resolve(handle, "cublasLtMatmulAlgoGetHeuristic", path, &api.MatmulAlgoGetHeuristic);
  Resolve(handle, "cublasLtMatmulDescCreate", path, &api.MatmulDescCreate);
  Resolve(handle, "cublasLtMatmulDescDestroy", path, &api.MatmulDescDestroy);
  Resolve(handle, "cublasLtMatmulDescSetAttribute", path, &api.MatmulDescSetAttribute);
  Resolve(handle, "cublasLtMatmulDescGetAttribute", path, &api.MatmulDescGetAttribute);
  Resolve(handle, "cublasLtMatmulPreferenceCreate", path, &api.MatmulPreferenceCreate);
  Resolve(handle, "cublasLtMatmulPreferenceDestroy", path, &api.MatmulPreferenceDestroy);
  Resolve(handle, "cublasLtMatmulPreferenceSetAttribute", path, &api.MatmulPreferenceSetAttribute);
  Resolve(handle, "cublasLtMatmulPreferenceGetAttribute", path, &api.MatmulPreferenceGetAttribute);
  Resolve(handle, "cublasLtMatrixLayoutCreate", path, &api.MatrixLayoutCreate);
  Resolve(handle, "cublasLtMatrixLayoutDestroy", path, &api.MatrixLayoutDestroy);
  Resolve(handle, "cublasLtMatrixLayoutSetAttribute", path, &api.MatrixLayoutSetAttribute);
  Resolve(handle, "cublasLtMatrixLayoutGetAttribute", path, &api.MatrixLayoutGetAttribute);
  return api;
}

const CublasLtApi& Lt() {
  // A function-local static: initialised once, thread-safely; a throwing
  // initialiser leaves it uninitialised, so the next call tries again. Never
  // destroyed: thread-exit code destroys handles through it.
  static const CublasLtApi* const api = new CublasLtApi(LoadCublasLt(CublasLtCandidates()));
  return *api;
}

}  // namespace octet::cuda
