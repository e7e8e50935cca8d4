#!/usr/bin/env bash
# Everything a lent GPU session runs, in two (optionally three) calls of at
# most ~9.5 minutes each (shared/gpu/README.md: 10 minutes a command, 30
# device-minutes a session, at most 8 files back). Build and pack first:
#
#   CUDA_ARCHS=90a bash scripts/test.sh   # or any CUDA-enabled build in build/
#   bash ../shared/gpu/pack.sh            # -> .gpucarry/
#
# then on the GPU machine (the `run` tool, with carry [".gpucarry"]):
#
#   bash .gpucarry/on_device.sh 'bash scripts/gpu_session.sh 1'
#   bash .gpucarry/on_device.sh 'bash scripts/gpu_session.sh 2'
#   bash .gpucarry/on_device.sh 'bash scripts/gpu_session.sh 3'   # extras, if time is left
#
# With 15 device-minutes a session, machine starts included (the budget
# since 2026-11-27; `status` says what is left), run part q instead: the
# test programs, then the speed table against PyTorch (trainstep, torch,
# ratios), then compute-sanitizer with whatever the call has left, in one
# call of ~9.5 minutes; then at once, while the machine is still warm and if
# 4 minutes remain, the sanitizer and the train_gpt checks with a short
# budget, and give the machine back:
#
#   bash .gpucarry/on_device.sh 'bash scripts/gpu_session.sh q'
#   bash .gpucarry/on_device.sh 'GPU_SESSION_LIMIT_S=200 bash scripts/gpu_session.sh sanitizer train'
#
# Part 1 (correctness, issues 8 and 10): every test program with
#   OCTET_REQUIRE_CUDA=1, 8 at a time, longest first, each failing program run
#   again alone; compute-sanitizer memcheck over the octet_cuda_*_test
#   programs; the NCCL world-size-1 tests; train_gpt --device=cuda at O0/O1/O2
#   (default and GPT-2-size models) checked for attention-fallback lines, the
#   default model also with --cuda_graph against eager (equal losses); the
#   3000-step default run at O0/O1/O2 (val losses, concurrently).
# Part 2 (speed, issue 9), in order of importance (later ones are cut short
#   first when time runs out): octet_cuda_train_step_bench (JSON), PyTorch's
#   torch.compile bf16 and eager bf16 at the same sizes and its SDPA alone
#   (benchmarks/compare/torch_gpt.py, JSON), the goal table
#   (benchmarks/compare/gpu_ratios.sh), octet_cuda_gemm_bench,
#   octet_cuda_attention_bench and octet_attention_bench
#   --benchmark_filter=Cuda, octet_cuda_cast_bench (when built), and an ncu
#   per-kernel summary of 2 O1 steps of the 2-layer GPT-2-width model.
# Part 3 (extras): the ncu summaries at O1 and O2, PyTorch compiled and eager
#   FP8 and fp32.
#
# Instead of a part number, section names run just those sections, e.g.
# `gpu_session.sh tests nccl`. Sections: info tests sanitizer train losses
# nccl trainstep torch ratios gemm attention cast ncu torch_extra ncu_o2.
#
# Output under $OUT (at most 6 files per part): partN_summary.txt (what to
# read first: counts, failures, the goal table), JSON results, and
# partN_logs.tar.gz with every full log. Environment: B (the build directory,
# set by on_device.sh) and OUT are required; GPU_SESSION_LIMIT_S (default
# 540) is the wall-clock budget of one call; DRY_RUN=1 only prints what would
# run and checks that every program exists.
set -u

die() {
  echo "gpu_session.sh: error: $*" >&2
  exit 2
}

[ "$#" -ge 1 ] || die "usage: gpu_session.sh 1|2|3|q|SECTION... (see the header of scripts/gpu_session.sh)"
[ -n "${OUT:-}" ] || die "OUT is not set: run this on the GPU machine through the run tool, which sets \$OUT to the results folder"
[ -n "${B:-}" ] || die "B is not set: run it as bash .gpucarry/on_device.sh 'bash scripts/gpu_session.sh $*' (on_device.sh sets \$B to the build directory)"
[ -d "$B" ] || die "B=$B is not a directory"
[ -e "$B/liboctet.so" ] || die "no liboctet.so in B=$B (was the build packed with pack.sh and unpacked by on_device.sh?)"
mkdir -p "$OUT" || die "cannot create OUT=$OUT"

repo=$(cd "$(dirname "$0")/.." && pwd)
dry=${DRY_RUN:-0}
limit=${GPU_SESSION_LIMIT_S:-540}
t_start=$(date +%s)

case "$1" in
  1) part=1; sections="info tests sanitizer train losses nccl" ;;
  2) part=2; sections="info trainstep torch ratios gemm attention cast ncu" ;;
  3) part=3; sections="info ncu ncu_o2 torch_extra" ;;
  q) part=q; sections="info tests trainstep torch ratios sanitizer" ;;
  *) part=x; sections="$*" ;;
esac
all_sections="info tests sanitizer train losses nccl trainstep torch ratios gemm attention cast ncu torch_extra ncu_o2"
for s in $sections; do
  case " $all_sections " in
    *" $s "*) ;;
    *) die "unknown section '$s'" ;;
  esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_session.XXXXXX") || die "mktemp failed"
summary="$OUT/part${part}_summary.txt"
: >"$summary"

# ---- helpers ---------------------------------------------------------------------------------
say() { printf '%s\n' "$*" | tee -a "$summary"; }
elapsed() { echo $(($(date +%s) - t_start)); }
# Seconds a step may take: its own cap, but never past the call's budget
# (less `reserve` seconds kept for what follows); at least 5.
budget() {
  local cap=$1 reserve=${2:-20} left
  left=$((limit - $(elapsed) - reserve))
  [ "$left" -lt "$cap" ] && cap=$left
  [ "$cap" -lt 5 ] && cap=5
  echo "$cap"
}
# The first of the named tools found on PATH or in the usual CUDA places.
find_tool() {
  local name=$1 p
  p=$(command -v "$name" 2>/dev/null) && { echo "$p"; return 0; }
  for p in /usr/local/cuda/bin/"$name" /usr/local/cuda-*/bin/"$name" /opt/nvidia/nsight-compute/*/"$name" \
    /usr/local/cuda/nsight-compute*/"$name"; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  p=$(timeout 30 find /usr /opt -xdev -type f -name "$name" -perm -u+x 2>/dev/null | head -1)
  [ -n "$p" ] && { echo "$p"; return 0; }
  return 1
}
# run_logged NAME CAP CMD...: runs CMD under timeout, output to $work/NAME.log;
# records the exit status and the time taken. Returns CMD's status.
run_logged() {
  local name=$1 cap=$2 rc t0
  shift 2
  if [ "$dry" = 1 ]; then
    say "[dry-run] $name (cap ${cap}s): $*"
    return 0
  fi
  t0=$(date +%s)
  timeout -k 10 "$cap" "$@" >"$work/$name.log" 2>&1
  rc=$?
  local note=""
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" (TIMED OUT after ${cap}s)"
  say "[$name] exit $rc in $(($(date +%s) - t0)) s$note"
  return "$rc"
}
need() {  # need PATH: the program must exist (checked in dry runs too)
  if [ ! -x "$1" ]; then
    say "MISSING: $1"
    return 1
  fi
}

say "gpu_session.sh part $part: sections: $sections"
say "started $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${limit}s, B=$B, repo=$repo"

# ---- sections ----------------------------------------------------------------------------------
section_info() {
  say ""
  say "== info"
  if [ "$dry" = 1 ]; then
    need "$B/octet-device-info"
    return
  fi
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -4
    if [ -x "$B/octet-device-info" ]; then "$B/octet-device-info" 2>&1 | head -40; else echo "no $B/octet-device-info"; fi
    echo "cores: $(nproc), OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}, OCTET_REQUIRE_CUDA=${OCTET_REQUIRE_CUDA:-unset}"
  } | tee -a "$summary"
}

# Every test program, 8 at a time (OMP_NUM_THREADS=2 each), the known-long
# ones first; then each failing program again alone (OMP_NUM_THREADS=8,
# only its failed tests), which tells a real failure from interference.
section_tests() {
  say ""
  say "== tests (every program under $B/tests, OCTET_REQUIRE_CUDA=${OCTET_REQUIRE_CUDA:-unset})"
  local progs long p cap
  progs=$(ls "$B"/tests/octet_*_test 2>/dev/null)
  [ -n "$progs" ] || { say "MISSING: no test programs in $B/tests"; return; }
  long="octet_cuda_kernels_test octet_cuda_kernels_nn_test octet_examples_train_test octet_ops_pointwise_test
        octet_ops_softmax_test octet_core_convert_test octet_ops_matmul_test octet_distributed_gloo_failure_test
        octet_examples_train_dist_test octet_cuda_gpt_cuda_test octet_cuda_cast_cuda_test"
  { for p in $long; do [ -x "$B/tests/$p" ] && echo "$B/tests/$p"; done
    for p in $progs; do case " $long " in *" $(basename "$p") "*) ;; *) echo "$p" ;; esac; done
  } >"$work/test_order.txt"
  say "$(wc -l <"$work/test_order.txt") programs"
  if [ "$dry" = 1 ]; then
    say "[dry-run] xargs -P 8 over: $(tr '\n' ' ' <"$work/test_order.txt" | cut -c1-300)..."
    return
  fi
  # Each program may take `cap` seconds, and none runs past the phase's
  # deadline (a program not started by then is reported with status 125).
  cap=$(budget 240 300)
  mkdir -p "$work/tests"
  export TEST_CAP=$cap TEST_LOGS="$work/tests" TEST_DEADLINE=$(($(date +%s) + cap))
  local t0
  t0=$(date +%s)
  # shellcheck disable=SC2016  # expanded by the inner shell
  OMP_NUM_THREADS=2 xargs -P 8 -n 1 sh -c '
    n=$(basename "$1"); s=$(date +%s); left=$((TEST_DEADLINE - s)); [ "$left" -lt "$TEST_CAP" ] || left=$TEST_CAP
    if [ "$left" -lt 5 ]; then echo "not started: phase deadline" >"$TEST_LOGS/$n.log"; echo "$n 125 0"; exit 0; fi
    timeout -k 10 "$left" "$1" --gtest_brief=1 >"$TEST_LOGS/$n.log" 2>&1; echo "$n $? $(($(date +%s) - s))"' sh \
    <"$work/test_order.txt" >"$work/tests/results.txt"
  say "all programs done in $(($(date +%s) - t0)) s (phase deadline ${cap}s; 124 = timed out, 125 = not started)"
  # Counts from gtest's summary lines.
  awk '/^\[  PASSED  \] [0-9]+ test/ {p += $4} /^\[  SKIPPED \] [0-9]+ test/ {s += $4}
       /^\[  FAILED  \] [0-9]+ test/ {f += $4}
       END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$work"/tests/*.log | tee -a "$summary"
  sort -k3 -n -r "$work/tests/results.txt" | head -5 | awk '{printf "  slowest: %s %s s\n", $1, $3}' | tee -a "$summary"
  local bad
  bad=$(awk '$2 != 0 {print $1}' "$work/tests/results.txt")
  if [ -z "$bad" ]; then
    say "every test program exited 0"
    return
  fi
  say "programs that did not exit 0 (name, exit status; 124 = timed out):"
  awk '$2 != 0 {printf "  %s exit %s after %s s\n", $1, $2, $3}' "$work/tests/results.txt" | tee -a "$summary"
  for p in $bad; do
    say "--- $p: failed tests and messages (from the parallel run)"
    local filter
    filter=$(grep -E '^\[  FAILED  \] [A-Za-z_][A-Za-z0-9_/.]*' "$work/tests/$p.log" | awk '{print $4}' |
      sed 's/,$//' | grep '\.' | sort -u | tr '\n' ':')
    say "    failed: ${filter:-(none named: crashed or timed out)}"
    grep -E -B2 -A6 'Failure$|error: |terminate|Segmentation|Aborted' "$work/tests/$p.log" | head -60 | tee -a "$summary"
    [ -n "$filter" ] || tail -15 "$work/tests/$p.log" | tee -a "$summary"
    cap=$(budget 90 250)
    local rc
    local t1
    t1=$(date +%s)
    { echo "command: OMP_NUM_THREADS=8 $B/tests/$p --gtest_brief=1 ${filter:+--gtest_filter=$filter}"
      OMP_NUM_THREADS=8 timeout -k 10 "$cap" "$B/tests/$p" --gtest_brief=1 ${filter:+--gtest_filter="$filter"}
    } >"$work/tests/$p.alone.log" 2>&1
    rc=$?
    local how="alone (OMP_NUM_THREADS=8${filter:+, its failed tests}, $(($(date +%s) - t1)) s)"
    if [ "$rc" = 0 ]; then
      case "$(awk -v n="$p" '$1 == n {print $2}' "$work/tests/results.txt")" in
        124|125) say "    $how: passes (it only needed more time than the parallel run left it)" ;;
        *) say "    $how: PASSES -> interference between parallel programs, or the thread count" ;;
      esac
    else
      say "    $how: still fails (exit $rc)"
    fi
  done
}

# compute-sanitizer memcheck over the CUDA test programs, 4 at a time.
section_sanitizer() {
  say ""
  say "== compute-sanitizer memcheck over $B/tests/octet_cuda_*_test"
  local cs cap
  cs=$(find_tool compute-sanitizer) || { say "MISSING: compute-sanitizer not found"; return; }
  if [ "$dry" = 1 ]; then
    say "[dry-run] $cs --tool memcheck ... over: $(printf '%s\n' "$B"/tests/octet_cuda_*_test | wc -l) programs"
    return
  fi
  cap=$(budget 200 120)
  mkdir -p "$work/sanitizer"
  export SAN_TOOL=$cs SAN_CAP=$cap SAN_LOGS="$work/sanitizer" SAN_DEADLINE=$(($(date +%s) + cap))
  local t0
  t0=$(date +%s)
  # shellcheck disable=SC2016
  printf '%s\n' "$B"/tests/octet_cuda_*_test | OMP_NUM_THREADS=2 xargs -P 4 -n 1 sh -c '
    n=$(basename "$1"); left=$((SAN_DEADLINE - $(date +%s))); [ "$left" -lt "$SAN_CAP" ] || left=$SAN_CAP
    if [ "$left" -lt 5 ]; then echo "not started: phase deadline" >"$SAN_LOGS/$n.log"; echo "$n 125"; exit 0; fi
    timeout -k 10 "$left" "$SAN_TOOL" --tool memcheck --print-limit 30 "$1" --gtest_brief=1 >"$SAN_LOGS/$n.log" 2>&1
    echo "$n $?"' sh >"$work/sanitizer/results.txt"
  say "done in $(($(date +%s) - t0)) s (phase deadline ${cap}s)"
  local f n line
  for f in "$work"/sanitizer/octet_*.log; do
    n=$(basename "$f" .log)
    line=$(grep -h 'ERROR SUMMARY' "$f" | tail -1 | sed 's/^=* *//')
    if grep -q 'terminated before first instrumented API call' "$f"; then line="host-only program (no CUDA call)"; fi
    [ -n "$line" ] || line="no ERROR SUMMARY line (exit $(awk -v n="$n" '$1 == n {print $2}' "$work/sanitizer/results.txt"); timed out or crashed?)"
    say "  $n: $line"
    grep -E '^========= (Invalid|Program hit|Uninitialized|Race|Leaked|Error|  Saved host backtrace)' "$f" | sort | uniq -c |
      sort -rn | head -8 | sed 's/^/      /' | tee -a "$summary"
  done
}

# train_gpt on the GPU: no "falls back" line at any level (default model and
# GPT-2 size), first lines kept.
section_train() {
  say ""
  say "== train_gpt --device=cuda (attention fallback check)"
  local tg=$B/examples/gpt/train_gpt lvl model args cap
  need "$tg" || return
  for model in default gpt2; do
    for lvl in O2 O1 O0; do
      args="--device=cuda --amp $lvl --steps 30 --log_every 10 --eval_every 0 --eval_batches 2 --sample_tokens 0"
      [ "$model" = gpt2 ] && args="$args --n_layer 12 --n_head 12 --n_embd 768 --seq_len 1024 --block_size 1024 --batch 8"
      cap=$(budget 90 60)
      # shellcheck disable=SC2086  # args is a word list
      run_logged "train_${model}_$lvl" "$cap" "$tg" $args
      if [ "$dry" != 1 ]; then
        grep -E '^model:|^step +(1|30)/|^done:|error' "$work/train_${model}_$lvl.log" | head -8 | sed 's/^/    /' |
          tee -a "$summary"
        if grep -q 'falls back' "$work/train_${model}_$lvl.log"; then
          say "    FALLBACK at $model $lvl:"
          grep 'falls back' "$work/train_${model}_$lvl.log" | head -5 | sed 's/^/      /' | tee -a "$summary"
        else
          say "    no attention fallback line"
        fi
      fi
      # The same run replayed from a CUDA graph must log the same losses
      # (core/graph.h, NOTE [captured steps]).
      [ "$model" = default ] || continue
      cap=$(budget 90 60)
      # shellcheck disable=SC2086
      run_logged "train_graph_$lvl" "$cap" "$tg" $args --cuda_graph --log_every 1 \
        --metrics "$work/train_graph_$lvl.jsonl"
      # shellcheck disable=SC2086
      run_logged "train_eager_$lvl" "$cap" "$tg" $args --log_every 1 --metrics "$work/train_eager_$lvl.jsonl"
      [ "$dry" = 1 ] && continue
      grep -E '^step +30/|^step:|error' "$work/train_graph_$lvl.log" | head -4 | sed 's/^/    /' | tee -a "$summary"
      if [ -s "$work/train_graph_$lvl.jsonl" ] &&
        [ "$(grep -o '"loss":[^,]*' "$work/train_graph_$lvl.jsonl")" = \
          "$(grep -o '"loss":[^,]*' "$work/train_eager_$lvl.jsonl")" ]; then
        say "    --cuda_graph $lvl: the 30 losses equal the eager run's, bit for bit"
      else
        say "    --cuda_graph $lvl: losses differ from the eager run (or the run failed; see train_graph_$lvl.log);"
        say "      octet_cuda_graph_cuda_test tells a graph bug from a non-deterministic library kernel"
      fi
    done
  done
}

# The 3000-step default run at O0, O1 and O2 side by side (issue 9's loss
# row: O1/O2 within 0.5 % of O0). Started in the background by run_part so it
# overlaps the sanitizer; collected at the end.
start_losses() {
  local tg=$B/examples/gpt/train_gpt lvl cap
  need "$tg" || return
  cap=$(budget 330 40)
  for lvl in O0 O1 O2; do
    if [ "$dry" = 1 ]; then
      say "[dry-run] losses_$lvl (cap ${cap}s): $tg --device=cuda --amp $lvl --sample_tokens 0 --log_every 500"
      continue
    fi
    timeout -k 10 "$cap" "$tg" --device=cuda --amp "$lvl" --sample_tokens 0 --log_every 500 \
      >"$work/losses_$lvl.log" 2>&1 &
  done
}
collect_losses() {
  say ""
  say "== 3000-step default run (train_gpt --device=cuda, defaults), final val loss"
  [ "$dry" = 1 ] && return
  wait
  local lvl o0 v
  o0=$(grep -h 'final val loss' "$work/losses_O0.log" 2>/dev/null | sed 's/.*final val loss \([0-9.]*\).*/\1/')
  for lvl in O0 O1 O2; do
    v=$(grep -h 'final val loss' "$work/losses_$lvl.log" 2>/dev/null | sed 's/.*final val loss \([0-9.]*\).*/\1/')
    if [ -z "$v" ]; then
      say "  $lvl: no final line (timed out or failed): $(tail -2 "$work/losses_$lvl.log" 2>/dev/null | tr '\n' ' ')"
    elif [ -n "$o0" ]; then
      say "  $lvl: $(grep -h 'final val loss' "$work/losses_$lvl.log")  [$(awk -v a="$v" -v b="$o0" 'BEGIN {printf "%+.2f %% vs O0", 100 * (a - b) / b}')]"
    else
      say "  $lvl: $(grep -h 'final val loss' "$work/losses_$lvl.log")"
    fi
    grep -h 'falls back' "$work/losses_$lvl.log" 2>/dev/null | head -2 | sed 's/^/    FALLBACK: /' | tee -a "$summary"
  done
}

# NCCL world-size-1 collectives: the NCCL process-group tests, verbose.
section_nccl() {
  say ""
  say "== NCCL (world size 1)"
  local p
  for p in octet_cuda_nccl_group_test octet_cuda_nccl_id_test; do
    need "$B/tests/$p" || continue
    run_logged "$p" "$(budget 60 10)" env NCCL_DEBUG=WARN "$B/tests/$p"
    [ "$dry" = 1 ] && continue
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED  \]' "$work/$p.log" | sed 's/^/    /' | tee -a "$summary"
  done
}

section_trainstep() {
  say ""
  say "== octet_cuda_train_step_bench"
  local b=$B/benchmarks/octet_cuda_train_step_bench
  need "$b" || return
  run_logged trainstep "$(budget 240 200)" "$b" --benchmark_filter='CudaTrainStep/(small|gpt2|medium|w2048)/' \
    --benchmark_counters_tabular=true --benchmark_out="$OUT/train_step.json" --benchmark_out_format=json
  [ "$dry" = 1 ] && return
  grep -E '^CudaTrainStep|^-|ms_per_step|ERROR|error' "$work/trainstep.log" | head -40 | tee -a "$summary"
}

# PyTorch peer: the goal table's torch.compile bf16 first, then eager bf16,
# as long as the budget lasts (results are written after every run, so a
# cut-off keeps what was measured); part 3 runs compiled and eager FP8 and
# fp32.
run_torch() {  # run_torch NAME MODES CAP [MORE ARGS]
  local name=$1 modes=$2 cap=$3
  shift 3
  command -v python3 >/dev/null || { say "MISSING: python3"; return; }
  run_logged "$name" "$cap" python3 "$repo/benchmarks/compare/torch_gpt.py" --sizes gpt2,medium,w2048,small \
    --modes "$modes" --time_budget $((cap - 100 > 30 ? cap - 100 : 30)) --json "$OUT/$name.json" "$@"
  [ "$dry" = 1 ] && return
  grep -E '^torch_(gpt|sdpa)' "$work/$name.log" | tee -a "$summary"
  grep -E 'Error|error' "$work/$name.log" | grep -v '^torch_gpt' | head -5 | tee -a "$summary"
}
section_torch() {
  say ""
  say "== PyTorch peer (benchmarks/compare/torch_gpt.py)"
  run_torch torch_gpt bf16_compile,bf16 "$(budget 330 100)" --sdpa
}
section_torch_extra() {
  say ""
  say "== PyTorch peer, extras (compiled and eager FP8, fp32)"
  run_torch torch_gpt_extra fp8_compile,fp8,fp32 "$(budget 400 100)"
}

section_ratios() {
  say ""
  say "== issue 9 goal table (benchmarks/compare/gpu_ratios.sh)"
  if [ "$dry" = 1 ]; then
    say "[dry-run] sh $repo/benchmarks/compare/gpu_ratios.sh $OUT/train_step.json $OUT/torch_gpt.json"
    return
  fi
  if [ -e "$OUT/torch_gpt.json" ]; then
    sh "$repo/benchmarks/compare/gpu_ratios.sh" "$OUT/train_step.json" "$OUT/torch_gpt.json" 2>&1 | tee -a "$summary"
  else
    sh "$repo/benchmarks/compare/gpu_ratios.sh" "$OUT/train_step.json" 2>&1 | tee -a "$summary"
  fi
}

section_gemm() {
  say ""
  say "== octet_cuda_gemm_bench"
  local b=$B/benchmarks/octet_cuda_gemm_bench
  need "$b" || return
  run_logged gemm "$(budget 120 120)" "$b" --benchmark_counters_tabular=true --benchmark_out="$work/gemm.json" \
    --benchmark_out_format=json
  [ "$dry" = 1 ] && return
  grep -E '^CudaGemm|^Benchmark|ERROR' "$work/gemm.log" | tee -a "$summary"
}

# Attention forward+backward: the public op at the models' head shapes (bf16
# through cuDNN, f32 through the flash kernels), then f32 flash vs unfused.
section_attention() {
  say ""
  say "== octet_cuda_attention_bench, octet_attention_bench --benchmark_filter=Cuda"
  local b=$B/benchmarks/octet_cuda_attention_bench b2=$B/benchmarks/octet_attention_bench
  if need "$b"; then
    run_logged cuda_attention "$(budget 90 100)" "$b" --benchmark_counters_tabular=true
    [ "$dry" = 1 ] || grep -E '^CudaAttention|^Benchmark|ERROR' "$work/cuda_attention.log" | tee -a "$summary"
  fi
  need "$b2" || return
  run_logged attention "$(budget 90 100)" "$b2" --benchmark_filter=Cuda --benchmark_counters_tabular=true
  [ "$dry" = 1 ] && return
  grep -E 'Cuda|^Benchmark|ERROR' "$work/attention.log" | tee -a "$summary"
}

section_cast() {
  say ""
  say "== octet_cuda_cast_bench"
  local b=$B/benchmarks/octet_cuda_cast_bench
  if [ ! -x "$b" ]; then
    say "not built (benchmarks/cuda_cast_bench.cc absent in this build): skipped"
    return
  fi
  run_logged cast "$(budget 120 80)" "$b" --benchmark_counters_tabular=true
  [ "$dry" = 1 ] && return
  grep -v '^\*\*\*' "$work/cast.log" | head -60 | tee -a "$summary"
}

# ncu per-kernel summary of two steps (after the warm-up) of the 2-layer
# GPT-2-width model (OCTET_PROFILE_STEPS in benchmarks/cuda_train_step_bench.cc).
run_ncu() {  # run_ncu LEVEL
  local lvl=$1 ncu b=$B/benchmarks/octet_cuda_train_step_bench rep
  say ""
  say "== ncu: 2 $lvl steps of CudaTrainStep/gpt2_2l (per-kernel summary)"
  need "$b" || return
  ncu=$(find_tool ncu) || { say "MISSING: ncu not found"; return; }
  rep="$work/ncu_$lvl"  # the report itself (.ncu-rep) goes into the logs archive
  run_logged "ncu_$lvl" "$(budget 150 30)" env OCTET_PROFILE_STEPS=2 "$ncu" --profile-from-start off \
    --metrics gpu__time_duration.sum -f -o "$rep" "$b" --benchmark_filter="CudaTrainStep/gpt2_2l/$lvl/"
  [ "$dry" = 1 ] && return
  grep -E 'CudaTrainStep|==PROF==|==ERROR==|==WARNING==' "$work/ncu_$lvl.log" | head -8 | tee -a "$summary"
  [ -e "$rep.ncu-rep" ] || { say "no report written"; return; }
  # The per-kernel summary (as in shared/gpu/H100-2026-11-23.md), then the
  # per-launch durations as CSV, summed here per kernel name.
  "$ncu" --import "$rep.ncu-rep" --print-summary per-kernel >"$OUT/ncu_$lvl.txt" 2>&1
  "$ncu" --import "$rep.ncu-rep" --page raw --csv --print-units base >"$work/ncu_${lvl}_raw.csv" 2>&1
  ncu_top "$work/ncu_${lvl}_raw.csv" | tee -a "$summary"
}

# ncu_top CSV: kernels by total GPU time from ncu's raw page (one quoted row
# per launch, a header row and a units row): launches, total, share.
ncu_top() {
  awk '
    function Fields(line, out,    n) {  # every field is quoted: split on ","
      sub(/^"/, "", line); sub(/"[ \r]*$/, "", line)
      return split(line, out, /","/)
    }
    !h { n = Fields($0, f); for (i = 1; i <= n; i++) { if (f[i] == "Kernel Name") kc = i; if (f[i] == "gpu__time_duration.sum") tc = i }
         if (kc && tc) h = 1; next }
    h && !u { Fields($0, f); unit = f[tc]; u = 1; next }
    { Fields($0, f); v = f[tc]; gsub(/,/, "", v); if (v == "") next
      scale = unit ~ /^us/ ? 1e3 : unit ~ /^ms/ ? 1e6 : unit ~ /^s/ ? 1e9 : 1  # to ns
      name = f[kc]; t[name] += v * scale; c[name]++; total += v * scale; launches++ }
    END {
      if (!launches) { print "  (could not read the raw CSV: see ncu_*.txt and the report in the logs)"; exit }
      printf "  %d launches, %.3f ms GPU time in all (both steps)\n", launches, total / 1e6
      for (k in t) printf "%.0f\t%d\t%s\n", t[k], c[k], k | "sort -t \"\t\" -k1,1 -n -r | head -15"
      close("sort -t \"\t\" -k1,1 -n -r | head -15")
    }' "$1" | awk -F '\t' 'NF == 3 {printf "  %9.1f us %4d x  %s\n", $1 / 1e3, $2, substr($3, 1, 110); next} {print}'
}

# ---- run -------------------------------------------------------------------------------------------
losses_started=0
for s in $sections; do
  case "$s" in
    info) section_info ;;
    tests) section_tests ;;
    sanitizer)
      # The 3000-step loss runs overlap the sanitizer (both mostly wait on the GPU).
      case " $sections " in *" losses "*) start_losses; losses_started=1 ;; esac
      section_sanitizer ;;
    train) section_train ;;
    losses)
      [ "$losses_started" = 1 ] || start_losses
      collect_losses ;;
    nccl) section_nccl ;;
    trainstep) section_trainstep ;;
    torch) section_torch ;;
    torch_extra) section_torch_extra ;;
    ratios) section_ratios ;;
    gemm) section_gemm ;;
    attention) section_attention ;;
    cast) section_cast ;;
    ncu) run_ncu O1 ;;
    ncu_o2) run_ncu O2 ;;
  esac
done

say ""
say "finished after $(elapsed) s"
if [ "$dry" != 1 ]; then
  [ -e "$work/gemm.json" ] && cp "$work/gemm.json" "$OUT/gemm.json"
  tar -czf "$OUT/part${part}_logs.tar.gz" -C "$work" . 2>/dev/null || say "tar of the logs failed"
fi
rm -rf "$work"
