// An LD_PRELOAD library that times every OpenMP parallel region a program
// opens, by the function the region runs: where a CPU training step spends
// its time, kernel by kernel, including oneDNN's JIT GEMMs, which perf can
// only show as anonymous code. Run through scripts/omp_regions.sh, which
// resolves the functions to names and prints a table.
//
// It wraps GOMP_parallel, the entry point GCC compiles `#pragma omp
// parallel` to (octet's ParallelFor and Debian's oneDNN both use it); a
// region is charged to its outlined function (one per parallel construct:
// per kernel and template instance in octet). Time is wall time from the
// fork to the join, as the calling thread sees it. A region opened inside
// another one (inactive, one thread) is counted too, and its time is also
// in the outer region's, so the total counts it twice (octet's kernels
// open none: ParallelFor runs inline inside a region). At exit each
// function's line goes to $OCTET_OMP_REGIONS_OUT (default: stderr):
//   seconds <TAB> calls <TAB> object file <TAB> offset in it (hex) <TAB> its exported name or -
// then one line "total <TAB> seconds <TAB> calls <TAB> process wall seconds".
// A library stripped of its local symbols (Debian's oneDNN) shows as
// object+offset: one line per parallel construct of it.
//
// With OCTET_OMP_REGIONS_GAPS=1 a region is charged instead the time its
// calling thread spent since its previous region ended (nothing for the
// thread's first region): the serial work before each region, i.e. what
// runs on one thread while the others wait (autograd, allocation, operator
// set-up, kernels too small for a region). The total line then sums the
// gaps.
#include <dlfcn.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace {

using RegionFn = void (*)(void*);
using GompParallel = void (*)(RegionFn, void*, unsigned, unsigned);

struct Entry {
  double seconds = 0.0;
  int64_t calls = 0;
};

struct Table {
  std::mutex mu;
  std::unordered_map<uintptr_t, Entry> by_fn;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void Dump() {
    std::lock_guard<std::mutex> lock(mu);
    const char* path = std::getenv("OCTET_OMP_REGIONS_OUT");
    FILE* f = path != nullptr && path[0] != '\0' ? std::fopen(path, "w") : stderr;
    if (f == nullptr) {
      std::fprintf(stderr, "omp_regions: cannot write %s\n", path);
      return;
    }
    double total = 0.0;
    int64_t calls = 0;
    for (const auto& [fn, e] : by_fn) {
      Dl_info info{};
      const bool found = dladdr(reinterpret_cast<void*>(fn), &info) != 0 && info.dli_fname != nullptr;
      const uintptr_t base = found ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
      // dladdr names the nearest exported symbol below fn; only an exact
      // match is fn's own name (outlined region functions are local).
      const bool named = found && info.dli_sname != nullptr && reinterpret_cast<uintptr_t>(info.dli_saddr) == fn;
      std::fprintf(f, "%.6f\t%" PRId64 "\t%s\t%" PRIxPTR "\t%s\n", e.seconds, e.calls, found ? info.dli_fname : "?",
                   fn - base, named ? info.dli_sname : "-");
      total += e.seconds;
      calls += e.calls;
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(f, "total\t%.6f\t%" PRId64 "\t%.6f\n", total, calls, wall);
    if (f != stderr) std::fclose(f);
    by_fn.clear();
  }
};

Table& TheTable() {
  static Table* table = new Table();  // dumped by the destructor below, never freed (exit-time regions)
  return *table;
}

// Made when the library is loaded (before main), so the table's start, and
// with it the wall time it reports, is the process's, not its first region's.
struct DumpAtExit {
  DumpAtExit() { TheTable(); }
  ~DumpAtExit() { TheTable().Dump(); }
} dump_at_exit;

}  // namespace

extern "C" __attribute__((visibility("default"))) void GOMP_parallel(RegionFn fn, void* data, unsigned num_threads, unsigned flags) {
  static const auto real = reinterpret_cast<GompParallel>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  if (real == nullptr) {
    std::fprintf(stderr, "omp_regions: GOMP_parallel not found (is the program linked with libgomp?)\n");
    std::abort();
  }
  static const bool gaps = [] {
    const char* env = std::getenv("OCTET_OMP_REGIONS_GAPS");
    return env != nullptr && std::string_view(env) == "1";
  }();
  thread_local std::chrono::steady_clock::time_point previous_end{};
  thread_local bool had_region = false;
  Table& table = TheTable();
  const auto t0 = std::chrono::steady_clock::now();
  real(fn, data, num_threads, flags);
  const auto t1 = std::chrono::steady_clock::now();
  double dt = std::chrono::duration<double>(t1 - t0).count();
  if (gaps) dt = had_region ? std::chrono::duration<double>(t0 - previous_end).count() : 0.0;
  previous_end = t1;
  had_region = true;
  std::lock_guard<std::mutex> lock(table.mu);
  Entry& e = table.by_fn[reinterpret_cast<uintptr_t>(fn)];
  e.seconds += dt;
  ++e.calls;
}
