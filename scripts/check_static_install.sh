#!/usr/bin/env bash
# Builds octet as a static library (BUILD_SHARED_LIBS=OFF, no CUDA, no tests)
# and runs the install test (tests/install/run_install_test.cmake) on it: the
# installed headers, the installed tools, the consumer built with
# find_package(octet) and again with nothing but `pkg-config --cflags --libs
# octet` (NOTE [pkg-config file] in CMakeLists.txt), the C++17 message. CI
# runs that test on the shared library only; this compiles the library a
# second time (seconds with a warm ccache, minutes without).
#   WORK_DIR  scratch directory (default: /tmp/octet_static_install)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
work=${WORK_DIR:-/tmp/octet_static_install}
rm -rf "$work"
mkdir -p "$work"
cmake -S . -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CPU_ARCH="$(bash scripts/cpu_arch.sh)" \
  -DBUILD_SHARED_LIBS=OFF -DOCTET_CUDA=OFF -DOCTET_BUILD_TESTS=OFF -DOCTET_BUILD_BENCHMARKS=OFF \
  -DOCTET_BUILD_EXAMPLES=OFF > "$work/configure.log"
cmake --build "$work/build" -j "$(nproc)"  # the library and its two tools (installed with it)
cmake -DOCTET_BINARY_DIR="$work/build" -DCONSUMER_SOURCE_DIR="$PWD/tests/install" -DWORK_DIR="$work/install_test" \
  -DCXX_COMPILER="${CXX:-c++}" -P tests/install/run_install_test.cmake
test -f "$work/install_test/prefix/lib/liboctet.a" || { echo "no liboctet.a in the static install" >&2; exit 1; }
echo "static install: the install test passed"
