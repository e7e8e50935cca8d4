#!/bin/sh
# octet vs the libtorch C++ frontend, one GPT training step, in one sitting.
#
#   benchmarks/compare/run_compare.sh [build_dir] [repetitions]
#
# Builds benchmarks/compare/libtorch_gpt.cc with g++ against libtorch
# (Debian 12: apt-get install libtorch-dev libopenblas0-openmp; or set
# TORCH_PREFIX to a libtorch tree with include/ and lib/), then alternates, `repetitions` times (default
# 3), octet's train-step benchmark (small and wide GPT at O0/O1/O2) and the
# libtorch program (fp32 and bf16 autocast) on the same threads (default
# OMP_NUM_THREADS=2, OMP_WAIT_POLICY=passive for both), and prints per
# repetition the speed-ups of octet over libtorch and of O1/O2 over O0, from
# wall-clock and from CPU time (all threads; steadier on a shared machine),
# the share of octet's step spent in its GEMMs and their rate (NOTE [cpu
# gemm timing]: what bounds the ratios),
# then the median of each over the repetitions. STEPS (default 10) is
# libtorch's timed steps; TORCH_BF16_STEPS (default STEPS) its autocast ones.
# Needs build_dir/benchmarks/octet_train_step_bench (configure with
# -DOCTET_BUILD_BENCHMARKS=ON). Neither octet's build nor its tests need
# libtorch; this script is the only thing that does.
#
# NOTE: Debian's libtorch does its fp32 GEMMs through the system BLAS
# (libblas.so.3). With only the netlib reference BLAS installed they run ~10x
# slower (measured: small GPT fp32 step 4.5 s of CPU time vs ~0.4 s with
# OpenBLAS), which would flatter octet absurdly; the script refuses to run
# then. libopenblas0-openmp shares libgomp with libtorch (one thread pool).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
reps=${2:-3}
bench=$build/benchmarks/octet_train_step_bench
[ -x "$bench" ] || { echo "run_compare: $bench not found (build target octet_train_step_bench)" >&2; exit 1; }

if [ -n "${TORCH_PREFIX:-}" ]; then
  tinc="-I$TORCH_PREFIX/include -I$TORCH_PREFIX/include/torch/csrc/api/include"
  tlib="-L$TORCH_PREFIX/lib -Wl,-rpath,$TORCH_PREFIX/lib"
elif [ -d /usr/include/torch/csrc/api/include ]; then
  tinc="-I/usr/include/torch/csrc/api/include"
  tlib=""
else
  echo "run_compare: libtorch not found (apt-get install libtorch-dev, or set TORCH_PREFIX)" >&2
  exit 1
fi
torch_bin=$build/libtorch_gpt
if [ ! -x "$torch_bin" ] || [ "$here/libtorch_gpt.cc" -nt "$torch_bin" ]; then
  echo "building $torch_bin ..."
  # shellcheck disable=SC2086
  g++ -std=c++17 -O2 $tinc "$here/libtorch_gpt.cc" -o "$torch_bin" $tlib -ltorch -ltorch_cpu -lc10 -lpthread
fi

blas=$(readlink -f /lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*|*blis*|*mkl*) ;;
  *) if [ -z "${TORCH_PREFIX:-}" ]; then
       echo "run_compare: the system BLAS is $blas (reference BLAS?): apt-get install libopenblas0-openmp" >&2
       exit 1
     fi ;;
esac

# libtorch's best set-up on this CPU (issue 12 compares against "its best
# set-up per mode"). ATen 1.13 runs its AVX2 kernels unless told otherwise
# (Sleef_*avx2 in perf), so ATEN_CPU_CAPABILITY=avx512 where the CPU has
# AVX-512 F/BW/DQ/VL. OpenBLAS, libtorch's fp32 GEMMs, takes its kernels from
# OPENBLAS_CORETYPE or else from its own CPU detection; a machine's
# environment may set the variable (the VM this was written on exports
# Haswell, and OpenBLAS 0.3.21 detects that Zen 5 as Cooperlake), so the
# script drops an inherited value, and where detection still gives kernels
# without AVX-512 on a CPU that has it, asks for SkylakeX.
# TORCH_OPENBLAS_CORETYPE=<core> chooses instead. Measured on that Zen 5, 2
# threads: OpenBLAS SGEMM 164-177 GFLOP/s as Haswell against 302-329 as
# SkylakeX or Cooperlake (1024x768x768 .. 2048^3), and alternating libtorch
# runs: fp32 steps 10-25 % faster with the AVX-512 SGEMM, bf16 autocast steps
# 15-25 % faster with ATen's AVX-512 kernels (2026-11-24).
avx512=yes
for f in avx512f avx512bw avx512dq avx512vl; do grep -qw "$f" /proc/cpuinfo || avx512=no; done
unset OPENBLAS_CORETYPE
if [ -n "${TORCH_OPENBLAS_CORETYPE:-}" ]; then
  export OPENBLAS_CORETYPE=$TORCH_OPENBLAS_CORETYPE
fi
blas_core=$("$torch_bin" --blas-core)
if [ -z "${TORCH_OPENBLAS_CORETYPE:-}" ] && [ "$avx512" = yes ]; then
  case $blas_core in
    SkylakeX|Cooperlake|SapphireRapids|none) ;;
    *) export OPENBLAS_CORETYPE=SkylakeX blas_core=SkylakeX ;;
  esac
fi
if [ "$avx512" = yes ]; then export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-avx512}; fi

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# OMP_WAIT_POLICY=default runs both under libgomp's default (spin a while,
# then sleep): what a program gets that sets nothing. passive makes CPU time
# meaningful (no spinning) but costs every parallel region a futex wake-up:
# 24 us per fork/join on this VM against 4 us (a 2-thread empty region,
# measured 2026-11-24), and a GPT step opens 110-280 of them (perf probe on
# GOMP_parallel at 7d8b861: small O2 185, small O1 ~280, wide O2 ~110).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
[ "$OMP_WAIT_POLICY" = default ] && unset OMP_WAIT_POLICY
steps=${STEPS:-10}
# libtorch's autocast steps can be timed on fewer steps: on a CPU without
# AVX-512 its bf16 GEMMs have no fast kernel (AMD EPYC Zen 3, 2026-11-25: 8 s a
# small step, 34 s a wide one, 40x octet's O2), and 1-2 steps keep a sitting short.
bf16_steps=${TORCH_BF16_STEPS:-$steps}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) CPUs), OMP_NUM_THREADS=$OMP_NUM_THREADS," \
     "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-default}," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "libtorch BLAS: ${blas:-bundled} (OpenBLAS kernels: $blas_core), ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-default}"
"$build/octet-device-info" 2>/dev/null | grep -E '^(CPU GEMM path|  single-thread peaks|CPU f32 GEMMs|CPU GELU on bf16|CPU memory)' || true

r=1
while [ "$r" -le "$reps" ]; do
  "$bench" --benchmark_format=csv --benchmark_min_time=2 2>/dev/null > "$out/octet.csv"
  "$torch_bin" "$steps" all fp32 > "$out/torch.txt"
  "$torch_bin" "$bf16_steps" all bf16 >> "$out/torch.txt"
  # octet csv: the header names the counter columns; rows are "TrainStep/config:C/amp:L/..."
  awk -F, -v rep="$r" -v ratios="$out/ratios.txt" '
    FNR == NR {
      if (FNR == 1) { for (i = 1; i <= NF; i++) { h = $i; gsub(/"/, "", h); col[h] = i } ; next }
      split($1, p, "/"); sub("config:", "", p[2]); sub("amp:", "", p[3]); sub("state:", "", p[4])
      cfg = (p[2] == 0) ? "small" : "wide"
      lvl = "O" p[3] (p[4] == 0 ? "" : "s")   # O1s: O1 with fp8/f16 AdamW state
      wall[cfg, lvl] = $(col["ms_per_step"]); cpu[cfg, lvl] = $(col["cpu_ms_per_step"])
      if ("gemm_share" in col) {
        gshare[cfg, lvl] = $(col["gemm_share"]); gcall[cfg, lvl] = $(col["gemm_frac_of_peak"])
        gexec[cfg, lvl] = $(col["gemm_exec_frac_of_peak"])
      }
      next
    }
    { split($0, t, " "); wall[t[2], "torch_" t[3]] = t[5]; cpu[t[2], "torch_" t[3]] = t[7] }
    END {
      split("small wide", cfgs, " ")
      for (ci = 1; ci <= 2; ci++) {
        c = cfgs[ci]
        printf "rep %d %-5s ms/step wall (cpu): octet O0 %.1f (%.1f) O1 %.1f (%.1f) O1+fp8state %.1f (%.1f) O2 %.1f (%.1f) | libtorch fp32 %.1f (%.1f) bf16 %.1f (%.1f)\n", rep, c,
          wall[c, "O0"], cpu[c, "O0"], wall[c, "O1"], cpu[c, "O1"], wall[c, "O1s"], cpu[c, "O1s"], wall[c, "O2"], cpu[c, "O2"],
          wall[c, "torch_fp32"], cpu[c, "torch_fp32"], wall[c, "torch_bf16"], cpu[c, "torch_bf16"]
        printf "rep %d %-5s speed-up wall (cpu): O0 vs torch fp32 %.2fx (%.2fx)  O1 vs torch bf16 %.2fx (%.2fx)  O2 vs torch bf16 %.2fx (%.2fx)  O1/O0 time %.2f (%.2f)  O2/O0 time %.2f (%.2f)\n", rep, c,
          wall[c, "torch_fp32"] / wall[c, "O0"], cpu[c, "torch_fp32"] / cpu[c, "O0"],
          wall[c, "torch_bf16"] / wall[c, "O1"], cpu[c, "torch_bf16"] / cpu[c, "O1"],
          wall[c, "torch_bf16"] / wall[c, "O2"], cpu[c, "torch_bf16"] / cpu[c, "O2"],
          wall[c, "O1"] / wall[c, "O0"], cpu[c, "O1"] / cpu[c, "O0"],
          wall[c, "O2"] / wall[c, "O0"], cpu[c, "O2"] / cpu[c, "O0"]
        # What bounds the ratios: the share of the step in octet GEMMs, and
        # their rate as a fraction of the peak of the path in use, whole
        # calls / the oneDNN primitives alone (NOTE [cpu gemm timing]).
        if ((c, "O0") in gshare)
          printf "rep %d %-5s octet GEMMs, share of step (whole calls / primitives vs peak): O0 %.0f%% (%.0f%% / %.0f%%)  O1 %.0f%% (%.0f%% / %.0f%%)  O2 %.0f%% (%.0f%% / %.0f%%)\n", rep, c,
            100 * gshare[c, "O0"], 100 * gcall[c, "O0"], 100 * gexec[c, "O0"],
            100 * gshare[c, "O1"], 100 * gcall[c, "O1"], 100 * gexec[c, "O1"],
            100 * gshare[c, "O2"], 100 * gcall[c, "O2"], 100 * gexec[c, "O2"]
        # One line per repetition and config for the medians below.
        printf "%s %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f\n", c,
          wall[c, "torch_fp32"] / wall[c, "O0"], cpu[c, "torch_fp32"] / cpu[c, "O0"],
          wall[c, "torch_bf16"] / wall[c, "O1"], cpu[c, "torch_bf16"] / cpu[c, "O1"],
          wall[c, "torch_bf16"] / wall[c, "O2"], cpu[c, "torch_bf16"] / cpu[c, "O2"],
          wall[c, "O1"] / wall[c, "O0"], cpu[c, "O1"] / cpu[c, "O0"],
          wall[c, "O2"] / wall[c, "O0"], cpu[c, "O2"] / cpu[c, "O0"] >> ratios
      }
    }' "$out/octet.csv" "$out/torch.txt"
  r=$((r + 1))
done

# The median of each ratio over the repetitions (a single repetition moves by
# up to +-20 % on a shared machine; the median is what to quote).
for c in small wide; do
  grep "^$c " "$out/ratios.txt" | awk -v c="$c" '
    { for (i = 2; i <= NF; i++) v[i, NR] = $i; n = NR }
    END {
      for (i = 2; i <= 11; i++) {
        for (a = 1; a <= n; a++) s[a] = v[i, a]
        for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++) if (s[b] < s[a]) { t = s[a]; s[a] = s[b]; s[b] = t }
        m[i] = n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
      }
      printf "median of %d %-5s speed-up wall (cpu): O0 vs torch fp32 %.2fx (%.2fx)  O1 vs torch bf16 %.2fx (%.2fx)  O2 vs torch bf16 %.2fx (%.2fx)  O1/O0 time %.2f (%.2f)  O2/O0 time %.2f (%.2f)\n",
        n, c, m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], m[10], m[11]
    }'
done
