#!/bin/sh
# Issue 9's goal table from one GPU session's JSON outputs (POSIX sh + awk).
#
#   sh benchmarks/compare/gpu_ratios.sh OCTET_JSON [TORCH_JSON]
#
# OCTET_JSON: octet_cuda_train_step_bench --benchmark_out=FILE
#             --benchmark_out_format=json (or --benchmark_format=json > FILE);
#             benchmarks named CudaTrainStep/<size>/<O0|O1|O2>[/...].
# TORCH_JSON: benchmarks/compare/torch_gpt.py --json FILE; records with
#             "size", "mode", "ms_per_step", "peak_reserved_MiB" (optional).
#
# Prints every step time side by side, then the goal rows (ratios are
# speed-ups: the other step's time over this one's, so > 1 means faster):
#   <size> O1 vs O2 step        O2 ms / O1 ms          gpt2 >= 1.05, medium >= 1.25, w2048 >= 1.4
#   <size> O2 vs torch.compile  bf16_compile ms / O2 ms   >= 1.1 (gpt2, medium, w2048)
#   small O2 step               ms                     <= 2.5 (eager, and replayed from a CUDA graph:
#                                                      CudaTrainStep/small/O2/graph)
#   gpt2 GPU memory O1 vs O2    O1 / O2 peak reserved  <= 0.8 (also peak allocated, for reference)
# A figure whose inputs are missing prints "n/a". Exit status: 0 when the
# files were read (whatever the figures), 2 on a usage error or unreadable file.
# AWK=... chooses the awk (any POSIX awk: mawk, gawk, nawk).
set -eu

if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
  echo "usage: gpu_ratios.sh OCTET_JSON [TORCH_JSON]" >&2
  exit 2
fi
for f in "$@"; do
  if [ ! -r "$f" ]; then
    echo "gpu_ratios.sh: cannot read '$f'" >&2
    exit 2
  fi
done
"${AWK:-awk}" -v octet_file="$1" -v torch_file="${2:-}" '
# ---- a small JSON reader: objects become records of key -> scalar ---------------------
# Tokens are scanned character by character (strings with escapes, numbers,
# literals); at each "}" the innermost object is handed to Emit() with its
# scalar fields (nested objects and arrays are handled as their own records).
function Emit(d,    name, lvl, size, n, parts) {
  name = R[d, "name"]
  if (FNR_FILE == 1 && name ~ /^CudaTrainStep\//) {
    if (R[d, "error_occurred"] == "true") { errors = errors "\n  octet " name ": " R[d, "error_message"]; return }
    if (R[d, "run_type"] == "aggregate" && R[d, "aggregate_name"] != "median") return
    n = split(name, parts, "/")
    size = parts[2]; lvl = parts[3]
    if (!(lvl ~ /^O[012]$/)) return
    if (n >= 4 && parts[4] == "graph") { OGMS[size, lvl] = R[d, "ms_per_step"]; return }
    OMS[size, lvl] = R[d, "ms_per_step"]
    ORES[size, lvl] = R[d, "peak_reserved_MiB"]
    OALLOC[size, lvl] = R[d, "peak_alloc_MiB"]
    OFALL[size, lvl] = R[d, "attn_fallbacks"]
    OREADS[size, lvl] = R[d, "host_reads/step"]
    Seen(size)
  } else if (FNR_FILE == 2 && ((d, "mode") in R) && ((d, "size") in R) && ((d, "ms_per_step") in R)) {
    TMS[R[d, "size"], R[d, "mode"]] = R[d, "ms_per_step"]
    TRES[R[d, "size"], R[d, "mode"]] = R[d, "peak_reserved_MiB"]
    TALLOC[R[d, "size"], R[d, "mode"]] = R[d, "peak_alloc_MiB"]
    Seen(R[d, "size"])
  }
}
function Seen(size) { if (!(size in SEEN)) { SEEN[size] = 1; ORDER[++nsizes] = size } }
function ClearDepth(d,    k, parts) {
  for (k in R) { split(k, parts, SUBSEP); if (parts[1] == d) delete R[k] }
}
function Value(d, v) {
  if (key != "") R[d, key] = v
  key = ""
}
# Scans one line of JSON, carrying depth and key over from the previous line.
function Scan(line,    i, n, c, s, j) {
  i = 1; n = length(line)
  while (i <= n) {
    c = substr(line, i, 1)
    if (c == "{") { depth++; ClearDepth(depth); key = ""; i++ }
    else if (c == "}") { Emit(depth); ClearDepth(depth); depth--; key = ""; i++ }
    else if (c == "[" || c == "]") { key = ""; i++ }
    else if (c == "\"") {
      s = ""; i++
      while (i <= n) {
        c = substr(line, i, 1)
        if (c == "\\") { s = s substr(line, i + 1, 1); i += 2; continue }
        if (c == "\"") { i++; break }
        s = s c; i++
      }
      # A key when the next non-blank character is ":".
      j = i
      while (j <= n && substr(line, j, 1) ~ /[ \t\r]/) j++
      if (substr(line, j, 1) == ":") key = s
      else Value(depth, s)
    }
    else if (c ~ /[-0-9tfn]/) {
      s = ""
      while (i <= n && substr(line, i, 1) ~ /[-+0-9.eEtruefalsn]/) { s = s substr(line, i, 1); i++ }
      Value(depth, s)
    }
    else i++  # blanks, ":" and ","
  }
}

# ---- formatting -----------------------------------------------------------------------------
function Num(x) { return x != "" && x + 0 > 0 }
function Ms(x) { return Num(x) ? sprintf("%.2f", x) : "n/a" }
function Ratio(num, den) { return (Num(num) && Num(den)) ? sprintf("%.2fx", num / den) : "n/a" }
function Met(num, den, goal, ge,    r) {
  if (!(Num(num) && Num(den))) return "n/a"
  r = num / den
  return (ge ? r >= goal : r <= goal) ? "met" : "NOT met"
}
function Row(figure, value, goal, met, was) { printf "%-44s %-9s %-9s %-8s %s\n", figure, value, goal, met, was }

BEGIN {
  # Read the octet file, then the torch file, with the same scanner.
  files[1] = octet_file; files[2] = torch_file; nfiles = torch_file == "" ? 1 : 2
  for (FNR_FILE = 1; FNR_FILE <= nfiles; FNR_FILE++) {
    depth = 0; key = ""
    while ((getline line < files[FNR_FILE]) > 0) Scan(line)
    close(files[FNR_FILE])
  }

  printf "step times, ms (octet: %s; torch: %s)\n", octet_file, torch_file == "" ? "none" : torch_file
  printf "%-8s %8s %8s %8s | %8s %8s %8s %8s %8s\n", "size", "O0", "O1", "O2", "fp32", "bf16", "bf16_cmp", "fp8", "fp8_cmp"
  for (k = 1; k <= nsizes; k++) {
    z = ORDER[k]
    printf "%-8s %8s %8s %8s | %8s %8s %8s %8s %8s\n", z, Ms(OMS[z, "O0"]), Ms(OMS[z, "O1"]), Ms(OMS[z, "O2"]),
           Ms(TMS[z, "fp32"]), Ms(TMS[z, "bf16"]), Ms(TMS[z, "bf16_compile"]), Ms(TMS[z, "fp8"]), Ms(TMS[z, "fp8_compile"])
  }
  print ""
  print "issue 9 goals (a ratio > 1 means the first named is faster)"
  Row("figure", "value", "goal", "met?", "H100 file (2026-11-23)")
  split("gpt2 medium w2048", big, " ")
  goal["gpt2"] = 1.05; goal["medium"] = 1.25; goal["w2048"] = 1.4
  # The "now" column of issue 9 (shared/gpu/H100-2026-11-23.md), for reading progress.
  was_o1["gpt2"] = "0.50x"; was_o1["medium"] = "0.39x"; was_o1["w2048"] = "0.54x"
  was_tc["gpt2"] = "0.94x"; was_tc["medium"] = "0.74x"; was_tc["w2048"] = "0.79x"
  for (k = 1; k <= 3; k++) {
    z = big[k]
    Row(z " O1 vs O2 step (O2 ms / O1 ms)", Ratio(OMS[z, "O2"], OMS[z, "O1"]), ">= " goal[z],
        Met(OMS[z, "O2"], OMS[z, "O1"], goal[z], 1), was_o1[z])
  }
  for (k = 1; k <= 3; k++) {
    z = big[k]
    Row(z " O2 vs torch.compile bf16", Ratio(TMS[z, "bf16_compile"], OMS[z, "O2"]), ">= 1.1",
        Met(TMS[z, "bf16_compile"], OMS[z, "O2"], 1.1, 1), was_tc[z])
  }
  Row("small O2 step, ms (eager)", Ms(OMS["small", "O2"]), "<= 2.5", Met(OMS["small", "O2"], 1, 2.5, 0), "6.10")
  Row("small O2 step, ms (CUDA graph)", Ms(OGMS["small", "O2"]), "<= 2.5", Met(OGMS["small", "O2"], 1, 2.5, 0), "n/a")
  Row("gpt2 GPU memory O1 / O2 (peak reserved)", Ratio(ORES["gpt2", "O1"], ORES["gpt2", "O2"]), "<= 0.8",
      Met(ORES["gpt2", "O1"], ORES["gpt2", "O2"], 0.8, 0), "0.95x (nvidia-smi)")
  Row("gpt2 GPU memory O1 / O2 (peak allocated)", Ratio(OALLOC["gpt2", "O1"], OALLOC["gpt2", "O2"]), "", "")
  print ""
  print "more (not goals)"
  for (k = 1; k <= 3; k++) {
    z = big[k]
    Row(z " O1 vs torch.compile fp8", Ratio(TMS[z, "fp8_compile"], OMS[z, "O1"]), "", "")
    Row(z " O2 vs torch bf16 eager", Ratio(TMS[z, "bf16"], OMS[z, "O2"]), "", "")
  }
  Row("gpt2 O0 vs torch fp32", Ratio(TMS["gpt2", "fp32"], OMS["gpt2", "O0"]), "", "")
  for (lv = 0; lv <= 2; lv++) {
    Row("small O" lv " CUDA graph vs eager", Ratio(OMS["small", "O" lv], OGMS["small", "O" lv]), "", "")
    Row("gpt2 O" lv " CUDA graph vs eager", Ratio(OMS["gpt2", "O" lv], OGMS["gpt2", "O" lv]), "", "")
  }
  Row("gpt2 peak alloc O1 / torch bf16_compile", Ratio(OALLOC["gpt2", "O1"], TALLOC["gpt2", "bf16_compile"]), "", "")
  for (k = 1; k <= nsizes; k++)
    for (lv = 0; lv <= 2; lv++) {
      z = ORDER[k]
      if (((z, "O" lv) in OFALL) && OFALL[z, "O" lv] + 0 > 0)
        print "WARNING: " z " O" lv ": " OFALL[z, "O" lv] " attention fallback(s)"
      if (((z, "O" lv) in OREADS) && OREADS[z, "O" lv] + 0 > 0)
        print "note: " z " O" lv ": " OREADS[z, "O" lv] " host reads per step"
    }
  if (errors != "") print "benchmarks that failed or skipped:" errors
}
'
