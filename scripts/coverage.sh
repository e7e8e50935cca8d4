#!/usr/bin/env bash
# Which of the library's lines the test suite runs, file by file, with gcov
# alone: builds octet's host code with --coverage (-O1, CUDA off) in
# build-coverage, runs every test, and prints for each .cc file of the
# library (octet/), the examples (examples/, run by their tests as child
# processes) and tools/ its lines run / lines with code, least covered
# first, then the library's total and the examples' and tools'.
# A file's unrun lines: the command on the last line of the output writes
# them into X.cc.gcov.
# Environment:
#   BUILD_DIR   build directory (default: build-coverage)
#   SKIP_TESTS  1: only report what the last run left (.gcda files)
# Extra arguments go to ctest (e.g. -R Safetensors: the report then shows
# what those tests alone run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
build_dir=${BUILD_DIR:-build-coverage}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  bash scripts/setup.sh
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" \
    -DCMAKE_CXX_FLAGS="--coverage" -DCMAKE_EXE_LINKER_FLAGS="--coverage" -DCMAKE_SHARED_LINKER_FLAGS="--coverage" \
    -DOCTET_CPU_ARCH="$(bash scripts/cpu_arch.sh)" -DOCTET_CUDA=OFF -DOCTET_BUILD_TESTS=ON \
    -DOCTET_BUILD_BENCHMARKS=OFF -DOCTET_BUILD_EXAMPLES=ON
  cmake --build "$build_dir" -j "$(nproc)"
  # Counts of earlier runs would add up: start from zero.
  find "$build_dir" -name '*.gcda' -delete
  (cd "$build_dir" && OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest -j "$(nproc)" "$@" > ctest.log 2>&1) || {
    echo "coverage: some tests failed (see $build_dir/ctest.log); the report covers what ran" >&2
  }
fi
build_abs=$(cd "$build_dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# gcov -n prints, for every source a .gcda's object was built from, "File
# 'PATH'" and "Lines executed:P% of N"; the library's .cc files each belong
# to one object, so their figures need no merging.
find "$build_abs" -name '*.gcda' | while read -r gcda; do
  (cd "$work" && gcov -n -o "$(dirname "$gcda")" "$gcda" 2>/dev/null)
done | awk -v root="$root/" -v build="$build_abs/" '
  # A path as gcov prints it (relative to the build directory) made absolute.
  function absolute(path,    n, parts, out, i, k, stack) {
    if (substr(path, 1, 1) != "/") path = build path
    n = split(path, parts, "/"); k = 0
    for (i = 1; i <= n; i++) {
      if (parts[i] == "" || parts[i] == ".") continue
      if (parts[i] == "..") { if (k > 0) k--; continue }
      stack[++k] = parts[i]
    }
    out = ""
    for (i = 1; i <= k; i++) out = out "/" stack[i]
    return out
  }
  /^File / { file = $2; gsub(/\047/, "", file); file = absolute(file); next }
  /^Lines executed:/ {
    lib = index(file, root "octet/") == 1
    if (file ~ /\.cc$/ && (lib || index(file, root "examples/") == 1 || index(file, root "tools/") == 1)) {
      split($2, a, "%"); pct = substr(a[1], index(a[1], ":") + 1); n = $4
      run = int(pct * n / 100 + 0.5)
      rel = substr(file, length(root) + 1)
      if (!(rel in seen)) {
        seen[rel] = 1
        printf "%6.1f %% %6d / %-6d %s\n", pct, run, n, rel
        if (lib) { total += n; ran += run } else { other_total += n; other_ran += run }
      }
    }
    file = ""
  }
  END {
    if (total > 0) printf "library: %d of %d lines run (%.1f %%)\n", ran, total, 100 * ran / total > "/dev/stderr"
    if (other_total > 0)
      printf "examples and tools: %d of %d lines run (%.1f %%)\n", other_ran, other_total,
             100 * other_ran / other_total > "/dev/stderr"
  }
' 2>"$work/total" | sort -n
cat "$work/total"
echo "unrun lines of a file X.cc: cd $build_abs && gcov \$(find . -name X.cc.gcda)" \
  "(then see X.cc.gcov, where ##### marks them)"
