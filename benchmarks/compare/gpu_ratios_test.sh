#!/bin/sh
# Test of gpu_ratios.sh on hand-made JSON (benchmarks/compare/testdata/):
# the goal rows must show the ratios worked out by hand from the sample
# figures, compact JSON must read like pretty JSON, braces and quotes inside
# strings must not make records, failed benchmarks must be listed, and bad
# arguments must fail. Run by ctest (compare.GpuRatios); AWK=... picks the awk.
set -u
here=$(cd "$(dirname "$0")" && pwd)
data="$here/testdata"
script="$here/gpu_ratios.sh"
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_line OUTPUT LINE: LINE (after squeezing blanks) is one of OUTPUT's lines.
expect_line() {
  if ! printf '%s\n' "$1" | tr -s ' ' | grep -qxF -- "$2"; then
    fail "missing line: '$2'"
  fi
}

out=$(sh "$script" "$data/octet_train_step.json" "$data/torch_gpt.json") || fail "exit status $? on good input"

# Step times (octet O0/O1/O2 | torch fp32 bf16 bf16_compile fp8 fp8_compile).
expect_line "$out" "gpt2 261.60 50.10 25.00 | 119.00 27.70 27.50 n/a 31.50"
expect_line "$out" "w2048 n/a 162.20 86.90 | n/a n/a 68.70 n/a n/a"
# O2 ms / O1 ms: 25.0/50.1, 66.0/52.0, 86.9/162.2.
expect_line "$out" "gpt2 O1 vs O2 step (O2 ms / O1 ms) 0.50x >= 1.05 NOT met 0.50x"
expect_line "$out" "medium O1 vs O2 step (O2 ms / O1 ms) 1.27x >= 1.25 met 0.39x"
expect_line "$out" "w2048 O1 vs O2 step (O2 ms / O1 ms) 0.54x >= 1.4 NOT met 0.54x"
# torch.compile bf16 ms / O2 ms: 27.5/25.0, 48.9/66.0, 68.7/86.9.
expect_line "$out" "gpt2 O2 vs torch.compile bf16 1.10x >= 1.1 met 0.94x"
expect_line "$out" "medium O2 vs torch.compile bf16 0.74x >= 1.1 NOT met 0.74x"
expect_line "$out" "w2048 O2 vs torch.compile bf16 0.79x >= 1.1 NOT met 0.79x"
expect_line "$out" "small O2 step, ms (eager) 2.40 <= 2.5 met 6.10"
# A /graph benchmark is its own figure, not the eager step's.
expect_line "$out" "small O2 step, ms (CUDA graph) 1.20 <= 2.5 met n/a"
expect_line "$out" "small O2 CUDA graph vs eager 2.00x "
# Memory O1/O2: reserved 4000/5000, allocated 3600/4800.
expect_line "$out" "gpt2 GPU memory O1 / O2 (peak reserved) 0.80x <= 0.8 met 0.95x (nvidia-smi)"
expect_line "$out" "gpt2 GPU memory O1 / O2 (peak allocated) 0.75x "
# Extras: fp8_compile 31.5/50.1, bf16 eager 27.7/25.0, fp32 119/261.6.
expect_line "$out" "gpt2 O1 vs torch.compile fp8 0.63x "
expect_line "$out" "gpt2 O2 vs torch bf16 eager 1.11x "
expect_line "$out" "gpt2 O0 vs torch fp32 0.45x "
expect_line "$out" "WARNING: w2048 O1: 1 attention fallback(s)"
expect_line "$out" " octet CudaTrainStep/w2048/O0/iterations:5/manual_time: cuda:0: out of memory allocating 1.5 GiB, {\"quoted\", braces}"
# The torch "skipped" entry holds a record-like string: it must not become a size.
if printf '%s\n' "$out" | grep -q '^x '; then fail "a string inside a value was read as a record"; fi
sizes=$(printf '%s\n' "$out" | sed -n '/^size /,/^$/p' | awk 'NR > 1 && NF > 0 {printf "%s ", $1}')
[ "$sizes" = "small gpt2 medium w2048 " ] || fail "sizes listed: '$sizes'"

# Compact (one-line) JSON gives the same figures.
compact=$(sh "$script" "$data/octet_train_step.json" "$data/torch_gpt_compact.json") || fail "exit status on compact JSON"
[ "$(printf '%s\n' "$out" | sed 1d)" = "$(printf '%s\n' "$compact" | sed 1d)" ] || fail "compact JSON reads differently"

# Without the torch file: octet figures stay, torch ratios are n/a.
alone=$(sh "$script" "$data/octet_train_step.json") || fail "exit status without torch file"
expect_line "$alone" "gpt2 O1 vs O2 step (O2 ms / O1 ms) 0.50x >= 1.05 NOT met 0.50x"
expect_line "$alone" "gpt2 O2 vs torch.compile bf16 n/a >= 1.1 n/a 0.94x"

# Bad arguments.
sh "$script" >/dev/null 2>&1
[ $? -eq 2 ] || fail "no arguments should exit 2"
err=$(sh "$script" "$data/no_such_file.json" 2>&1 >/dev/null)
[ $? -eq 2 ] || fail "a missing file should exit 2"
case "$err" in *"cannot read"*no_such_file.json*) ;; *) fail "missing-file message: '$err'" ;; esac

if [ "$failures" -ne 0 ]; then
  echo "gpu_ratios_test: $failures failure(s); output was:"
  printf '%s\n' "$out"
  exit 1
fi
echo "gpu_ratios_test: all checks passed"
