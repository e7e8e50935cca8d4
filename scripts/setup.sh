#!/usr/bin/env bash
# Installs every Debian package octet needs to build, test, benchmark and run
# its examples on a fresh Debian 12 machine. Safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libabsl-dev libdnnl-dev libgloo-dev libhiredis-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libomp-dev
  redis-server fortunes gnuplot-nox
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "octet: all build dependencies are installed"
