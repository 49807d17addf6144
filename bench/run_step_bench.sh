#!/usr/bin/env bash
# Side-by-side training-step benchmark: psync-step-bench vs bench/torch_step.py
# (Debian's python3-torch), same MLP, batch and thread count.
#
#   bench/run_step_bench.sh                      # defaults below
#   THREADS=2 STEPS=10 WIDTHS=512,2048,512 bench/run_step_bench.sh
#   bench/run_step_bench.sh --device=cuda        # extra flags go to both sides
#
# Environment: WIDTHS (1024,4096,4096,1024), BATCH (256), STEPS (20),
# WARMUP (3), THREADS (nproc), DEVICE (cpu), BUILD_DIR (<repo>/build),
# ROUNDS (1: each round runs psync then torch; the table shows the best
# median of each, which is the least disturbed by other load on the machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
WIDTHS="${WIDTHS:-1024,4096,4096,1024}"
BATCH="${BATCH:-256}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-3}"
THREADS="${THREADS:-$(nproc)}"
DEVICE="${DEVICE:-cpu}"
ROUNDS="${ROUNDS:-1}"

source "$ROOT/bench/lib.sh"
BENCH=$(bench_build psync-step-bench)
bench_same_kernels "$BENCH"
have_torch=1
bench_have_torch || have_torch=0
bench_same_threads "$THREADS"

common=(--widths="$WIDTHS" --batch="$BATCH" --steps="$STEPS" --warmup="$WARMUP" --threads="$THREADS" --device="$DEVICE" "$@")
RESULTS=()
for ((r = 1; r <= ROUNDS; r++)); do
  bench_side "round $r/$ROUNDS" "$BENCH" "${common[@]}"
  if [[ $have_torch -eq 1 ]]; then
    bench_side "round $r/$ROUNDS" "$PY" "$ROOT/bench/torch_step.py" "${common[@]}"
  fi
done

echo
echo "MLP $WIDTHS, batch $BATCH, $THREADS threads, device $DEVICE, $STEPS steps x $ROUNDS round(s)"
printf '%s\n' "${RESULTS[@]}" | awk '
  {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    impl = v["impl"]
    if (!(impl in med) || v["median_ms"] + 0 < med[impl]) { med[impl] = v["median_ms"] + 0; mean[impl] = v["mean_ms"] + 0; mn[impl] = v["min_ms"] + 0 }
  }
  END {
    printf "%-8s %14s %14s %12s\n", "impl", "median ms/step", "mean ms/step", "min ms"
    for (k in med) printf "%-8s %14.2f %14.2f %12.2f\n", k, med[k], mean[k], mn[k]
    if (("psync" in med) && ("torch" in med) && med["torch"] > 0)
      printf "ratio psync/PyTorch (median): %.2fx  (<1 = psync faster)\n", med["psync"] / med["torch"]
  }'
