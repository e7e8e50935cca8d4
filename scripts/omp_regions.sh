#!/bin/sh
# Where a CPU program's time goes, OpenMP region by region: runs COMMAND with
# the LD_PRELOAD library of benchmarks/region_profile/omp_regions.cc, then
# prints each region function's total seconds, calls, mean time per call and
# share of all region time, largest first, with names resolved by addr2line.
#
#   scripts/omp_regions.sh [-b BUILD_DIR] [-n TOP] [-o RAW_FILE] [-g] COMMAND [ARGS...]
#
# -g: charge each region function, instead of its regions' time, the serial
# time before them (since the calling thread's previous region ended), to
# find what runs on one thread while the others wait.
#
# e.g. the small GPT step at O2 (every kernel of the step runs in a region):
#   scripts/omp_regions.sh build/benchmarks/octet_train_step_bench \
#       --benchmark_filter=config:0/amp:2/state:0
# The last line compares the time inside regions with the process's wall
# time: what is left is serial work (autograd, allocation, set-up).
# Per-call means include a run's first steps, whose outputs land on fresh
# pages: between amp levels with different peaks that alone can make a
# kernel look 1.4-1.7x slower (train_gpt's wide model, GELU backward: 913
# against 651 us a call over 40 steps, equal once 10 steps are subtracted).
# For steady state, run twice (e.g. 10 and 50 steps) and divide the
# difference of the seconds by the difference of the calls.
set -eu

build=build
top=30
raw=
gaps=0
while [ $# -gt 0 ]; do
  case $1 in
    -b) build=$2; shift 2 ;;
    -n) top=$2; shift 2 ;;
    -o) raw=$2; shift 2 ;;
    -g) gaps=1; shift ;;
    --) shift; break ;;
    -*) echo "omp_regions: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-b BUILD_DIR] [-n TOP] [-o RAW_FILE] [-g] COMMAND [ARGS...]" >&2; exit 2; }
lib=$(cd "$build" 2>/dev/null && pwd)/benchmarks/liboctet_omp_regions.so
[ -f "$lib" ] || { echo "omp_regions: $lib not found (build the target octet_omp_regions)" >&2; exit 1; }
for tool in addr2line readelf; do
  command -v $tool >/dev/null || { echo "omp_regions: $tool not found (apt-get install binutils)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${raw:-$tmp/raw.tsv}
# LD_PRELOAD splits its list at spaces and colons: a library whose path has
# one (a checkout in "my projects/") is preloaded through a link in a
# directory of /tmp's own whose name has none.
case $lib in
  *[[:space:]:]*)
    link_dir=$(mktemp -d /tmp/octet_omp_regions.XXXXXX)
    trap 'rm -rf "$tmp" "$link_dir"' EXIT
    ln -s "$lib" "$link_dir/liboctet_omp_regions.so"
    lib=$link_dir/liboctet_omp_regions.so ;;
esac
OCTET_OMP_REGIONS_GAPS=$gaps OCTET_OMP_REGIONS_OUT=$out LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" "$@"
[ -s "$out" ] || { echo "omp_regions: the program wrote no table to $out" >&2; exit 1; }

# Names: one addr2line per object file for all its offsets.
grep -v '^total' "$out" | cut -f3 | sort -u > "$tmp/objects"
: > "$tmp/names"
while IFS= read -r obj; do
  awk -F'\t' -v o="$obj" '$1 != "total" && $3 == o { print $4 }' "$out" > "$tmp/offsets"
  if [ -f "$obj" ] && ! readelf -S "$obj" 2>/dev/null | grep -q '[.]symtab'; then
    # Stripped (Debian's oneDNN): addr2line would name the nearest exported
    # function, which is not the region's.
    awk -v o="${obj##*/}" '{ print "(a region function of stripped " o " at +0x" $1 ")" }' "$tmp/offsets" > "$tmp/fns"
  elif [ -f "$obj" ]; then
    # -f prints the function, then file:line, per address.
    addr2line -f -C -e "$obj" $(sed 's/^/0x/' "$tmp/offsets") 2>/dev/null | awk 'NR % 2 == 1' > "$tmp/fns" || true
  else
    : > "$tmp/fns"
  fi
  paste "$tmp/offsets" "$tmp/fns" | awk -F'\t' -v o="$obj" '{ print o "\t" $1 "\t" $2 }' >> "$tmp/names"
done < "$tmp/objects"

# One row per region function, "seconds <TAB> row", then sorted by seconds.
total=$(awk -F'\t' '$1 == "total" { print $2 }' "$out")
awk -F'\t' -v total="$total" '
  FNR == NR { name[$1 "\t" $2] = $3; next }
  $1 == "total" { next }
  {
    n = $5 != "-" ? $5 : name[$3 "\t" $4]
    if (n == "" || n == "??") n = $3 "+0x" $4
    sub(/.*\//, "", $3)
    gsub(/octet::cpu::|\(anonymous namespace\)::|octet::/, "", n)
    if (length(n) > 110) n = substr(n, 1, 110) "..."
    printf "%s\t%9.3f %8d %10.1f  %-22s %s  (%.1f %%)\n", $1, $1, $2, 1e6 * $1 / $2, $3, n,
           (total > 0 ? 100 * $1 / total : 0)
  }' "$tmp/names" "$out" | sort -t "$(printf '\t')" -k1,1gr > "$tmp/rows"
printf '%9s %8s %10s  %-22s %s\n' seconds calls us/call object "region function"
head -n "$top" "$tmp/rows" | cut -f2-
if [ "$gaps" = 1 ]; then
  awk -F'\t' '$1 == "total" { printf "before regions: %.3f s of serial time before %d regions; process wall time %.3f s\n", $2, $3, $4 }' "$out"
else
  awk -F'\t' '$1 == "total" { printf "in regions: %.3f s in %d regions; process wall time %.3f s\n", $2, $3, $4 }' "$out"
fi
