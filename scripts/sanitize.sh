#!/usr/bin/env bash
# Builds octet's host code with AddressSanitizer (+ LeakSanitizer) and
# UndefinedBehaviorSanitizer and runs every test under them: out-of-bounds
# reads and writes, use after free, leaks, signed overflow, misaligned or
# null accesses, bad shifts and casts all end the test with a report.
# The CUDA backend is left out (its device code is checked by
# compute-sanitizer on a GPU: scripts/gpu_session.sh), so its tests skip.
# Environment:
#   BUILD_DIR   build directory (default: build-sanitize)
#   SANITIZE    the -fsanitize= list (default: address,undefined)
# Extra arguments go to ctest (e.g. -R Attention).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
bash scripts/setup.sh
build_dir=${BUILD_DIR:-build-sanitize}
# -O1: the sanitizers' reports keep their frames, and the suite runs in
# minutes rather than the tens an -O0 build takes.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" \
  -DOCTET_SANITIZE="${SANITIZE:-address,undefined}" -DOCTET_CPU_ARCH="$(bash scripts/cpu_arch.sh)" -DOCTET_CUDA=OFF \
  -DOCTET_BUILD_TESTS=ON -DOCTET_BUILD_BENCHMARKS=OFF -DOCTET_BUILD_EXAMPLES=ON
cmake --build "$build_dir" -j "$(nproc)"
cd "$build_dir"
# Stop at the first report, leaks included; UBSan prints the stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --output-on-failure -j "$(nproc)" "$@"
