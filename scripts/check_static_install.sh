#!/usr/bin/env bash
# Builds octet as a static library (BUILD_SHARED_LIBS=OFF, no CUDA, no tests),
# installs it into a scratch prefix and builds the install test's consumer
# (tests/install/main.cc) twice against it: with find_package(octet), and
# with nothing but `pkg-config --cflags --libs octet` and the compiler
# (NOTE [pkg-config file] in CMakeLists.txt); both must run. CI builds the
# shared library only (the install test covers it); this compiles the library
# a second time, a few minutes on 2 cores with a warm ccache.
#   WORK_DIR  scratch directory (default: /tmp/octet_static_install)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
work=${WORK_DIR:-/tmp/octet_static_install}
rm -rf "$work"
cmake -S . -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CPU_ARCH="$(bash scripts/cpu_arch.sh)" \
  -DBUILD_SHARED_LIBS=OFF -DOCTET_CUDA=OFF -DOCTET_BUILD_TESTS=OFF -DOCTET_BUILD_BENCHMARKS=OFF \
  -DOCTET_BUILD_EXAMPLES=OFF > "$work.configure.log"
cmake --build "$work/build" -j "$(nproc)"  # the library and its two tools (installed with it)
cmake --install "$work/build" --prefix "$work/prefix" > /dev/null
test -f "$work/prefix/lib/liboctet.a" || { echo "no liboctet.a installed under $work/prefix" >&2; exit 1; }

echo "== find_package(octet) against the static install"
cmake -S tests/install -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/consumer" > /dev/null
env -u LD_LIBRARY_PATH "$work/consumer/consumer"

echo "== pkg-config alone against the static install"
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs octet)
echo "pkg-config --cflags --libs octet: $flags"
# shellcheck disable=SC2086
${CXX:-c++} -std=c++20 -O1 -Itests/install tests/install/main.cc $flags -o "$work/pkg_config_consumer"
env -u LD_LIBRARY_PATH "$work/pkg_config_consumer"
echo "static install: both consumers built and ran"
