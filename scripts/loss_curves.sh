#!/usr/bin/env bash
# Trains the default GPT on the default corpus at amp levels O0, O1 and O2
# (same seed, same data order), writes each run's metrics as CSV, and plots
# training and validation loss with gnuplot into docs/loss_curves.png.
#   scripts/loss_curves.sh [extra train_gpt flags...]
# Environment: BUILD_DIR (default build), OUT_DIR (default build/loss_curves),
# PLOT_ONLY=1 to re-plot existing CSVs.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
out_dir=${OUT_DIR:-$build_dir/loss_curves}
mkdir -p "$out_dir" docs
if [ "${PLOT_ONLY:-0}" != 1 ]; then
  bash scripts/setup.sh
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_BUILD_EXAMPLES=ON >/dev/null
  cmake --build "$build_dir" -j "$(nproc)" --target train_gpt
  for level in O0 O1 O2; do
    echo "== training at $level"
    "$build_dir/examples/gpt/train_gpt" --amp "$level" --metrics "$out_dir/$level.csv" "$@" \
      | tee "$out_dir/$level.log"
  done
fi
gnuplot <<GNUPLOT
set terminal pngcairo size 1000,600 enhanced font "DejaVu Sans,11" noenhanced
set output "docs/loss_curves.png"
set datafile separator ","
set key top right
set grid
set xlabel "step"
set ylabel "cross-entropy (nats/byte)"
set title "octet GPT on Debian fortunes: O0 (FP32) vs O1 (FP8) vs O2 (BF16)"
plot "$out_dir/O0.csv" every ::1 using 1:2 with lines lw 1 lc rgb "#9ecae1" title "O0 train", \
     "$out_dir/O1.csv" every ::1 using 1:2 with lines lw 1 lc rgb "#fdae6b" title "O1 train", \
     "$out_dir/O2.csv" every ::1 using 1:2 with lines lw 1 lc rgb "#a1d99b" title "O2 train", \
     "< grep -v ',\$' $out_dir/O0.csv" every ::1 using 1:9 with linespoints lw 2 pt 7 lc rgb "#08519c" title "O0 validation", \
     "< grep -v ',\$' $out_dir/O1.csv" every ::1 using 1:9 with linespoints lw 2 pt 5 lc rgb "#d94801" title "O1 validation", \
     "< grep -v ',\$' $out_dir/O2.csv" every ::1 using 1:9 with linespoints lw 2 pt 9 lc rgb "#238b45" title "O2 validation"
GNUPLOT
echo "wrote docs/loss_curves.png"
