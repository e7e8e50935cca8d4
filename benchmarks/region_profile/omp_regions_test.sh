#!/bin/sh
# scripts/omp_regions.sh on the probe program (benchmarks/region_profile/
# probe.cc): RegionA's 5 regions and RegionB's 3 must be counted and named.
set -eu
build=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$(sh "$src/scripts/omp_regions.sh" -b "$build" "$build/benchmarks/octet_omp_regions_probe")
echo "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
echo "$out" | grep -q '^probe done' || fail "the probe did not run"
echo "$out" | awk '$2 == 5 && /RegionA/ { found = 1 } END { exit !found }' || fail "RegionA: 5 calls expected"
echo "$out" | awk '$2 == 3 && /RegionB/ { found = 1 } END { exit !found }' || fail "RegionB: 3 calls expected"
echo "$out" | grep -q '^in regions: .* in 8 regions' || fail "8 regions in all expected"
echo "$out" | awk '/RegionA/ { ok = $1 >= 0.005 && $3 >= 1000 } END { exit !ok }' ||
  fail "RegionA: >= 1 ms in each of its 5 regions expected"
gaps=$(sh "$src/scripts/omp_regions.sh" -g -b "$build" "$build/benchmarks/octet_omp_regions_probe")
echo "$gaps"
echo "$gaps" | awk '$2 == 3 && /RegionB/ { ok = $1 >= 0.009 } END { exit !ok }' || fail "-g: RegionB: >= 9 ms before its 3 regions expected"
echo "$gaps" | grep -q '^before regions: .* before 8 regions' || fail "-g: 8 regions in all expected"
echo PASS
