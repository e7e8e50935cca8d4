#!/usr/bin/env bash
# Installs the dependencies, builds octet, and runs the main job on the CPU.
# Extra arguments are passed to the program.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (when installed) shares objects between clones at different paths:
# compile commands are made relative to the repository root.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
bash scripts/setup.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CPU_ARCH="$(bash scripts/cpu_arch.sh)" -DOCTET_CUDA=OFF -DOCTET_BUILD_TESTS=OFF \
  -DOCTET_BUILD_BENCHMARKS=OFF -DOCTET_BUILD_EXAMPLES=ON
cmake --build "$build_dir" -j "$(nproc)" --target train_gpt
exec "$build_dir/examples/gpt/train_gpt" "$@"
