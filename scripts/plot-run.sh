#!/usr/bin/env bash
# Draws a run's per-step metrics as one PNG: training loss and validation
# loss per step (rank 0), and step time per rank. Reads the JSON-lines files
# psync-worker writes with --metrics (DIR/metrics-{rank}.jsonl; the main job
# writes them in its output directory) and plots with gnuplot (Debian's
# gnuplot-nox, installed when missing and run as root).
#
#   scripts/plot-run.sh DIR [OUT.png]      (default OUT: DIR/run.png)
set -euo pipefail
dir=${1:?usage: scripts/plot-run.sh DIR [OUT.png]}
out=${2:-$dir/run.png}
shopt -s nullglob
files=("$dir"/metrics-*.jsonl)
((${#files[@]} > 0)) || { echo "plot-run: no metrics-*.jsonl in $dir (run psync-worker with --metrics=DIR/metrics-{rank}.jsonl)" >&2; exit 2; }
if ! command -v gnuplot >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends gnuplot-nox >&2
  else
    echo "plot-run: gnuplot is missing; install it with: sudo apt-get install -y gnuplot-nox" >&2
    exit 1
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# JSON lines -> whitespace-separated columns (step loss val_loss step_ms),
# one awk pass per file; a missing or null field becomes NaN.
for f in "${files[@]}"; do
  rank=$(basename "$f" .jsonl); rank=${rank#metrics-}
  awk '
    function get(k,   m) {
      if (match($0, "\"" k "\": *[^,}]*")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); return m == "null" ? "NaN" : m }
      return "NaN"
    }
    { print get("step"), get("loss"), get("val_loss"), get("step_ms") }' "$f" >"$tmp/rank$rank.dat"
done
ranks=$(ls "$tmp" | sed 's/rank\(.*\)\.dat/\1/' | sort -n)
first=$(head -1 <<<"$ranks")

{
  echo "set terminal pngcairo size 1200,900 font ',11'"
  echo "set output '$out'"
  echo "set multiplot layout 2,1 title 'psync run: $(basename "$dir")'"
  echo "set datafile missing 'NaN'"
  echo "set grid; set key top right; set xlabel 'step'; set ylabel 'loss (nats)'"
  echo "plot '$tmp/rank$first.dat' using 1:2 with lines lw 1.5 title 'train loss (rank $first)', \\"
  echo "     '$tmp/rank$first.dat' using 1:3 with linespoints pt 7 ps 0.8 lw 2 title 'validation loss'"
  echo "set ylabel 'step time (ms)'; set logscale y"
  printf "plot "
  sep=""
  for r in $ranks; do printf "%s'%s' using 1:4 with lines title 'rank %s'" "$sep" "$tmp/rank$r.dat" "$r"; sep=", "; done
  echo
  echo "unset multiplot"
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "plot-run: wrote $out"
