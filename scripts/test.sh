#!/usr/bin/env bash
# Installs the dependencies, builds octet with every test, and runs them.
# The CUDA backend is compiled whenever nvcc is found (its device tests skip
# without a GPU). Environment:
#   BUILD_DIR   build directory (default: build)
#   CUDA_ARCHS  CUDA architectures to compile for (default: 90a here, to keep
#               the run short; the library's own default is 89;90a;100a)
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (when installed) shares objects between clones at different paths:
# compile commands are made relative to the repository root.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
bash scripts/setup.sh
build_dir=${BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CPU_ARCH="$(bash scripts/cpu_arch.sh)" -DOCTET_CUDA=AUTO \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" -DOCTET_BUILD_TESTS=ON -DOCTET_BUILD_BENCHMARKS=ON \
  -DOCTET_BUILD_EXAMPLES=ON
cmake --build "$build_dir" -j "$jobs"
cd "$build_dir"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --output-on-failure -j 1
